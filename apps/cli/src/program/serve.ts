import { type Command, Option } from 'commander';
import { commands } from '../commandModules.ts';
import { HELP_DEFAULTS } from '../helpDefaults.ts';
import { commandAction } from './commandAction.ts';
import {
  collect,
  duration,
  eventBatchOption,
  homeOption,
  logLevelOption,
  noEventBatchOption,
  positive,
  positiveInteger,
  replicasOption,
  seconds,
  serverOption,
  size,
  stopTimeoutOption,
} from './options.ts';

/** Serving: the coordinator, workers, the gateway, the MCP server, and the gateway's tokens. */
export function registerServeCommands(program: Command): void {
  declareUp(program);
  declareWorker(program);
  declareGateway(program);
  declareMcp(program);
  declareToken(program);
}

function declareUp(program: Command): void {
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
      '--no-local-steps',
      'send every step over NATS, even one whose agent this process hosts (by default such a step runs here, with no NATS hop, up to --concurrency at once per pipeline; workers take the rest)',
    )
    .addOption(eventBatchOption())
    .addOption(noEventBatchOption())
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
      '--passivate-after <seconds>',
      "stop the actors of a task whose steps have only waited this long on a model or a person, keeping its record and the step's request in flight, and restore them when the reply or a signal comes; the agents served here park such a step's actor the same way; 0 keeps every task's actors (default 5)",
      seconds,
    )
    .option(
      '--checkpoint-linger <seconds>',
      "how long the record of a task's step run here may wait for the next write while only steps run here follow; a crash within it asks those steps' models for their last reply again; 0 writes every checkpoint, each at once (default 0.02)",
      seconds,
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
    .action(commandAction(async (files: string[], options) => (await commands.up()).up(files, options)));
}

function declareWorker(program: Command): void {
  program
    .command('worker')
    .description(
      "serve pipelines' agents (no workflows) on the coordinators' NATS server; more workers, more capacity",
    )
    .argument('<pipeline.yaml...>', 'pipeline files whose agents to serve')
    .option('--agents <names>', 'only these agents, comma-separated')
    .option(
      '--passivate-after <seconds>',
      "stop the agent actor of a step whose model call has waited this long, keeping the call, and restore it when the reply or a stop comes; 0 keeps every step's actor (default 5)",
      seconds,
    )
    .addOption(eventBatchOption())
    .addOption(noEventBatchOption())
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
    .action(
      commandAction(async (files: string[], options) => (await commands.worker()).worker(files, options)),
    );
}

function declareGateway(program: Command): void {
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
    .action(commandAction(async (options) => (await commands.gateway()).gateway(options)));
}

function declareMcp(program: Command): void {
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
    .action(commandAction(async (options) => (await commands.mcp()).mcp(options)));
}

function declareToken(program: Command): void {
  program
    .command('token')
    .description('make a gateway token: its hash goes to the tokens file, the token is printed once')
    .argument('<name>', 'who holds it (recorded as who decided an approval)')
    .option('--scope <scope>', 'read, submit, approve or admin (repeatable; default read)', collect, [])
    .option('--pipeline <name>', 'limit it to this pipeline (repeatable; default every one)', collect, [])
    .option('--file <file>', 'the tokens file', 'troupe-tokens.yaml')
    .action(commandAction(async (name: string, options) => (await commands.gateway()).token(name, options)));
}
