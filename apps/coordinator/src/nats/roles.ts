import {
  A2A_PUSH_QUEUE,
  BUCKETS,
  EVALS_BUCKET,
  EVENT_KINDS,
  inputBucket,
  STREAMS,
  subjects,
  valueBucket,
} from '@troupe/protocol';

/**
 * The parts of a Troupe deployment, each a NATS user of its own (`troupe nats-config` makes one per instance).
 * docs/permissions.md says what each may do, and what the broker then guarantees.
 */
export type Role =
  /** Runs workflows (`troupe up --no-agents`): the trusted core, which may do anything on Troupe's subjects. */
  | { kind: 'coordinator'; name: string }
  /** Serves `agents` of `pipeline` (`troupe worker --agents`). */
  | { kind: 'worker'; name: string; pipeline: string; agents: readonly string[] }
  /**
   * Submits tasks to `pipelines` and follows their events (`troupe submit --wait`), and runs their ended tasks again
   * as new ones (`troupe restart`, `fork`).
   */
  | { kind: 'submitter'; name: string; pipelines: readonly string[] }
  /**
   * Reads `pipelines`' events and task records (`troupe tail --pipeline`, `status`, `logs`); never the evals' datasets
   * or experiments, which may hold any pipeline's recorded runs.
   */
  | { kind: 'observer'; name: string; pipelines: readonly string[] }
  /**
   * Makes datasets from `pipelines`' recorded runs (`troupe eval dataset add --from-runs`) and stores datasets and
   * experiments (`troupe eval run`) in the evals' object store, which it reads and writes whole whatever its
   * `pipelines`: it is trusted with every dataset and experiment (it may overwrite or purge any), a role for the CI
   * jobs and people who own the evals.
   */
  | { kind: 'evaluator'; name: string; pipelines: readonly string[] }
  /**
   * Decides approvals and answers questions (`troupe approve`, `deny`, `answer`, `approvals`), and steers its
   * pipelines' tasks (`troupe pause`, `resume`, `tell`), but may not cancel or migrate one.
   */
  | { kind: 'approver'; name: string; pipelines: readonly string[] }
  /**
   * Serves the HTTP gateway (`troupe gateway`) for every pipeline, its tokens saying which caller may touch which:
   * submits, cancels, steers, decides and reads, and adds recorded runs to eval datasets, but takes no step and sends
   * no event.
   */
  | { kind: 'gateway'; name: string };

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

/** What every role's permissions depend on beyond the role itself. */
export interface Deployment {
  /** The coordinator users there are: workers reply to their inboxes. */
  coordinators: readonly string[];
  /**
   * Replicas of the streams and buckets (`--replicas`). Above 1, the `journal` and `memory` buckets are read from
   * their leaders, by a request whose key the server cannot see: workers may then read all of them.
   */
  replicas?: number;
  /** The deployment's pipelines: the gateway reads each one's large values. */
  pipelines?: readonly string[];
}

/** The least a role needs, as subject permissions. */
export function permissionsOf(role: Role, deployment: Deployment): Permissions {
  const { coordinators, replicas = 1, pipelines = [] } = deployment;
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
            // Large values in every pipeline's object store (a sub-task's output is copied into its parent's).
            '$O.>',
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
            subjects.allSteer,
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
            ...workerEvents(pipeline),
            // Step replies and heartbeats go to the coordinators that asked, where their step calls wait (not
            // where the server answers them).
            ...coordinators.map((c) => `${inboxOf(c)}.steps.>`),
            ...streamInfo(),
            // Its pipeline's step journal, approvals and questions, and task memory; its agents' own memory.
            ...kvReadWrite(BUCKETS.journal, `${pipeline}.>`),
            ...kvReadWrite(BUCKETS.approvals, `${pipeline}.>`),
            ...kvReadWrite(BUCKETS.memory, `task.${pipeline}.>`),
            ...agents.flatMap((agent) => kvReadWrite(BUCKETS.memory, `agent.${pipeline}.${agent}.>`)),
            // Its pipeline's stored versions, read only: a step of a task on another version runs that version's agent.
            ...kvRead(BUCKETS.versions, `${pipeline}.>`),
            // Its pipeline's registration, read only: a reload that adds an agent is served without a restart.
            ...kvRead(BUCKETS.pipelines, pipeline),
            // Its pipeline's large values: outputs and tool results too large for a message, and earlier steps'.
            ...valuesReadWrite(pipeline),
            // Its tasks' inputs too large for their message, read whole for each step.
            ...inputsRead(pipeline),
            ...(replicas > 1
              ? [BUCKETS.journal, BUCKETS.memory, BUCKETS.versions, BUCKETS.pipelines].map(
                  (bucket) => `$JS.API.STREAM.MSG.GET.KV_${bucket}`,
                )
              : []),
          ],
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
            subjects.pipelineApprovals(pipeline),
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
            // An input too large for the task message is stored first, and the task refers to it.
            ...role.pipelines.flatMap(inputsWrite),
            ...kvRead(BUCKETS.pipelines),
            ...kvRead(BUCKETS.workflows),
            // A restart or fork (`troupe restart`, `fork`: a task of P naming a task of P as its origin) is built
            // from the origin's stored events, the ones the submitter hears live, read back through a consumer
            // filtered to P's; its input is checked against the schema of the origin's version.
            ...role.pipelines.flatMap((p) => [
              ...eventHistory(`troupe.events.${p}.>`),
              ...kvRead(BUCKETS.versions, `${p}.>`),
            ]),
            // A bucket kept on several servers is read from its leader, by a request whose key the server cannot see.
            ...(replicas > 1 ? [`$JS.API.STREAM.MSG.GET.KV_${BUCKETS.versions}`] : []),
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
            ...role.pipelines.flatMap((p) => [
              ...eventHistory(`troupe.events.${p}.>`),
              ...kvRead(BUCKETS.approvals, `${p}.>`),
              // `troupe trace --json` and `replay` read large inputs and outputs back whole.
              ...valuesRead(p),
              ...inputsRead(p),
            ]),
            // No dataset or experiment: they hold recorded runs of any pipeline (events, model replies, tool results),
            // in one bucket whose object names no permission sees, so only roles trusted with every pipeline read it.
          ],
        },
        subscribe: { allow: [...common.subscribe, ...role.pipelines.map((p) => `troupe.events.${p}.>`)] },
      };
    case 'evaluator':
      return {
        publish: {
          allow: [
            ...common.publish,
            // What `eval dataset add --from-runs` reads of a run (recordedCases): the tasks' records, their stored
            // events, the journal records a replay reads where an event kept only the start of a text (by direct
            // gets naming their keys, at every replica count: an ended task's records no longer change, so any
            // replica may answer), and the large values and inputs the events point to.
            ...kvRead(BUCKETS.workflows),
            ...role.pipelines.flatMap((p) => [
              ...eventHistory(`troupe.events.${p}.>`),
              ...kvRead(BUCKETS.journal, `${p}.>`),
              ...valuesRead(p),
              ...inputsRead(p),
            ]),
            // Datasets and experiments: every object of the bucket, which a coordinator makes.
            ...evalsReadWrite(),
          ],
        },
        subscribe: { allow: [...common.subscribe] },
      };
    case 'approver':
      return {
        publish: {
          allow: [
            ...common.publish,
            ...role.pipelines.flatMap((p) => [
              subjects.pipelineApprovals(p),
              ...kvReadWrite(BUCKETS.approvals, `${p}.>`),
              // Pause, resume and tell its pipelines' tasks: the steering subject names the pipeline and takes no
              // cancel, where `troupe.control.<taskId>` names neither and takes every action.
              subjects.pipelineSteer(p),
            ]),
            ...kvRead(BUCKETS.workflows),
          ],
        },
        subscribe: { allow: [...common.subscribe, ...role.pipelines.map((p) => `troupe.events.${p}.>`)] },
      };
    case 'gateway':
      return {
        publish: {
          allow: [
            ...common.publish,
            ...streamInfo(),
            subjects.task('*'),
            subjects.allControl,
            subjects.allSteer,
            'troupe.approvals.*.*.*',
            // Sessions' summaries, asked of each pipeline's summarizer agent.
            subjects.sessionSummary('*', '*'),
            ...kvRead(BUCKETS.workflows),
            ...kvRead(BUCKETS.pipelines),
            // A restart's or fork's input is checked against the input schema of its origin's version.
            ...kvRead(BUCKETS.versions),
            ...kvReadWrite(BUCKETS.approvals, '>'),
            ...kvReadWrite(BUCKETS.sessions, '>'),
            // Marks of the tasks it submits, read and cancelled before a coordinator claims them.
            ...kvReadWrite(BUCKETS.queued, '>'),
            // A2A push notifications: their configs, and the queue of deliveries the gateways share.
            ...kvReadWrite(BUCKETS.a2aPush, '>'),
            ...a2aPushQueue(),
            ...eventHistory(subjects.allEvents),
            // Task results and traces give large outputs whole, read back from each pipeline's object store.
            ...pipelines.flatMap(valuesRead),
            // A task submitted with an input too large for its message has it stored first.
            ...pipelines.flatMap(inputsWrite),
            // Datasets and experiments (`/v1/evals`), and a dataset's cases added from recorded runs (`POST
            // /v1/evals/datasets/{name}/cases`), which reads each run's journal records as `eval dataset add` does.
            ...kvRead(BUCKETS.journal),
            ...evalsReadWrite(),
          ],
        },
        // Every pipeline's task events (`troupe.events.<pipeline>.<task>.<kind>`), not reports of invalid messages
        // (`troupe.events._invalid`), which it publishes: its account would send what it hears back to TROUPE.
        subscribe: { allow: [...common.subscribe, `${subjects.allEvents.slice(0, -1)}*.>`] },
      };
  }
}

/**
 * The events a worker of `pipeline` may publish: every kind but a task's (`task.*`: only a coordinator ends a task),
 * named by kind rather than allowed whole and denied in part, so that an account's import of them is exactly as
 * wide (an import has no deny, and one that took in the task events the worker hears would send them straight back).
 */
const workerEvents = (pipeline: string) =>
  [...new Set(EVENT_KINDS.map((kind) => kind.split('.')[0] as string))]
    .filter((family) => family !== 'task')
    .map((family) => `troupe.events.${pipeline}.*.${family}.>`)
    // Its agents' events gathered in batches (event batching on): a batch never holds a task.* event (eventsIn).
    .concat(subjects.eventBatch(pipeline, '*'));

/** Looking up Troupe's streams and buckets, as a client checks them before use. */
const streamInfo = () => [`$JS.API.STREAM.INFO.>`];

/**
 * Reading a bucket, or only its `keys` (a subject filter): by key, directly, and listing keys from the stream's info
 * (its subjects filter is in the request's body, so any reader may list every key's name). No consumers: a user
 * that may create one could aim its deliveries at any subject, nats-server checking no permission on it.
 */
const kvRead = (bucket: string, keys = '>') => [
  `$JS.API.STREAM.INFO.KV_${bucket}`,
  `$JS.API.DIRECT.GET.KV_${bucket}.$KV.${bucket}.${keys}`,
  // A bucket with more than one replica is read from its leader, by a request whose key the server cannot see:
  // allowed only to a reader of the whole bucket. (Part of `approvals` is read directly at any replica count.)
  ...(keys === '>' ? [`$JS.API.STREAM.MSG.GET.KV_${bucket}`] : []),
];

const kvReadWrite = (bucket: string, keys: string) => [...kvRead(bucket, keys), `$KV.${bucket}.${keys}`];

/**
 * Reading a pipeline's large values: by a message get from the object store's stream, whose
 * answer is a JSON envelope sent to the asker's inbox — never a consumer, and never the stored bytes raw on a subject.
 * The request's body names the object, which permissions cannot see: a reader of a bucket may read all of it.
 */
const valuesRead = (pipeline: string) => [`$JS.API.STREAM.MSG.GET.OBJ_${valueBucket(pipeline)}`];

/**
 * Keeping a pipeline's large values: publishing an object's chunks and its description (with JetStream acks), and
 * purging the chunks of an object written again (a retried step whose output changed). The bucket is made by a
 * coordinator; a writer only looks it up.
 */
const valuesReadWrite = (pipeline: string) => {
  const bucket = valueBucket(pipeline);
  return [
    ...valuesRead(pipeline),
    `$O.${bucket}.C.>`,
    `$O.${bucket}.M.>`,
    `$JS.API.STREAM.PURGE.OBJ_${bucket}`,
  ];
};

/** Reading a pipeline's stored task inputs (those too large for their task message), as its values are read. */
const inputsRead = (pipeline: string) => [`$JS.API.STREAM.MSG.GET.OBJ_${inputBucket(pipeline)}`];

/**
 * Storing a pipeline's task inputs too large for their message: a submitter's chunks and descriptions, in a bucket of
 * their own, so a submitter can touch no step's output. Never a purge: a stored input is named by its digest, and
 * is never written again.
 */
const inputsWrite = (pipeline: string) => {
  const bucket = inputBucket(pipeline);
  return [
    ...inputsRead(pipeline),
    `$JS.API.STREAM.INFO.OBJ_${bucket}`,
    `$O.${bucket}.C.>`,
    `$O.${bucket}.M.>`,
  ];
};

/**
 * Reading the evals' datasets and experiments (`EvalStore`): the stream's info, whose subjects list the objects, and
 * message gets of their descriptions and chunks. No consumer, and the whole bucket: an object store's subjects name
 * objects in base64 and chunks by random ids, so no permission can keep a reader to one pipeline's.
 */
const evalsRead = () => [
  `$JS.API.STREAM.INFO.OBJ_${EVALS_BUCKET}`,
  `$JS.API.STREAM.MSG.GET.OBJ_${EVALS_BUCKET}`,
];

/**
 * Storing datasets and experiments: an object's chunks and its description (with JetStream acks), and purging the
 * chunks of an object written again. Never making the bucket (a coordinator does, with the deployment's replicas).
 * The purge's filter is in its body, which permissions cannot see: a writer may purge the whole bucket.
 */
const evalsReadWrite = () => [
  ...evalsRead(),
  `$O.${EVALS_BUCKET}.C.>`,
  `$O.${EVALS_BUCKET}.M.>`,
  `$JS.API.STREAM.PURGE.OBJ_${EVALS_BUCKET}`,
];

/** Reading stored events on `filter` (a pipeline's, or all): an ordered consumer of `EVENTS` filtered to them. */
const eventHistory = (filter: string) => [
  `$JS.API.STREAM.INFO.${STREAMS.events}`,
  `$JS.API.CONSUMER.CREATE.${STREAMS.events}.*.${filter}`,
  `$JS.API.CONSUMER.MSG.NEXT.${STREAMS.events}.*`,
  `$JS.API.CONSUMER.INFO.${STREAMS.events}.*`,
  `$JS.API.CONSUMER.DELETE.${STREAMS.events}.*`,
];

/**
 * The gateways' queue of webhook deliveries: making its work-queue stream and durable pull consumer (in the 2.9 and
 * the 2.10 form of the request), queueing a config, taking configs and acking them.
 */
const a2aPushQueue = () => {
  const { stream, consumer } = A2A_PUSH_QUEUE;
  return [
    subjects.allA2aPushJobs,
    `$JS.API.STREAM.CREATE.${stream}`,
    `$JS.API.CONSUMER.DURABLE.CREATE.${stream}.${consumer}`,
    `$JS.API.CONSUMER.CREATE.${stream}.${consumer}`,
    `$JS.API.CONSUMER.INFO.${stream}.${consumer}`,
    `$JS.API.CONSUMER.MSG.NEXT.${stream}.${consumer}`,
    `$JS.ACK.${stream}.${consumer}.>`,
  ];
};

/** A role's user in the server configuration: its nkey and permissions. */
export interface ConfiguredUser {
  role: Role;
  /** The user's public nkey (`U…`). */
  nkey: string;
}

/** Each user with its role's permissions, and its entry in a server configuration: a comment saying who, then it. */
function configured(users: readonly ConfiguredUser[], replicas: number, pipelines: readonly string[]) {
  const coordinators = users.filter((u) => u.role.kind === 'coordinator').map((u) => u.role.name);
  return users.map(({ role, nkey }) => {
    const permissions = permissionsOf(role, { coordinators, replicas, pipelines });
    const entry = [
      `# ${role.name}: ${describeRole(role)}`,
      `{ nkey: ${JSON.stringify(nkey)}, permissions: ${JSON.stringify(permissions)} }`,
    ];
    return { role, permissions, entry };
  });
}

/**
 * The `authorization` block Troupe wrote before {@link accountsBlock}: every role's user in one account, where any
 * JetStream answer can be aimed at any subject. Kept to test and measure the accounts block against.
 */
export function authorizationBlock(
  users: readonly ConfiguredUser[],
  replicas = 1,
  pipelines: readonly string[] = [],
): string {
  const entries = configured(users, replicas, pipelines).flatMap(({ entry }) =>
    entry.map((line) => `    ${line}`),
  );
  return `authorization {\n  users = [\n${entries.join('\n')}\n  ]\n}\n`;
}

export function describeRole(role: Role): string {
  switch (role.kind) {
    case 'coordinator':
      return 'coordinator (troupe up --no-agents)';
    case 'worker':
      return `worker for ${role.agents.join(', ')} of pipeline ${role.pipeline}`;
    case 'gateway':
      return 'gateway for every pipeline (troupe gateway; its tokens scope callers)';
    default:
      return `${role.kind} for pipeline${role.pipelines.length === 1 ? '' : 's'} ${role.pipelines.join(', ')}`;
  }
}

/** The account Troupe's streams, buckets and coordinators live in; every other role has an account of its own. */
export const TROUPE_ACCOUNT = 'TROUPE';

/**
 * The `accounts` block of a nats-server configuration with these users: coordinators in {@link TROUPE_ACCOUNT},
 * which holds JetStream, and every other role in an account of its own that imports from it exactly what the role
 * may publish (as services) and hear (as streams). An answer nats-server sends for a request (a JetStream API
 * answer above all) goes to the reply subject in the requester's own account, where only the role itself listens:
 * no role can make the server speak for it on Troupe's subjects.
 */
export function accountsBlock(
  users: readonly ConfiguredUser[],
  replicas = 1,
  pipelines: readonly string[] = [],
): string {
  const troupe: Account = { name: TROUPE_ACCOUNT, users: [], imports: [], exports: new Map() };
  const others: Account[] = [];
  const exportFrom = (account: Account, kind: 'service' | 'stream', subject: string, to: string) => {
    const key = `${kind} ${subject}`;
    const entry = account.exports.get(key) ?? { kind, subject, to: new Set<string>() };
    entry.to.add(to);
    account.exports.set(key, entry);
  };
  for (const { role, permissions, entry: user } of configured(users, replicas, pipelines)) {
    if (role.kind === 'coordinator') {
      troupe.users.push(...user);
      continue;
    }
    const account: Account = { name: role.name, users: user, imports: [], exports: new Map() };
    others.push(account);
    // What the role answers for requesters outside TROUPE (the gateway's session summaries) it exports as a
    // service, so the answer finds its way back; TROUPE imports it, and exports it on to whoever may ask.
    const served = new Set(
      role.kind === 'worker' ? role.agents.map((agent) => subjects.sessionSummary(role.pipeline, agent)) : [],
    );
    for (const subject of new Set(permissions.publish.allow)) {
      exportFrom(troupe, 'service', subject, role.name);
      account.imports.push({ kind: 'service', from: TROUPE_ACCOUNT, subject });
    }
    // A subscribe permission may name a queue group after the subject (`<subject> <queue>`): the import is the subject's.
    for (const subject of new Set(
      permissions.subscribe.allow.map((allowed) => allowed.split(' ')[0] as string),
    )) {
      if (subject === `${inboxOf(role.name)}.>`) continue;
      // What the account hears from TROUPE must not be what it may send there: nats-server would send it back.
      const loop = permissions.publish.allow.find((sent) => subjectsOverlap(sent, subject));
      if (loop !== undefined) {
        throw new Error(
          `role ${role.name} would both hear ${subject} and send ${loop}: its account would echo them`,
        );
      }
      if (served.has(subject)) {
        exportFrom(account, 'service', subject, TROUPE_ACCOUNT);
        troupe.imports.push({ kind: 'service', from: role.name, subject });
        continue;
      }
      exportFrom(troupe, 'stream', subject, role.name);
      account.imports.push({ kind: 'stream', from: TROUPE_ACCOUNT, subject });
    }
  }
  return `accounts {\n${[troupe, ...others].map(renderAccount).join('\n')}\n}\n`;
}

/** Whether two subject patterns (with `*` and `>`) match a subject in common. */
export function subjectsOverlap(a: string, b: string): boolean {
  const x = a.split('.');
  const y = b.split('.');
  for (let i = 0; i < Math.max(x.length, y.length); i += 1) {
    if (x[i] === '>' || y[i] === '>') return x[i] !== undefined && y[i] !== undefined;
    if (x[i] === undefined || y[i] === undefined) return false;
    if (x[i] !== '*' && y[i] !== '*' && x[i] !== y[i]) return false;
  }
  return true;
}

interface Account {
  name: string;
  /** Its users' entries, line by line: each a comment line saying who, then the user. */
  users: string[];
  imports: { kind: 'service' | 'stream'; from: string; subject: string }[];
  exports: Map<string, { kind: 'service' | 'stream'; subject: string; to: Set<string> }>;
}

function renderAccount(account: Account): string {
  const list = (name: string, lines: string[]) =>
    lines.length === 0 ? [] : [`    ${name} = [`, ...lines.map((line) => `      ${line}`), '    ]'];
  const exports = [...account.exports.values()].map(({ kind, subject, to }) => {
    // A pull consumer's fetch is answered with many messages; a summary may take a model call of minutes, longer
    // than the 2 minutes nats-server keeps a service's way back by default.
    const more = subject.startsWith('$JS.API.CONSUMER.MSG.NEXT.')
      ? ', response_type: stream'
      : subject.endsWith('.summarize')
        ? ', response_threshold: "15m"'
        : '';
    return `{ ${kind}: ${JSON.stringify(subject)}, accounts: ${JSON.stringify([...to])}${more} }`;
  });
  const imports = account.imports.map(
    ({ kind, from, subject }) =>
      `{ ${kind}: { account: ${JSON.stringify(from)}, subject: ${JSON.stringify(subject)} } }`,
  );
  return [
    `  ${JSON.stringify(account.name)} {`,
    ...(account.name === TROUPE_ACCOUNT ? ['    jetstream: enabled'] : []),
    ...list('users', account.users),
    ...list('exports', exports),
    ...list('imports', imports),
    '  }',
  ].join('\n');
}
