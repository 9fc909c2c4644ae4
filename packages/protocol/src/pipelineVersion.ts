import { z } from 'zod';
import { Name } from './names.ts';

/** A version's hash: sha256 of its content, in hex. */
export const VersionHash = z.string().regex(/^[0-9a-f]{64}$/, 'must be a 64-digit hex sha256');

/**
 * One version of a pipeline, whole, as the KV bucket `versions` stores it for every coordinator and worker: its
 * validated config and the text of every file it refers to (scripts, by the path the config names them with), so a
 * coordinator can run it without the file. API keys are not part of it: each host reads them from its own
 * environment.
 */
export const PipelineVersion = z.object({
  pipeline: Name,
  hash: VersionHash,
  /** The pipeline config as validated (defaults filled in); parsed again with `PipelineConfig` where it is used. */
  config: z.record(z.string(), z.unknown()),
  /** The files the config refers to, by the path it names them with. */
  files: z.record(z.string(), z.string()),
  /** When a coordinator last started with this version (and stored it again): what its retention counts from. */
  storedAt: z.string(),
  /**
   * When this version was first stored, or chosen as the newest since (`troupe versions use`): a coordinator makes
   * its version the newest only when it is no older than the newest by this, so restarting an old one rolls nothing
   * back. Absent in versions stored before it was kept: their `storedAt` stands in.
   */
  introducedAt: z.string().optional(),
});
export type PipelineVersion = z.infer<typeof PipelineVersion>;
