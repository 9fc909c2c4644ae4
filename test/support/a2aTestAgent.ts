import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  AgentCard,
  formatSSEEvent,
  type Message,
  type Part,
  Role,
  SSE_HEADERS,
  type Task,
  TaskState,
} from '@a2a-js/sdk';
import {
  AgentEvent,
  type AgentExecutor,
  DefaultRequestHandler,
  type ExecutionEventBus,
  InMemoryTaskStore,
  JsonRpcTransportHandler,
  type RequestContext,
  ServerCallContext,
} from '@a2a-js/sdk/server';

/** What a test agent does with a message: decided by the `goal` of the step's data part. */
export type Behaviour = 'echo' | 'hold' | 'ask' | 'ask-twice' | 'slow';

/** One request the agent's HTTP server received: its JSON-RPC method and headers. */
export interface ReceivedRequest {
  method: string;
  authorization?: string | undefined;
  traceparent?: string | undefined;
}

/**
 * A minimal A2A v1.0 agent built from the official SDK's server pieces (`DefaultRequestHandler`, `InMemoryTaskStore`,
 * an `AgentExecutor`) on a plain node:http server with `JsonRpcTransportHandler`: the remote side of the tests.
 * The step's goal picks the behaviour: `echo` (or any other) completes at once with a text and a data artifact (about
 * the foreach item, when there is one), `hold` works until {@link TestAgent.release}, `ask` asks for input and
 * completes with the answer, `ask-twice` asks a second question after the first answer, `slow` works until cancelled. A reviewer's step is approved, its verdict a data part.
 */
export interface TestAgent {
  url: string;
  cardUrl: string;
  /** Every message the executor was given, in order (a message sent twice shows twice). */
  messages: Message[];
  requests: ReceivedRequest[];
  /** Lets every held task complete (and every task held after this). */
  release(): void;
  /** Holds the tasks that come after this until the next {@link release}. */
  hold(): void;
  /** The ids of the tasks cancelled through CancelTask. */
  cancelled: string[];
  close(): Promise<void>;
}

const text = (value: string): Part => ({
  content: { $case: 'text', value },
  metadata: undefined,
  filename: '',
  mediaType: 'text/plain',
});
const data = (value: unknown): Part => ({
  content: { $case: 'data', value },
  metadata: undefined,
  filename: '',
  mediaType: 'application/json',
});

/** The step as the message's data part gives it. */
function stepOf(message: Message): { goal: string; expect?: string; input?: { item?: unknown } } {
  for (const part of message.parts) {
    if (part.content?.$case === 'data') return part.content.value as { goal: string };
  }
  return { goal: '' };
}

export async function startTestAgent(
  name = 'researcher',
  options: { streaming?: boolean } = {},
): Promise<TestAgent> {
  const messages: Message[] = [];
  const requests: ReceivedRequest[] = [];
  const cancelled: string[] = [];
  let released = false;
  const waiting = new Set<() => void>();
  const release = () => {
    released = true;
    for (const go of waiting) go();
  };
  const untilReleased = () => (released ? Promise.resolve() : new Promise<void>((go) => waiting.add(go)));
  const cancelling = new Map<string, () => void>();
  /** Tasks of `ask-twice` whose first question is not answered yet. */
  const twice = new Set<string>();

  const status = (ctx: RequestContext, state: TaskState, said?: string) =>
    AgentEvent.statusUpdate({
      taskId: ctx.taskId,
      contextId: ctx.contextId,
      status: {
        state,
        message: said
          ? {
              messageId: `${ctx.taskId}-${state}`,
              contextId: ctx.contextId,
              taskId: ctx.taskId,
              role: Role.ROLE_AGENT,
              parts: [text(said)],
              metadata: undefined,
              extensions: [],
              referenceTaskIds: [],
            }
          : undefined,
        timestamp: new Date().toISOString(),
      },
      metadata: undefined,
    });
  const artifact = (ctx: RequestContext, parts: Part[]) =>
    AgentEvent.artifactUpdate({
      taskId: ctx.taskId,
      contextId: ctx.contextId,
      artifact: {
        artifactId: 'result',
        name: 'result',
        description: '',
        parts,
        metadata: undefined,
        extensions: [],
      },
      append: false,
      lastChunk: true,
      metadata: undefined,
    });

  const executor: AgentExecutor = {
    async execute(ctx: RequestContext, bus: ExecutionEventBus) {
      const message = ctx.userMessage;
      messages.push(message);
      const task: Task = ctx.task ?? {
        id: ctx.taskId,
        contextId: ctx.contextId,
        status: {
          state: TaskState.TASK_STATE_SUBMITTED,
          message: undefined,
          timestamp: new Date().toISOString(),
        },
        artifacts: [],
        history: [message],
        metadata: undefined,
      };
      bus.publish(AgentEvent.task(task));
      // A follow-up on a task that asked: the answer completes it (the first of two questions asks the second).
      if (ctx.task) {
        const answer = message.parts
          .map((p) => (p.content?.$case === 'text' ? p.content.value : ''))
          .join('');
        if (twice.delete(ctx.taskId)) {
          bus.publish(status(ctx, TaskState.TASK_STATE_INPUT_REQUIRED, `And which month of ${answer}?`));
          bus.finished();
          return;
        }
        bus.publish(artifact(ctx, [text(`${name} was told: ${answer}`)]));
        bus.publish(status(ctx, TaskState.TASK_STATE_COMPLETED));
        bus.finished();
        return;
      }
      const step = stepOf(message);
      const goal = step.goal as Behaviour;
      // A reviewer's step: its verdict, as data.
      if (step.expect === 'verdict') {
        bus.publish(
          artifact(ctx, [text('looks good'), data({ decision: 'approve', feedback: 'looks good' })]),
        );
        bus.publish(status(ctx, TaskState.TASK_STATE_COMPLETED));
        bus.finished();
        return;
      }
      bus.publish(status(ctx, TaskState.TASK_STATE_WORKING));
      if (goal === 'ask-twice') twice.add(ctx.taskId);
      if (goal === 'ask' || goal === 'ask-twice') {
        bus.publish(status(ctx, TaskState.TASK_STATE_INPUT_REQUIRED, 'Which year should the report cover?'));
        bus.finished();
        return;
      }
      if (goal === 'hold') await untilReleased();
      if (goal === 'slow') {
        await new Promise<void>((stop) => cancelling.set(ctx.taskId, stop));
        return;
      }
      const about = step.input?.item === undefined ? goal : `${goal} ${String(step.input.item)}`;
      bus.publish(artifact(ctx, [text(`${name} found: ${about}`), data({ findings: [about], by: name })]));
      bus.publish(status(ctx, TaskState.TASK_STATE_COMPLETED));
      bus.finished();
    },
    async cancelTask(taskId: string, bus: ExecutionEventBus) {
      cancelled.push(taskId);
      bus.publish(
        AgentEvent.statusUpdate({
          taskId,
          contextId: '',
          status: {
            state: TaskState.TASK_STATE_CANCELED,
            message: undefined,
            timestamp: new Date().toISOString(),
          },
          metadata: undefined,
        }),
      );
      bus.finished();
      cancelling.get(taskId)?.();
    },
  };

  let base = '';
  const card = () =>
    AgentCard.fromJSON({
      name,
      description: `test agent ${name}`,
      version: '1.0.0',
      supportedInterfaces: [{ url: `${base}/rpc`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
      capabilities: { streaming: options.streaming === true, pushNotifications: false },
      defaultInputModes: ['text/plain', 'application/json'],
      defaultOutputModes: ['text/plain', 'application/json'],
      skills: [{ id: 'research', name: 'research', description: 'finds things', tags: ['test'] }],
    });
  const store = new InMemoryTaskStore();
  let handler: DefaultRequestHandler | undefined;
  const transport = () => {
    handler ??= new DefaultRequestHandler(card(), store, executor);
    return new JsonRpcTransportHandler(handler);
  };

  const server: Server = createServer((req, res) => {
    void (async () => {
      const body = await read(req);
      if (req.method === 'GET' && req.url === '/.well-known/agent-card.json') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(AgentCard.toJSON(card())));
        return;
      }
      const parsed = JSON.parse(body) as { method?: string };
      requests.push({
        method: parsed.method ?? '',
        authorization: req.headers.authorization,
        traceparent: req.headers.traceparent as string | undefined,
      });
      const result = await transport().handle(body, new ServerCallContext({ requestedVersion: '1.0' }));
      if (Symbol.asyncIterator in result) {
        // A stream (SubscribeToTask): server-sent events, one per update, until the task ends or the client leaves.
        res.writeHead(200, SSE_HEADERS);
        req.on('close', () => void result.return(undefined));
        for await (const event of result) res.write(formatSSEEvent(event));
        res.end();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify(result));
    })().catch((error: unknown) => {
      res.writeHead(500);
      res.end(String(error));
    });
  });
  await new Promise<void>((ready) => server.listen(0, '127.0.0.1', ready));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url: base,
    cardUrl: `${base}/.well-known/agent-card.json`,
    messages,
    requests,
    release,
    hold: () => {
      released = false;
    },
    cancelled,
    async close() {
      release();
      for (const stop of cancelling.values()) stop();
      server.closeAllConnections();
      await new Promise<void>((done) => server.close(() => done()));
    },
  };
}

function read(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => resolve(body));
    req.on('error', reject);
  });
}
