import { chmod, mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import {
  accountsBlock,
  builtinTools,
  ConfigError,
  type ConfiguredUser,
  describeRole,
  inboxOf,
  isIdentityName,
  loadPipeline,
  type Role,
} from '@troupe/coordinator';
import { createNkeyUser } from '@troupe/runtime';
import { CliError } from '../server.ts';
import { importToolModule } from '../toolModuleImport.ts';

export interface NatsConfigOptions {
  out: string;
  coordinator: string[];
  worker: string[];
  submitter: string[];
  observer: string[];
  approver: string[];
  evaluator: string[];
  gateway: string[];
  replicas?: number;
}

/**
 * `troupe nats-config`: a nats-server `accounts` block with one nkey user per role instance, each allowed the
 * least its role needs (docs/permissions.md), and each user's seed and environment. Pipelines and agents named in
 * the roles are checked against the pipeline files.
 */
export async function natsConfig(files: string[], options: NatsConfigOptions): Promise<number> {
  const pipelines = new Map<string, string[]>();
  for (const file of files) {
    try {
      const { config } = await loadPipeline(file, {
        toolNames: builtinTools().names(),
        requireKeys: false,
        allowMcpCommands: true,
        importModule: importToolModule,
      });
      pipelines.set(config.name, Object.keys(config.agents));
    } catch (error) {
      if (error instanceof ConfigError) throw new CliError(error.message, 2);
      throw error;
    }
  }
  const roles = rolesOf(options, pipelines);
  const out = resolve(options.out);
  await mkdir(out, { recursive: true });
  const users: ConfiguredUser[] = [];
  for (const role of roles) {
    const user = createNkeyUser();
    const seedFile = join(out, `${role.name}.nk`);
    await writeFile(seedFile, `${user.seed}\n`, { mode: 0o600 });
    await chmod(seedFile, 0o600);
    await writeFile(
      join(out, `${role.name}.env`),
      // Plain NAME=value lines, so `env $(cat <name>.env) troupe …` works.
      envOf(role, seedFile),
    );
    users.push({ role, nkey: user.publicKey });
  }
  const header = [
    '# Troupe users for nats-server (written by `troupe nats-config`): include this file in the server',
    '# configuration (`include "troupe-auth.conf"`), then reload the server (nats-server --signal reload).',
    '# Each user logs in with its nkey seed (<name>.nk) and its own inbox prefix (<name>.env); see',
    '# docs/permissions.md for what each role may do.',
    '',
  ].join('\n');
  await writeFile(
    join(out, 'troupe-auth.conf'),
    `${header}${accountsBlock(users, options.replicas, [...pipelines.keys()])}`,
  );
  process.stdout.write(
    `wrote ${join(out, 'troupe-auth.conf')} with ${users.length} user${users.length === 1 ? '' : 's'}:\n${users
      .map(({ role }) => `  ${role.name}: ${describeRole(role)} (${role.name}.nk, ${role.name}.env)`)
      .join('\n')}\n`,
  );
  return 0;
}

/** The roles the options name, checked: unique names that can be subject tokens, pipelines and agents that exist. */
function rolesOf(options: NatsConfigOptions, pipelines: Map<string, string[]>): Role[] {
  const pipelineOf = (name: string, what: string) => {
    if (!pipelines.has(name)) {
      throw new CliError(
        `${what}: no pipeline named "${name}" in the files given (${[...pipelines.keys()].join(', ') || 'none'})`,
        2,
      );
    }
    return name;
  };
  /** `name=value`, the form every role but a coordinator takes. */
  const split = (spec: string, flag: string, form: string): [string, string] => {
    const at = spec.indexOf('=');
    if (at < 1) throw new CliError(`--${flag} takes ${form}, got "${spec}"`, 2);
    return [spec.slice(0, at), spec.slice(at + 1)];
  };
  const list = (value: string) =>
    value
      .split(',')
      .map((v) => v.trim())
      .filter(Boolean);
  const roles: Role[] = [
    ...options.coordinator.map((name): Role => ({ kind: 'coordinator', name })),
    ...options.gateway.map((name): Role => ({ kind: 'gateway', name })),
  ];
  for (const spec of options.worker) {
    const [name, value] = split(spec, 'worker', '<name>=<pipeline>:<agent>[,<agent>…]');
    const [pipeline = '', agentList = ''] = value.split(':');
    const known = pipelines.get(pipelineOf(pipeline, `--worker ${spec}`)) ?? [];
    const agents = list(agentList);
    if (agents.length === 0) throw new CliError(`--worker ${spec}: name the agents it serves, after ":"`, 2);
    for (const agent of agents) {
      if (!known.includes(agent)) {
        throw new CliError(
          `--worker ${spec}: pipeline ${pipeline} has no agent "${agent}" (it has ${known.join(', ')})`,
          2,
        );
      }
    }
    for (const agent of agents) {
      // Each role has a NATS account of its own, and an agent's requests are served from one account.
      const other = roles.find(
        (r) => r.kind === 'worker' && r.pipeline === pipeline && r.agents.includes(agent),
      );
      if (other) {
        throw new CliError(
          `--worker ${spec}: agent ${agent} of ${pipeline} is served by worker ${other.name} already; run more processes of that worker instead (they share its credentials)`,
          2,
        );
      }
    }
    roles.push({ kind: 'worker', name, pipeline, agents });
  }
  for (const kind of ['submitter', 'observer', 'approver', 'evaluator'] as const) {
    for (const spec of options[kind]) {
      const [name, value] = split(spec, kind, '<name>=<pipeline>[,<pipeline>…]');
      const names = list(value).map((p) => pipelineOf(p, `--${kind} ${spec}`));
      if (names.length === 0) throw new CliError(`--${kind} ${spec}: name its pipelines, after "="`, 2);
      roles.push({ kind, name, pipelines: names });
    }
  }
  const seen = new Set<string>();
  for (const role of roles) {
    if (!isIdentityName(role.name)) {
      throw new CliError(`"${role.name}" cannot name a NATS user here: use a-z, 0-9 and "-"`, 2);
    }
    if (seen.has(role.name))
      throw new CliError(`two roles are named "${role.name}"; each user needs a name of its own`, 2);
    seen.add(role.name);
  }
  if (!roles.some((r) => r.kind === 'coordinator')) {
    throw new CliError('name at least one coordinator: workers reply to coordinators', 2);
  }
  return roles;
}

/**
 * A user's settings for `troupe`: its seed, its inbox, and for an approver or an observer the pipelines whose
 * requests it may read (`troupe approvals` and `troupe status` read only theirs).
 */
function envOf(role: Role, seedFile: string): string {
  const lines = [`NATS_NKEY=${seedFile}`, `TROUPE_INBOX=${inboxOf(role.name)}`];
  if (role.kind === 'approver' || role.kind === 'observer')
    lines.push(`TROUPE_PIPELINES=${role.pipelines.join(',')}`);
  return `${lines.join('\n')}\n`;
}
