import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type Message,
  type Part,
  Role,
  type SendMessageRequest,
  type StreamResponse,
  type Task,
} from '@a2a-js/sdk';
import {
  type Client,
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from '@a2a-js/sdk/client';
import { type Gateway, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { createLogger } from '@troupe/runtime';
import { fixturePath, type Harness, startHarness } from './harness.ts';

/** The A2A bindings the official client speaks to the gateway with. */
export const BINDINGS = ['JSONRPC', 'HTTP+JSON'] as const;
export type Binding = (typeof BINDINGS)[number];

export const TOKENS = {
  admin: 'a2a-admin-token-0123456789abcdef',
  /** May submit to `echo` only. */
  echoOnly: 'a2a-echo-token-0123456789abcdef',
  /** May read every pipeline, and change nothing. */
  reader: 'a2a-reader-token-0123456789abcde',
};
export type TokenName = keyof typeof TOKENS;

/** The structured output `echo`'s writer gives: a JSON object, so its artifact has a data part. */
export const ECHO_OUTPUT = { haiku: 'waves on stone', lines: 3 };

export interface A2aEnv {
  h: Harness;
  gateway: Gateway;
  logLines: string[];
  stop(): Promise<void>;
}

/**
 * A coordinator on a real nats-server with the pipelines the A2A tests drive, and a gateway in front: `echo` (one
 * step, structured output), `paced` (three agents one after another, each slow enough to drop a stream between),
 * and the fixtures `gated` (an approval), `confirming` (a human step), `slowpoke` (a model that takes 30 s) and
 * `summing` (an input schema) and `hasty` (a task budget of 1 s against a model that takes 3 s: it fails).
 */
export async function startA2aEnv(): Promise<A2aEnv> {
  const dir = await mkdtemp(join(tmpdir(), 'troupe-a2a-'));
  await writeFile(
    join(dir, 'echo.yaml'),
    [
      'version: 1',
      'name: echo',
      'description: Writes a haiku about the goal.',
      'models: { scripted: { provider: scripted, script: ./echo.script.yaml } }',
      'defaults: { model: scripted }',
      'agents: { writer: { instructions: Write a haiku. } }',
      'flow: [{ id: write, kind: agent, agent: writer }]',
    ].join('\n'),
  );
  await writeFile(
    join(dir, 'echo.script.yaml'),
    `agents:\n  writer:\n    - content: '${JSON.stringify(ECHO_OUTPUT)}'\n`,
  );
  await writeFile(
    join(dir, 'paced.yaml'),
    [
      'version: 1',
      'name: paced',
      'models: { scripted: { provider: scripted, script: ./paced.script.yaml } }',
      'defaults: { model: scripted }',
      'agents:',
      '  first: { instructions: Go first. }',
      '  second: { instructions: Go second. }',
      '  third: { instructions: Go third. }',
      'flow:',
      '  - { id: one, kind: agent, agent: first }',
      '  - { id: two, kind: agent, agent: second }',
      '  - { id: three, kind: agent, agent: third }',
    ].join('\n'),
  );
  await writeFile(
    join(dir, 'paced.script.yaml'),
    [
      'agents:',
      '  first: [{ content: one done, delayMs: 300 }]',
      '  second: [{ content: two done, delayMs: 1500 }]',
      '  third: [{ content: three done, delayMs: 300 }]',
    ].join('\n'),
  );
  const h = await startHarness([
    join(dir, 'echo.yaml'),
    join(dir, 'paced.yaml'),
    fixturePath('gated.yaml'),
    fixturePath('confirming.yaml'),
    fixturePath('slowpoke.yaml'),
    fixturePath('summing.yaml'),
    fixturePath('hasty.yaml'),
  ]);
  const logLines: string[] = [];
  const gateway = await startA2aGateway(h, logLines);
  return {
    h,
    gateway,
    logLines,
    async stop() {
      await gateway.close();
      await h.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A gateway on the harness's NATS with the tests' tokens: any number may serve the same Troupe. */
export function startA2aGateway(h: Harness, logLines: string[] = []): Promise<Gateway> {
  return startGateway({
    bus: h.bus,
    logger: createLogger({
      level: 'info',
      destination: { write: (line: string) => void logLines.push(line) },
    }),
    tokens: new TokenStore([
      { name: 'ops', sha256: hashToken(TOKENS.admin), scopes: ['admin'] },
      { name: 'ci', sha256: hashToken(TOKENS.echoOnly), scopes: ['submit'], pipelines: ['echo'] },
      { name: 'watcher', sha256: hashToken(TOKENS.reader), scopes: ['read'] },
    ]),
    port: 0,
    dashboardDir: false,
    a2aPush: { urlPolicy: { allowPrivate: true } },
  });
}

/** A fetch that sends the token, as a deployment's A2A client is configured to. */
export const fetchWithToken =
  (token: string): typeof fetch =>
  (input, init) => {
    const headers = new Headers(init?.headers);
    headers.set('authorization', `Bearer ${token}`);
    return fetch(input, { ...init, headers });
  };

/** The official client for a pipeline's card (or the gateway's, without one), on one binding, with a token. */
export async function a2aClient(
  env: Pick<A2aEnv, 'gateway'>,
  pipeline: string | undefined,
  binding: Binding,
  token: TokenName = 'admin',
): Promise<Client> {
  const fetchImpl = fetchWithToken(TOKENS[token]);
  const factory = new ClientFactory(
    ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
      transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
      preferredTransports: [binding],
      cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
    }),
  );
  // The card URL as configured: a pipeline's card lives below its path.
  return pipeline
    ? factory.createFromUrl(`${env.gateway.url}/a2a/${pipeline}/`)
    : factory.createFromUrl(env.gateway.url);
}

export const text = (value: string): Part => ({
  content: { $case: 'text', value },
  metadata: undefined,
  filename: '',
  mediaType: 'text/plain',
});

export const data = (value: unknown): Part => ({
  content: { $case: 'data', value },
  metadata: undefined,
  filename: '',
  mediaType: 'application/json',
});

/** A user's message, new unless it names a task or a context. */
export function message(parts: Part[], to: { taskId?: string; contextId?: string } = {}): Message {
  return {
    messageId: randomUUID(),
    contextId: to.contextId ?? '',
    taskId: to.taskId ?? '',
    role: Role.ROLE_USER,
    parts,
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

export function send(
  parts: Part[],
  options: { taskId?: string; contextId?: string; returnImmediately?: boolean; tenant?: string } = {},
): SendMessageRequest {
  return {
    tenant: options.tenant ?? '',
    message: message(parts, options),
    configuration: options.returnImmediately
      ? { acceptedOutputModes: [], taskPushNotificationConfig: undefined, returnImmediately: true }
      : undefined,
    metadata: undefined,
  };
}

/** The sendMessage result as a task (this agent always answers with one). */
export function asTask(result: Message | Task): Task {
  if (!('status' in result)) throw new Error(`expected a task, got a message: ${JSON.stringify(result)}`);
  return result;
}

/** A stream's updates in a form a test can read: `task:STATE`, `status:STATE text`, `artifact:name`. */
export function describeUpdate(update: StreamResponse): string {
  const payload = update.payload;
  if (!payload) return 'empty';
  if (payload.$case === 'task') return `task:${stateName(payload.value.status?.state)}`;
  if (payload.$case === 'artifactUpdate') return `artifact:${payload.value.artifact?.name}`;
  if (payload.$case === 'statusUpdate') {
    const first = payload.value.status?.message?.parts[0]?.content;
    return `status:${stateName(payload.value.status?.state)} ${first?.$case === 'text' ? first.value : ''}`.trim();
  }
  return 'message';
}

const STATE_NAMES: Record<number, string> = {
  1: 'SUBMITTED',
  2: 'WORKING',
  3: 'COMPLETED',
  4: 'FAILED',
  5: 'CANCELED',
  6: 'INPUT_REQUIRED',
  7: 'REJECTED',
};
export const stateName = (state: number | undefined) =>
  state === undefined ? 'none' : (STATE_NAMES[state] ?? `${state}`);

/** A raw request to the gateway, for what the official client would never send. */
export async function raw(
  env: A2aEnv,
  method: string,
  path: string,
  options: { token?: TokenName | null; body?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: Record<string, unknown>; headers: Headers }> {
  const token = options.token === undefined ? 'admin' : options.token;
  const response = await fetch(`${env.gateway.url}${path}`, {
    method,
    headers: {
      ...(token ? { authorization: `Bearer ${TOKENS[token]}` } : {}),
      ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
      ...options.headers,
    },
    ...(options.body === undefined ? {} : { body: options.body }),
  });
  const textBody = await response.text();
  let body: Record<string, unknown> = {};
  try {
    body = textBody ? (JSON.parse(textBody) as Record<string, unknown>) : {};
  } catch {
    body = { text: textBody };
  }
  return { status: response.status, body, headers: response.headers };
}
