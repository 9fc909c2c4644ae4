import { createHash } from 'node:crypto';
import { Name } from '@troupe/protocol';
import { z } from 'zod';
import type { PipelineConfig } from './pipelineSchema.ts';

/** A version's hash: sha256 of its content, in hex. */
export const VersionHash = z.string().regex(/^[0-9a-f]{64}$/, 'must be a 64-digit hex sha256');

/**
 * One version of a pipeline, whole: its validated config and the text of every file it refers to (scripts, by the
 * path the config names them with), so a coordinator can run it without the file. API keys are not part of it:
 * each host reads them from its own environment.
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

/** How many hex digits of a version's hash people see (`troupe runs`, `status`, the gateway): as git shows a commit. */
export const SHORT_VERSION = 12;

/** A version's short form, as people see it. */
export const shortVersion = (hash: string): string => hash.slice(0, SHORT_VERSION);

/**
 * The content hash of a pipeline's config and the files it refers to. Keys are sorted, so two files that say the
 * same thing in another order are one version; a change to a prompt, a step or a script is another.
 */
export function versionHash(config: PipelineConfig, files: Readonly<Record<string, string>>): string {
  return createHash('sha256').update(canonicalJson({ config, files })).digest('hex');
}

/** The version a loaded config and its files make. */
export function pipelineVersion(
  config: PipelineConfig,
  files: Readonly<Record<string, string>>,
  storedAt: Date,
): PipelineVersion {
  return {
    pipeline: config.name,
    hash: versionHash(config, files),
    config,
    files: { ...files },
    storedAt: storedAt.toISOString(),
  };
}

/** JSON with every object's keys sorted, and undefined members left out as JSON.stringify does. */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map((v) => canonicalJson(v ?? null)).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const members = Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`);
    return `{${members.join(',')}}`;
  }
  return JSON.stringify(value);
}
