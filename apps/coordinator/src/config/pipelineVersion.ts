import { createHash } from 'node:crypto';
import type { PipelineVersion } from '@troupe/protocol';
import type { PipelineConfig } from './pipelineSchema.ts';

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
