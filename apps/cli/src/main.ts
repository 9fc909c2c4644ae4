import { redactSecrets, registerSecretsFromEnv } from '@troupe/runtime/secrets';
import { Command, InvalidArgumentError, Option } from 'commander';
import cli from '../package.json' with { type: 'json' };
import { CliError } from './cliError.ts';
import { parseDuration } from './format/duration.ts';
import { parseSize } from './format/size.ts';
import { HELP_DEFAULTS } from './helpDefaults.ts';

// Each command's module (and what it needs: NATS, the coordinator, model SDKs) loads only when it runs, so
// `troupe --help` and `troupe status` start in milliseconds.
const commands = {
  approvals: () => import('./commands/approvals.ts'),
  control: () => import('./commands/control.ts'),
  demo: () => import('./commands/demo.ts'),
  files: () => import('./commands/files.ts'),
  init: () => import('./commands/init.ts'),
  logs: () => import('./commands/logs.ts'),
  mcp: () => import('./commands/mcp.ts'),
  natsConfig: () => import('./commands/natsConfig.ts'),
  gateway: () => import('./commands/gateway.ts'),
  graph: () => import('./commands/graph.ts'),
  replay: () => import('./commands/replay.ts'),
  runs: () => import('./commands/runs.ts'),
  submit: () => import('./commands/submit.ts'),
  tail: () => import('./commands/tail.ts'),
  trace: () => import('./commands/trace.ts'),
  up: () => import('./commands/up.ts'),
  validate: () => import('./commands/validate.ts'),
  versions: () => import('./commands/versions.ts'),
  worker: () => import('./commands/worker.ts'),
};

const collect = (value: string, all: string[]): string[] => [...all, value];

const positive = (value: string): number => {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError('must be a positive number');
  return n;
};

const positiveInteger = (value: string): number => {
  const n = positive(value);
  if (!Number.isInteger(n)) throw new InvalidArgumentError('must be a whole number');
  return n;
};

const duration = (value: string): number => {
  const ms = parseDuration(value);
  if (ms === undefined) throw new InvalidArgumentError('must be a duration such as 7d, 12h or 30m');
  return ms;
};

const size = (value: string): number => {
  const bytes = parseSize(value);
  if (bytes === undefined) throw new InvalidArgumentError('must be a size such as 512MiB, 2GB or 1048576');
  return bytes;
};

/** The pino level of a long-running command's logs. */
const logLevelOption = () =>
  new Option('--log-level <level>', 'trace, debug, info, warn, error, fatal or silent')
    .env('TROUPE_LOG_LEVEL')
    .default('info');

/** The bound on a long-running command's stop (docs/operations.md, "Stopping"). */
const stopTimeoutOption = () =>
  new Option(
    '--stop-timeout <seconds>',
    'after a stop signal, exit within this long whatever NATS is doing (what is not handed back by then is redelivered)',
  )
    .argParser(positive)
    .env('TROUPE_STOP_TIMEOUT')
    .default(HELP_DEFAULTS.stopTimeoutSeconds);

const homeOption = () =>
  new Option(
    '--home <dir>',
    'where troupe up keeps its data and records its server (default: $TROUPE_HOME, else the nearest .troupe in this directory or above, else ./.troupe)',
  );
const serverOption = () =>
  new Option(
    '-s, --server <url>',
    'NATS server URL (default: $NATS_URL, else the embedded one a running `troupe up` recorded)',
  );

/** Replicas of Troupe's streams and buckets on a JetStream cluster (docs/operations.md). */
const replicasOption = (
  description = 'how many servers of a JetStream cluster keep each stream and bucket (3 in a three-node cluster; default 1)',
) =>
  new Option('--replicas <n>', description)
    .argParser((value) => {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 1 || n > 5)
        throw new InvalidArgumentError('must be a whole number from 1 to 5');
      return n;
    })
    .env('TROUPE_REPLICAS');

/** The pipelines whose approvals a person may see, when their NATS user may read only those (an approver's). */
const pipelinesOption = () =>
  new Option(
    '--pipelines <names>',
    "only these pipelines', comma-separated (a NATS user made by troupe nats-config may read no others' requests)",
  )
    .argParser((value) =>
      value
        .split(',')
        .map((name) => name.trim())
        .filter((name) => name !== ''),
    )
    .env('TROUPE_PIPELINES');

/** How to log in to NATS and talk TLS to it (docs/permissions.md), on every command that has `--server`. */
const natsAccessOptions = () => [
  new Option('--creds <file>', 'NATS credentials file (a user JWT and its nkey seed)').env('NATS_CREDS'),
  new Option('--user <name>', 'NATS user').env('NATS_USER'),
  new Option(
    '--password <password>',
    'NATS password (safer in the environment than on the command line)',
  ).env('NATS_PASSWORD'),
  new Option('--nkey <file>', 'file holding a NATS user nkey seed (SU…)').env('NATS_NKEY'),
  new Option('--tls-ca <file>', 'CA certificate (PEM) that signed the NATS server’s').env('NATS_CA'),
  new Option('--tls-cert <file>', 'client certificate (PEM), for a server that verifies clients').env(
    'NATS_CERT',
  ),
  new Option('--tls-key <file>', 'the client certificate’s key (PEM)').env('NATS_KEY'),
  new Option(
    '--inbox <prefix>',
    `this client's reply inboxes, under ${'troupe._inbox'} (as its NATS user may read)`,
  ).env('TROUPE_INBOX'),
];

/**
 * A decision's reason, given after the id as `answer` takes its text (`troupe deny ap-1 "not on a Friday"`) or, as
 * before, with `--reason`; both at once is a mistake to point out, not to choose between.
 */
const reasonOf = (positional: string | undefined, options: { reason?: string }): string | undefined => {
  if (positional !== undefined && options.reason !== undefined && positional !== options.reason)
    throw new CliError('give the reason once: after the id, or with --reason', 2);
  return positional ?? options.reason;
};

/** Runs a command and turns its outcome into an exit code; user errors print without a stack. */
const run =
  <A extends unknown[]>(command: (...args: A) => Promise<number>) =>
  async (...args: A) => {
    try {
      process.exitCode = await command(...args);
    } catch (error) {
      // Whatever the error quotes (a server's reply, a URL), no secret reaches the terminal.
      if (CliError.is(error)) {
        process.stderr.write(`troupe: ${redactSecrets(error.message)}\n`);
        process.exitCode = error.exitCode;
        return;
      }
      process.stderr.write(
        `troupe: ${redactSecrets(error instanceof Error ? (error.stack ?? error.message) : String(error))}\n`,
      );
      process.exitCode = 1;
    }
  };

registerSecretsFromEnv();

const program = new Command('troupe')
  .description('Troupe: run LLM agent pipelines over NATS, durable and observable')
  .version(cli.version, '-V, --version', 'print the version')
  .configureHelp({ sortSubcommands: false });

program
  .command('up')
  .description('run the coordinator for pipeline files (embedded nats-server unless NATS_URL is set)')
  .argument('<pipeline.yaml...>', 'pipeline files to load')
  .addOption(homeOption())
  .addOption(
    new Option('-s, --server <url>', 'join this NATS server instead of starting one (default: $NATS_URL)'),
  )
  .option(
    '--join',
    'run another coordinator on the server of the troupe up already running on this home (scale out on one machine)',
    false,
  )
  .option('--no-agents', 'run workflows only; leave agents to worker processes')
  .option(
    '--watch',
    'reload a pipeline when its file changes: new tasks start on the new version, running ones finish on theirs',
    false,
  )
  .addOption(replicasOption())
  .option('--allow-mcp-commands', 'let pipelines start local MCP server commands (stdio transport)', false)
  .option(
    '--concurrency <n>',
    'most tasks per pipeline worked on at once; tasks waiting on a person or a slow model do not count',
    positive,
    16,
  )
  .option(
    '--max-in-flight <n>',
    'most tasks per pipeline held at once, waiting or working (default 1000)',
    positiveInteger,
  )
  .option(
    '--ack-wait <seconds>',
    "how soon another coordinator takes over a dead one's tasks (default 30; kept alive while they run)",
    positive,
  )
  .option(
    '--max-deliver <n>',
    'deliveries of a task in a row that make no progress before it is dead-lettered (default 10)',
    positiveInteger,
  )
  .option(
    '--max-task-bytes <n>',
    `largest task payload accepted, in bytes (default ${HELP_DEFAULTS.maxTaskBytes})`,
    positiveInteger,
  )
  .option(
    '--max-task-depth <n>',
    `deepest nesting of objects and arrays in a task payload (default ${HELP_DEFAULTS.maxTaskDepth}, at most ${HELP_DEFAULTS.maxTaskDepthLimit})`,
    positiveInteger,
  )
  .option(
    '--max-input-bytes <n>',
    `largest task input stored in place of a task payload's input, in bytes (default ${HELP_DEFAULTS.maxInputBytes})`,
    positiveInteger,
  )
  .option(
    '--step-heartbeat <seconds>',
    'how often agent hosts report on a step; after 3 missed reports it goes to another worker (default 5)',
    positive,
  )
  .option(
    '--events-max-age <duration>',
    'how long the EVENTS stream keeps events, e.g. 7d, 12h (default 7d when the stream is made; else unchanged)',
    duration,
  )
  .option(
    '--metrics <[host:]port>',
    'serve Prometheus metrics on http://<host:port>/metrics (host 127.0.0.1 unless given, e.g. 0.0.0.0:9464)',
  )
  .option(
    '--events-max-bytes <size>',
    'most the EVENTS stream keeps, oldest dropped first, e.g. 512MiB, 2GB (default no limit; else unchanged)',
    size,
  )
  .addOption(logLevelOption())
  .option(
    '--gateway <[host:]port>',
    'also serve the HTTP/SSE gateway and dashboard (host 127.0.0.1 unless given; see troupe gateway)',
  )
  .option('--gateway-tokens <file>', 'the gateway’s tokens file (troupe token writes one)')
  .option('--gateway-no-auth', 'serve the gateway without tokens (on 127.0.0.1 only)', false)
  .option(
    '--cors-origin <origin>',
    'an origin browser pages may call the gateway from (repeatable; * for any)',
    collect,
    [],
  )
  .option(
    '--gateway-public-url <url>',
    'the URL clients reach the gateway at (its pages may open WebSockets; see troupe gateway --public-url)',
  )
  .option(
    '--gateway-id-secret <file>',
    'the secret Idempotency-Keys become task ids with (made when absent; default beside the tokens file)',
  )
  .option(
    '--gateway-max-streams <n>',
    'event streams and WebSockets one gateway token may hold open (default 100)',
    positiveInteger,
  )
  .option(
    '--gateway-max-consumers <n>',
    'NATS consumers the streams of one gateway token may hold (default 300)',
    positiveInteger,
  )
  .option(
    '--gateway-max-file-size <size>',
    "the largest task workspace file the gateway serves from this home's workspaces (default 16MiB)",
    size,
  )
  .addOption(stopTimeoutOption())
  .option('--json', 'JSON logs even on a terminal', false)
  .action(run(async (files: string[], options) => (await commands.up()).up(files, options)));

program
  .command('worker')
  .description(
    "serve pipelines' agents (no workflows) on the coordinators' NATS server; more workers, more capacity",
  )
  .argument('<pipeline.yaml...>', 'pipeline files whose agents to serve')
  .option('--agents <names>', 'only these agents, comma-separated')
  .addOption(replicasOption())
  .option(
    '--metrics <[host:]port>',
    'serve Prometheus metrics on http://<host:port>/metrics (host 127.0.0.1 unless given, e.g. 0.0.0.0:9464)',
  )
  .option('--allow-mcp-commands', 'let pipelines start local MCP server commands (stdio transport)', false)
  .addOption(logLevelOption())
  .addOption(stopTimeoutOption())
  .option('--json', 'JSON logs even on a terminal', false)
  .addOption(homeOption())
  .addOption(serverOption())
  .action(run(async (files: string[], options) => (await commands.worker()).worker(files, options)));

program
  .command('gateway')
  .description(
    'serve Troupe over HTTP: tasks, their events as SSE or AG-UI, approvals; stateless, run as many as you like',
  )
  .option(
    '--listen <[host:]port>',
    'where to listen (host 127.0.0.1 unless given, e.g. 0.0.0.0:8080)',
    '8080',
  )
  .option(
    '--tokens <file>',
    'bearer tokens and their scopes (troupe token writes them); also $TROUPE_GATEWAY_TOKEN',
  )
  .option('--no-auth', 'accept requests without a token (127.0.0.1 only)')
  .option(
    '--cors-origin <origin>',
    'an origin browser pages may call and open WebSockets from (repeatable; * for any)',
    collect,
    [],
  )
  .option(
    '--public-url <url>',
    'the URL clients reach this gateway at: its pages may open WebSockets, its host name is trusted',
  )
  .option(
    '--id-secret <file>',
    'the secret Idempotency-Keys become task ids with, the same for every gateway (made when absent; ' +
      'default troupe-gateway-secret beside the tokens file; or $TROUPE_GATEWAY_SECRET)',
  )
  .option(
    '--max-streams <n>',
    'event streams and WebSockets one token may hold open (default 100)',
    positiveInteger,
  )
  .option(
    '--max-consumers <n>',
    'NATS consumers the streams of one token may hold (default 300)',
    positiveInteger,
  )
  .option(
    '--max-task-bytes <n>',
    `largest task accepted, in bytes: the coordinators' own (default ${HELP_DEFAULTS.maxTaskBytes})`,
    positiveInteger,
  )
  .option(
    '--max-task-depth <n>',
    `deepest nesting in a task accepted: the coordinators' own (default ${HELP_DEFAULTS.maxTaskDepth})`,
    positiveInteger,
  )
  .option(
    '--max-input-bytes <n>',
    `largest task input accepted, stored when the task would pass --max-task-bytes: the coordinators' own (default ${HELP_DEFAULTS.maxInputBytes})`,
    positiveInteger,
  )
  .option(
    '--push-host <host>',
    'a host A2A push webhooks may go to (repeatable; *.example.com for its subdomains; default any public host)',
    collect,
    [],
  )
  .option('--push-private', 'let A2A push webhooks reach private, loopback and link-local addresses')
  .option(
    '--workspaces <dir>',
    'serve task workspace files from here, <dir>/<pipeline>/<task> (default: <home>/workspaces)',
  )
  .option('--no-workspaces', 'serve no task workspace files')
  .option('--max-file-size <size>', 'the largest workspace file served, e.g. 64MiB (default 16MiB)', size)
  .addOption(logLevelOption())
  .addOption(stopTimeoutOption())
  .option('--json', 'JSON logs even on a terminal', false)
  .addOption(homeOption())
  .addOption(serverOption())
  .action(run(async (options) => (await commands.gateway()).gateway(options)));

program
  .command('mcp')
  .description(
    'serve the pipelines as MCP tools on stdin/stdout, for MCP hosts that start a command (Claude Desktop, VS Code, …)',
  )
  .option('--pipeline <name>', 'only this pipeline as a tool (repeatable; default every one)', collect, [])
  .option(
    '--by <name>',
    'who approvals and answers given through the host are recorded as (default: user@host)',
  )
  .addOption(homeOption())
  .addOption(serverOption())
  .action(run(async (options) => (await commands.mcp()).mcp(options)));

program
  .command('token')
  .description('make a gateway token: its hash goes to the tokens file, the token is printed once')
  .argument('<name>', 'who holds it (recorded as who decided an approval)')
  .option('--scope <scope>', 'read, submit, approve or admin (repeatable; default read)', collect, [])
  .option('--pipeline <name>', 'limit it to this pipeline (repeatable; default every one)', collect, [])
  .option('--file <file>', 'the tokens file', 'troupe-tokens.yaml')
  .action(run(async (name: string, options) => (await commands.gateway()).token(name, options)));

program
  .command('submit')
  .description('submit a task to a pipeline; prints its id')
  .argument('<pipeline>', 'pipeline name')
  .argument('<goal>', 'what the task should achieve')
  .option('--id <id>', 'task id (idempotency key); generated when absent')
  .option('--input <json>', 'structured input for every step, as a JSON object')
  .addOption(
    new Option(
      '--input-file <path>',
      'the input read from a file holding a JSON object ("-": standard input); one too large for the task message is stored and referred to',
    ).conflicts('input'),
  )
  .option('--meta <key=value>', 'metadata label (repeatable)', (v: string, all: string[]) => [...all, v], [])
  .option('-w, --wait', 'follow the task until it ends; exit code 0 completed, 1 failed, 3 timed out', false)
  .option('--timeout <seconds>', 'with --wait, how long to wait', positive, 600)
  .option('--json', 'with --wait, print events as JSON lines', false)
  .addOption(homeOption())
  .addOption(serverOption())
  .action(
    run(async (pipeline: string, goal: string, options) =>
      (await commands.submit()).submit(pipeline, goal, options),
    ),
  );

program
  .command('tail')
  .description('print the live message flow: one line per event (subject, task, from → to, kind)')
  .option('-t, --task <id>', 'only this task: its history first; stops when it has ended')
  .option('-p, --pipeline <name>', 'only this pipeline')
  .option('--since <duration>', 'first the events stored this long ago, e.g. 30s, 5m, 2h, 1d')
  .option('--agent <name>', 'only events from, to or about this agent')
  .option(
    '--kind <kind>',
    'only events of this kind (repeatable, or comma-separated; llm.* for a family)',
    (v: string, all: string[]) => [...all, v],
    [],
  )
  .option('--json', 'raw events as JSON lines', false)
  .addOption(homeOption())
  .addOption(serverOption())
  .action(run(async (options) => (await commands.tail()).tail(options)));

program
  .command('logs')
  .description(
    "print a task's whole flow from the EVENTS stream, as tail does; --follow to see it to its end",
  )
  .argument('<task-id>', 'the task')
  .option(
    '-f, --follow',
    'then follow it live until it ends; exit code 0 completed, 1 failed or cancelled',
    false,
  )
  .option('--json', 'raw events as JSON lines', false)
  .addOption(homeOption())
  .addOption(serverOption())
  .action(run(async (taskId: string, options) => (await commands.logs()).logs(taskId, options)));

program
  .command('replay')
  .description(
    'run a recorded task again offline (model replies from its events, tools run again) and report where it diverges',
  )
  .argument('<task-id>', 'the recorded task')
  .option(
    '-p, --pipeline <file>',
    "the pipeline file to replay against: the one it ran with, or an edited one (default: the one file here that declares the task's pipeline)",
  )
  .option('--no-tools', "run no tool: each call the policy allows answers with the recorded call's result")
  .option(
    '--allow-mcp-commands',
    "start the pipeline's stdio MCP servers, for their tools to run again",
    false,
  )
  .option('--json', "both runs' facts and the divergence as one JSON document", false)
  .addOption(homeOption())
  .addOption(serverOption())
  .action(run(async (taskId: string, options) => (await commands.replay()).replay(taskId, options)));

program
  .command('trace')
  .description(
    'show a task as a tree: steps, model calls (tokens, cost, latency), tool calls, approvals, retries, errors, totals',
  )
  .argument('<task-id>', 'the task, finished or running')
  .option('--json', 'the tree as one JSON document', false)
  .addOption(homeOption())
  .addOption(serverOption())
  .action(run(async (taskId: string, options) => (await commands.trace()).trace(taskId, options)));

program
  .command('files')
  .description("list a task's workspace files (recursively), or print one as it is")
  .argument('<task-id>', 'the task')
  .argument('[path]', 'a file to print, or a directory to list (default: the whole workspace)')
  .option(
    '--workspaces <dir>',
    'where task workspaces are (default: <home>/workspaces, where troupe up and troupe worker keep them)',
  )
  .option('--force', 'print a binary file to a terminal all the same', false)
  .option('--json', 'the listing as one JSON document', false)
  .addOption(homeOption())
  .addOption(serverOption())
  .action(
    run(async (taskId: string, path: string | undefined, options) =>
      (await commands.files()).files(taskId, path, options),
    ),
  );

program
  .command('status')
  .description('show tasks from the workflows bucket: state, round, usage, age (running ones unless --all)')
  .argument('[task-id]', 'one task')
  .option('-a, --all', 'include finished tasks', false)
  .option('--json', 'one JSON record per line', false)
  .addOption(homeOption())
  .addOption(serverOption())
  .addOption(pipelinesOption())
  .action(
    run(async (taskId: string | undefined, options) => (await commands.control()).status(taskId, options)),
  );

program
  .command('runs')
  .description(
    'list tasks, newest first: state, rounds, duration, tokens, cost, age (--totals: per pipeline or day)',
  )
  .option('-p, --pipeline <name>', 'only this pipeline')
  .option('--state <state>', 'only tasks in this state: running, completed, failed or cancelled')
  .option('--limit <n>', 'at most this many tasks', positiveInteger, 50)
  .option(
    '--totals <by>',
    'instead of the tasks, their tokens and cost summed per pipeline or per day (UTC): pipeline or day',
  )
  .option('--json', 'one JSON record per line, without its snapshot (with --totals: one per total)', false)
  .addOption(homeOption())
  .addOption(serverOption())
  .action(run(async (options) => (await commands.runs()).runs(options)));

program
  .command('cancel')
  .description('stop a running task: its model call in flight is aborted and task.cancelled is published')
  .argument('<task-id>', 'the task')
  .option('--reason <text>', 'recorded in task.cancelled')
  .addOption(homeOption())
  .addOption(serverOption())
  .action(run(async (taskId: string, options) => (await commands.control()).cancel(taskId, options)));

program
  .command('migrate')
  .description(
    'move a running task to another version of its pipeline, only where its state fits that version (else say why)',
  )
  .argument('<task-id>', 'the task')
  .option('--to <hash>', 'the version: its hash, or a prefix of it (troupe runs shows 12 digits)')
  .option('--latest', 'the newest version, the one new tasks start on', false)
  .addOption(homeOption())
  .addOption(serverOption())
  .action(run(async (taskId: string, options) => (await commands.control()).migrate(taskId, options)));

program
  .command('versions')
  .description('the stored versions of pipelines')
  .command('use')
  .description(
    'make a stored version of a pipeline the one new tasks start on (a rollback); coordinators of older versions restarting leave it so',
  )
  .argument('<pipeline>', 'the pipeline')
  .argument('<version>', 'its hash, or a prefix of it (troupe validate prints it for a file)')
  .addOption(homeOption())
  .addOption(serverOption())
  .action(
    run(async (pipeline: string, version: string, options) =>
      (await commands.versions()).use(pipeline, version, options),
    ),
  );

program
  .command('approvals')
  .description('list what agents are waiting on a person for: approvals of `ask` calls and questions')
  .option('-a, --all', 'include decided, answered and expired ones', false)
  .option('--json', 'one JSON record per line', false)
  .addOption(homeOption())
  .addOption(serverOption())
  .addOption(pipelinesOption())
  .action(run(async (options) => (await commands.approvals()).listApprovals(options)));

program
  .command('approve')
  .description('allow a pending call; the agent runs it')
  .argument('<approval-id>', 'as listed by troupe approvals')
  .argument('[reason]', 'why, passed to the agent')
  .option('--reason <text>', 'the reason, as an option')
  .option('--by <name>', 'who decides (default: user@host)')
  .addOption(homeOption())
  .addOption(serverOption())
  .addOption(pipelinesOption())
  .action(
    run(async (id: string, reason: string | undefined, options) =>
      (await commands.approvals()).decide(id, 'allow', { ...options, reason: reasonOf(reason, options) }),
    ),
  );

program
  .command('deny')
  .description('refuse a pending call; the agent is told the reason')
  .argument('<approval-id>', 'as listed by troupe approvals')
  .argument('[reason]', 'why, passed to the agent (required, here or as --reason)')
  .option('--reason <text>', 'the reason, as an option')
  .option('--by <name>', 'who decides (default: user@host)')
  .addOption(homeOption())
  .addOption(serverOption())
  .addOption(pipelinesOption())
  .action(
    run(async (id: string, reason: string | undefined, options) =>
      (await commands.approvals()).decide(id, 'deny', { ...options, reason: reasonOf(reason, options) }),
    ),
  );

program
  .command('answer')
  .description("answer an agent's question (from its ask_human tool)")
  .argument('<question-id>', 'as listed by troupe approvals')
  .argument('<answer>', 'the answer')
  .option('--by <name>', 'who answers (default: user@host)')
  .addOption(homeOption())
  .addOption(serverOption())
  .addOption(pipelinesOption())
  .action(
    run(async (id: string, text: string, options) => (await commands.approvals()).answer(id, text, options)),
  );

program
  .command('validate')
  .description('check pipeline files; report every problem with file, line and path')
  .argument('<pipeline.yaml...>', 'pipeline files')
  .option('--print', 'print the resolved pipeline (defaults applied) as JSON', false)
  .option('--no-keys', 'do not require the API key variables to be set (for CI without secrets)')
  .option('--allow-mcp-commands', 'accept MCP servers that start a local command (stdio transport)', false)
  .action(run(async (files: string[], options) => (await commands.validate()).validate(files, options)));

program
  .command('graph')
  .description("print a pipeline's flow as a Mermaid flowchart (--json: as the graph the dashboard draws)")
  .argument('<pipeline.yaml>', 'the pipeline file')
  .option('--json', 'print the graph as JSON: its nodes and edges', false)
  .action(run(async (file: string, options) => (await commands.graph()).graph(file, options)));

program
  .command('init')
  .description('write a starter pipeline (runs offline), its script and a .gitignore entry for .troupe/')
  .argument('[dir]', 'where to write them', '.')
  .option('--name <name>', "the pipeline's name (default: the directory's name)")
  .action(run(async (dir: string, options) => (await commands.init()).init(dir, options)));

program
  .command('demo')
  .description('start NATS and the coordinator, run one task and print its message flow, then stop')
  .argument('[pipeline.yaml]', 'pipeline file', 'examples/demo.yaml')
  .option('--goal <text>', 'the task goal', 'Write a short hello note in notes/hello.md')
  .option('--timeout <seconds>', 'how long to wait for the task', positive, 120)
  .addOption(homeOption())
  .action(run(async (file: string, options) => (await commands.demo()).demo(file, options)));

program
  .command('nats-config')
  .description(
    'write a nats-server accounts block with an account and an nkey user per role, each allowed the least it needs, and their seeds',
  )
  .argument('<pipeline.yaml...>', 'the pipelines the roles name')
  .requiredOption(
    '--out <dir>',
    "where to write troupe-auth.conf and each user's <name>.nk and <name>.env (required)",
  )
  .option(
    '--coordinator <name>',
    'a coordinator user (repeatable; default one named coordinator)',
    collect,
    [],
  )
  .option(
    '--worker <name=pipeline:agents>',
    'a worker serving these agents, comma-separated (repeatable)',
    collect,
    [],
  )
  .option(
    '--submitter <name=pipelines>',
    'a user that submits tasks to these pipelines (repeatable)',
    collect,
    [],
  )
  .option(
    '--observer <name=pipelines>',
    "a user that reads these pipelines' events and tasks (repeatable)",
    collect,
    [],
  )
  .option(
    '--approver <name=pipelines>',
    'a user that decides approvals and answers questions (repeatable)',
    collect,
    [],
  )
  .option(
    '--gateway <name>',
    'a user for troupe gateway: submits, cancels, decides and reads for every pipeline (repeatable)',
    collect,
    [],
  )
  .addOption(
    replicasOption(
      'the --replicas the deployment runs with (above 1, workers may read every pipeline’s journal and memory; default 1)',
    ),
  )
  .action(
    run(async (files: string[], options) =>
      (await commands.natsConfig()).natsConfig(files, {
        ...options,
        coordinator: options.coordinator.length > 0 ? options.coordinator : ['coordinator'],
      }),
    ),
  );

// Every command that talks to NATS logs in the same way, with the nats CLI's environment variables.
for (const command of program.commands) {
  if (command.options.some((option) => option.long === '--server')) {
    for (const option of natsAccessOptions()) command.addOption(option);
  }
}

/**
 * A usage error (an argument missing, an option's value refused, a command unknown) is one line, as every other
 * error is, and points to the command's help instead of filling the terminal with it.
 */
const pointToHelp = (command: Command, path: string) => {
  command.showHelpAfterError(false).configureOutput({
    outputError: (message, write) =>
      write(
        `troupe: ${redactSecrets(
          message
            .replace(/^error: /, '')
            .trim()
            .replace(/\s*\n\s*/g, ' '),
        )} (see ${path} --help)\n`,
      ),
  });
  for (const sub of command.commands) pointToHelp(sub, `${path} ${sub.name()}`);
};
pointToHelp(program, 'troupe');

await program.parseAsync(process.argv);
