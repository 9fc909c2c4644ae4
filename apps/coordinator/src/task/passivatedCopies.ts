import { deflateSync, inflateSync, type ZlibOptions } from 'node:zlib';
import type { LastMade } from './checkpointWriter.ts';

/** What a passivated task keeps of its tree and its writer: its workflow's persisted snapshot, its writer's last record. */
export interface Kept extends LastMade {
  snapshot: unknown;
}

/**
 * The compact copies passivated tasks keep of what their trees and writers held (see `passivation.ts`): JSON, as the
 * record is written to KV, deflated, in a one-byte string (in the heap, like the objects it stands for). A runner's
 * copies share a deflate dictionary made from the shape of its first one (its keys, every string and number blanked:
 * the keys of the first task's input or step outputs may be among them, never a value), kept as long as the runner:
 * what every copy says alike costs next to nothing. zlib's checksum tells a corrupt copy.
 */
export class PassivatedCopies {
  #dictionary: ZlibOptions | undefined;

  /** A task's copy of what it kept. */
  pack(kept: Kept): string {
    const json = JSON.stringify(kept);
    this.#dictionary ??= { dictionary: dictionaryOf(json) };
    return deflateSync(json, this.#dictionary).toString('latin1');
  }

  /** What a task's copy holds; throws when the copy is corrupt, or holds no workflow snapshot to restore. */
  unpack(packed: string): Kept {
    const json = inflateSync(Buffer.from(packed, 'latin1'), this.#dictionary).toString('utf8');
    const kept: unknown = JSON.parse(json);
    if (!isKept(kept)) throw new Error('the copy holds no workflow snapshot');
    return kept;
  }
}

/** Deflate's window: all zlib reads of a dictionary is its last 32 KB. */
const WINDOW = 32 * 1024;

/** A deflate dictionary of a copy's shape, its last {@link WINDOW} bytes at most. */
function dictionaryOf(json: string): Buffer {
  const shape = Buffer.from(JSON.stringify(blanked(JSON.parse(json))));
  return shape.length <= WINDOW ? shape : Buffer.from(shape.subarray(-WINDOW));
}

function isKept(value: unknown): value is Kept {
  if (typeof value !== 'object' || value === null) return false;
  const { snapshot, record } = value as Record<string, unknown>;
  return (
    typeof snapshot === 'object' && snapshot !== null && (record === undefined || typeof record === 'object')
  );
}

/** A JSON value's shape: its keys and structure, every string empty and every number 0. */
function blanked(value: unknown): unknown {
  if (typeof value === 'string') return '';
  if (typeof value === 'number') return 0;
  if (Array.isArray(value)) return value.map(blanked);
  if (typeof value !== 'object' || value === null) return value;
  return Object.fromEntries(Object.entries(value).map(([key, entry]) => [key, blanked(entry)]));
}
