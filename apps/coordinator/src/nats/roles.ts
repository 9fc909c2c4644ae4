import { BUCKETS, STREAMS, subjects } from '@troupe/protocol';

/**
 * The parts of a Troupe deployment, each a NATS user of its own (`troupe nats-config` makes one per instance).
 * docs/permissions.md says what each may do, and what the broker then guarantees.
 */
export type Role =
  /** Runs workflows (`troupe up --no-agents`): the trusted core, which may do anything on Troupe's subjects. */
  | { kind: 'coordinator'; name: string }
  /** Serves `agents` of `pipeline` (`troupe worker --agents`). */
  | { kind: 'worker'; name: string; pipeline: string; agents: readonly string[] }
  /** Submits tasks to `pipelines` and follows their events (`troupe submit --wait`). */
  | { kind: 'submitter'; name: string; pipelines: readonly string[] }
  /** Reads `pipelines`' events and task records (`troupe tail --pipeline`, `status`, `logs`). */
  | { kind: 'observer'; name: string; pipelines: readonly string[] }
  /** Decides approvals and answers questions (`troupe approve`, `deny`, `answer`, `approvals`). */
  | { kind: 'approver'; name: string; pipelines: readonly string[] };

/** nats-server subject permissions, as its configuration writes them. */
export interface Permissions {
  publish: { allow: string[]; deny?: string[] };
  subscribe: { allow: string[]; deny?: string[] };
  /** The user may reply to requests it received (once each, within 2 minutes). */
  allow_responses?: boolean;
}

/** The inbox prefix of a role's user: replies to its requests come there, and only it may read them. */
export const inboxOf = (name: string): string => `${subjects.inboxPrefix}.${name}`;

/** A role's user name: a subject token, so it can name the user's inbox. */
export const isIdentityName = (name: string): boolean => /^[a-z0-9][a-z0-9-]{0,62}$/.test(name);

/**
 * The least a role needs, as subject permissions. `coordinators` are the coordinator users there are: workers reply
 * to their inboxes.
 */
export function permissionsOf(role: Role, coordinators: readonly string[]): Permissions {
  const inbox = `${inboxOf(role.name)}.>`;
  // Every client: its own replies; the JetStream probe; reports of messages it could not read.
  const common = { publish: ['$JS.API.INFO', subjects.invalid], subscribe: [inbox] };
  switch (role.kind) {
    case 'coordinator':
      return {
        publish: {
          allow: [
            ...common.publish,
            '$JS.API.>',
            '$KV.>',
            '$JS.ACK.>',
            '$JS.FC.>',
            // Every Troupe subject, the inboxes under troupe._inbox included (it hosts agents that answer steps).
            'troupe.>',
          ],
        },
        subscribe: {
          allow: [
            ...common.subscribe,
            subjects.allTasks,
            'troupe.agents.>',
            subjects.allEvents,
            subjects.allControl,
            'troupe.approvals.>',
          ],
        },
        allow_responses: true,
      };
    case 'worker': {
      const { pipeline, agents } = role;
      return {
        publish: {
          allow: [
            ...common.publish,
            // Its agents' events, but no task's ending: only a coordinator ends a task.
            `troupe.events.${pipeline}.>`,
            // Step replies and heartbeats go to the coordinators that asked, where their step calls wait (not
            // where the server answers them).
            ...coordinators.map((c) => `${inboxOf(c)}.steps.>`),
            ...streamInfo(),
            ...kvRead(BUCKETS.journal),
            ...kvWrite(BUCKETS.journal),
            ...kvRead(BUCKETS.approvals),
            ...kvWrite(BUCKETS.approvals),
            `$JS.API.STREAM.MSG.GET.KV_${BUCKETS.memory}`,
            `$KV.${BUCKETS.memory}.task.>`,
            ...agents.map((agent) => `$KV.${BUCKETS.memory}.agent.${pipeline}.${agent}.>`),
          ],
          deny: [`troupe.events.${pipeline}.*.task.>`],
        },
        subscribe: {
          allow: [
            ...common.subscribe,
            // Only its agents' steps, and only in their queue groups.
            ...agents.flatMap((agent) => [
              `${subjects.agent(pipeline, agent)} troupe-${pipeline}-${agent}`,
              `${subjects.sessionSummary(pipeline, agent)} troupe-${pipeline}-${agent}-summarize`,
            ]),
            `troupe.events.${pipeline}.*.task.>`,
            'troupe.approvals.*.*',
          ],
        },
        allow_responses: true,
      };
    }
    case 'submitter':
      return {
        publish: {
          allow: [
            ...common.publish,
            ...role.pipelines.map(subjects.task),
            ...kvRead(BUCKETS.pipelines),
            ...kvRead(BUCKETS.workflows),
          ],
        },
        subscribe: { allow: [...common.subscribe, ...role.pipelines.map((p) => `troupe.events.${p}.>`)] },
      };
    case 'observer':
      return {
        publish: {
          allow: [
            ...common.publish,
            ...kvRead(BUCKETS.workflows),
            ...kvRead(BUCKETS.pipelines),
            ...role.pipelines.flatMap((p) => eventHistory(p)),
          ],
        },
        subscribe: { allow: [...common.subscribe, ...role.pipelines.map((p) => `troupe.events.${p}.>`)] },
      };
    case 'approver':
      return {
        publish: {
          allow: [
            ...common.publish,
            'troupe.approvals.*.*',
            ...kvRead(BUCKETS.approvals),
            ...kvWrite(BUCKETS.approvals),
            ...kvRead(BUCKETS.workflows),
            ...kvRead(BUCKETS.journal),
          ],
        },
        subscribe: { allow: [...common.subscribe, ...role.pipelines.map((p) => `troupe.events.${p}.>`)] },
      };
  }
}

/** Looking up Troupe's streams and buckets, as a client checks them before use. */
const streamInfo = () => [`$JS.API.STREAM.INFO.>`];

/** Reading a bucket: by key, and listing or watching its keys (an ordered consumer of its own). */
const kvRead = (bucket: string) => [
  `$JS.API.STREAM.INFO.KV_${bucket}`,
  `$JS.API.DIRECT.GET.KV_${bucket}.>`,
  // A bucket with more than one replica is read from its leader, by a request whose key the server cannot see.
  `$JS.API.STREAM.MSG.GET.KV_${bucket}`,
  `$JS.API.CONSUMER.CREATE.KV_${bucket}.>`,
  `$JS.API.CONSUMER.INFO.KV_${bucket}.>`,
  `$JS.API.CONSUMER.DELETE.KV_${bucket}.>`,
  `$JS.FC.KV_${bucket}.>`,
];

const kvWrite = (bucket: string) => [`$KV.${bucket}.>`];

/** Reading a pipeline's stored events: an ordered consumer of `EVENTS` filtered to the pipeline. */
const eventHistory = (pipeline: string) => [
  `$JS.API.STREAM.INFO.${STREAMS.events}`,
  `$JS.API.CONSUMER.CREATE.${STREAMS.events}.*.troupe.events.${pipeline}.>`,
  `$JS.API.CONSUMER.MSG.NEXT.${STREAMS.events}.*`,
  `$JS.API.CONSUMER.INFO.${STREAMS.events}.*`,
  `$JS.API.CONSUMER.DELETE.${STREAMS.events}.*`,
];

/** A role's user in the server configuration: its nkey and permissions. */
export interface ConfiguredUser {
  role: Role;
  /** The user's public nkey (`U…`). */
  nkey: string;
}

/** The `authorization` block of a nats-server configuration with these users, one per role instance. */
export function authorizationBlock(users: readonly ConfiguredUser[]): string {
  const coordinators = users.filter((u) => u.role.kind === 'coordinator').map((u) => u.role.name);
  const entries = users.map(({ role, nkey }) => {
    const permissions = permissionsOf(role, coordinators);
    return [
      `    # ${role.name}: ${describeRole(role)}`,
      `    { nkey: ${JSON.stringify(nkey)}, permissions: ${JSON.stringify(permissions)} }`,
    ].join('\n');
  });
  return `authorization {\n  users = [\n${entries.join('\n')}\n  ]\n}\n`;
}

export function describeRole(role: Role): string {
  switch (role.kind) {
    case 'coordinator':
      return 'coordinator (troupe up --no-agents)';
    case 'worker':
      return `worker for ${role.agents.join(', ')} of pipeline ${role.pipeline}`;
    default:
      return `${role.kind} for pipeline${role.pipelines.length === 1 ? '' : 's'} ${role.pipelines.join(', ')}`;
  }
}
