import { bucketIfAny, workflowStoreIfAny } from '@troupe/client';
import { BUCKETS, StoredVersionConfig } from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime';

type LooseStep = { id?: unknown; kind?: unknown; answer?: unknown; branches?: unknown; do?: unknown };

/**
 * The JSON Schema a `human` step declares for its answer (its `answer:`), read from the pipeline version the task
 * runs on (KV `versions`), so an A2A client is told the shape of the answer it is asked for. Undefined when the step
 * declares none, or its version cannot be read (a gateway whose NATS user may not read `versions`).
 */
export class AnswerSchemas {
  readonly #bus: JetStreamBus;

  constructor(bus: JetStreamBus) {
    this.#bus = bus;
  }

  /** The schema of the step whose call id is `stepId` (`<taskId>.<step>.<round>…`) in task `taskId`. */
  async of(taskId: string, stepId: string): Promise<unknown> {
    if (!stepId.startsWith(`${taskId}.`)) return undefined;
    const step = stepId.slice(taskId.length + 1).split('.')[0];
    if (!step) return undefined;
    try {
      const record = (await (await workflowStoreIfAny(this.#bus))?.get(taskId))?.value;
      if (!record?.version) return undefined;
      const versions = await bucketIfAny(this.#bus, BUCKETS.versions, StoredVersionConfig);
      const stored = (await versions?.get(`${record.pipeline}.${record.version}`))?.value;
      const flow = stored?.config.flow;
      return Array.isArray(flow) ? findHumanAnswer(flow as LooseStep[], step) : undefined;
    } catch {
      return undefined;
    }
  }
}

/** The `answer` of the human step `id`, wherever in the flow it is (in a parallel step's branch, a foreach's steps). */
function findHumanAnswer(steps: readonly LooseStep[], id: string): unknown {
  for (const step of steps) {
    if (step.id === id) return step.kind === 'human' ? step.answer : undefined;
    const nested = [
      ...(Array.isArray(step.do) ? [step.do as LooseStep[]] : []),
      ...(typeof step.branches === 'object' && step.branches !== null
        ? Object.values(step.branches as Record<string, unknown>).filter(Array.isArray)
        : []),
    ] as LooseStep[][];
    for (const inner of nested) {
      const found = findHumanAnswer(inner, id);
      if (found !== undefined) return found;
    }
  }
  return undefined;
}
