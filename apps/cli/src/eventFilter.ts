import { suggestion } from '@troupe/coordinator';
import { EVENT_KINDS, type TroupeEvent } from '@troupe/protocol';
import { CliError } from './cliError.ts';

/** The kinds `--kind` takes: every event kind, and the reports of invalid messages. */
const KINDS: readonly string[] = [...EVENT_KINDS, 'message.invalid'];
const FAMILIES = new Set(KINDS.map((kind) => kind.split('.')[0]));

/** Which events `tail` shows: `--agent`, `--kind`. */
export interface EventFilter {
  event(event: TroupeEvent): boolean;
  /** Reports of invalid messages name no agent: shown unless an agent is asked for, or other kinds only. */
  invalid: boolean;
}

/**
 * The kinds named by `--kind` values, each repeatable and comma-separated; `llm.*` names a family. An unknown
 * kind is refused with exit code 2, with the closest one.
 */
export function parseKinds(values: readonly string[]): Set<string> {
  const kinds = new Set<string>();
  for (const name of values.flatMap((value) => value.split(',')).map((v) => v.trim())) {
    if (name === '') continue;
    const family = name.endsWith('.*') ? name.slice(0, -2) : undefined;
    if (family !== undefined && FAMILIES.has(family)) {
      for (const kind of KINDS) if (kind.startsWith(`${family}.`)) kinds.add(kind);
      continue;
    }
    if (!KINDS.includes(name)) {
      throw new CliError(
        `--kind: no event kind "${name}"${suggestion(name, KINDS)}; kinds: ${KINDS.join(', ')}`,
        2,
      );
    }
    kinds.add(name);
  }
  return kinds;
}

/** Shows what matches every filter given: an agent (as sender, recipient or the agent the data names) and kinds. */
export function eventFilter(options: { agent?: string; kinds?: ReadonlySet<string> }): EventFilter {
  const { agent, kinds } = options;
  const kindsShown = kinds === undefined || kinds.size === 0 ? undefined : kinds;
  return {
    event: (event) =>
      (kindsShown === undefined || kindsShown.has(event.kind)) &&
      (agent === undefined || involves(event, agent)),
    invalid: agent === undefined && (kindsShown === undefined || kindsShown.has('message.invalid')),
  };
}

function involves(event: TroupeEvent, agent: string): boolean {
  if (event.from === agent || event.to === agent) return true;
  return 'agent' in event.data && event.data.agent === agent;
}
