import { fromJsonSchema, type McpServer, type RegisteredTool } from '@modelcontextprotocol/server';
import type { PipelineRegistration } from '@troupe/protocol';
import { mayTouch } from '../auth.ts';
import { type LongTaskDeps, registerStartTool } from './longTasks.ts';
import { callPipeline, type PipelineCallArgs, type PipelineCallContext } from './pipelineCall.ts';
import { type PipelineToolShape, pipelineToolShape } from './pipelineToolShape.ts';

/**
 * The tools of one server that start tasks: one per pipeline the principal may submit to, and `troupe_start` over
 * them all. `sync` brings them in line with the pipelines registered now (a pipeline loaded after the client
 * connected, or changed); the SDK tells a connected client that its tool list changed.
 */
export class PipelineTools {
  readonly #server: McpServer;
  readonly #call: PipelineCallContext;
  readonly #longTasks: LongTaskDeps;
  readonly #tools = new Map<string, { shape: string; tool: RegisteredTool }>();
  #start: { names: string; tool: RegisteredTool | undefined } = { names: '', tool: undefined };

  readonly #warn: (message: string) => void;

  constructor(
    server: McpServer,
    call: PipelineCallContext,
    longTasks: LongTaskDeps,
    warn: (message: string) => void = () => undefined,
  ) {
    this.#server = server;
    this.#call = call;
    this.#longTasks = longTasks;
    this.#warn = warn;
  }

  sync(pipelines: readonly PipelineRegistration[]): void {
    const mine = pipelines.filter((p) => mayTouch(this.#call.who, p.name));
    const shapes = new Map(mine.map((p) => [p.name, pipelineToolShape(p)]));
    for (const [name, { shape, tool }] of this.#tools) {
      const now = shapes.get(name);
      if (now && JSON.stringify(now) === shape) continue;
      tool.remove();
      this.#tools.delete(name);
    }
    for (const [name, shape] of shapes) {
      if (this.#tools.has(name)) continue;
      try {
        this.#tools.set(name, { shape: JSON.stringify(shape), tool: this.#register(shape) });
      } catch (error) {
        // A schema the SDK cannot compile leaves that pipeline out (troupe_start still runs it), not every other.
        this.#warn(`pipeline ${name} is not offered as a tool: ${(error as Error).message}`);
      }
    }
    const names = [...shapes.keys()].sort();
    if (names.join(',') !== this.#start.names) {
      this.#start.tool?.remove();
      this.#start = { names: names.join(','), tool: registerStartTool(this.#server, this.#longTasks, names) };
    }
  }

  #register(shape: PipelineToolShape): RegisteredTool {
    const structured = shape.outputSchema !== undefined;
    return this.#server.registerTool(
      shape.name,
      {
        title: shape.title,
        description: shape.description,
        inputSchema: fromJsonSchema<PipelineCallArgs>(shape.inputSchema as never),
        ...(shape.outputSchema ? { outputSchema: fromJsonSchema(shape.outputSchema as never) } : {}),
        // A pipeline's agents may write files, run commands and call models: no hint says it is harmless.
        annotations: { openWorldHint: true },
      },
      (args, ctx) => callPipeline(this.#call, shape.name, args, structured, ctx),
    );
  }
}
