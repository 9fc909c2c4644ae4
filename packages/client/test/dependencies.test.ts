import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const here = import.meta.dirname;
const clientSrc = join(here, '..', 'src');
const runtimeSrc = join(here, '..', '..', 'runtime', 'src');

/** What a module imports at run time (type-only imports are erased), relative or by package name. */
function runtimeImports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  return [...text.matchAll(/^(?:import|export)(?!\s+type\b)[^;]*?from\s+'([^']+)'/gms)].map(
    (m) => m[1] ?? '',
  );
}

/** Every file of ours a module loads, and every package it loads, following relative imports. */
function closure(entry: string): { files: string[]; packages: Set<string> } {
  const files = new Set<string>();
  const packages = new Set<string>();
  const walk = (file: string) => {
    if (files.has(file)) return;
    files.add(file);
    for (const spec of runtimeImports(file)) {
      if (spec.startsWith('.')) walk(resolve(dirname(file), spec));
      else packages.add(spec);
    }
  };
  walk(entry);
  return { files: [...files], packages };
}

describe('@troupe/client loads the NATS side of the runtime only', () => {
  it('imports the runtime through its bus entry, never the whole runtime', () => {
    for (const file of readdirSync(clientSrc).filter((f) => f.endsWith('.ts'))) {
      const troupe = runtimeImports(join(clientSrc, file)).filter((spec) => spec.startsWith('@troupe/'));
      expect(
        troupe.filter((spec) => spec !== '@troupe/protocol' && spec !== '@troupe/runtime/bus'),
        file,
      ).toEqual([]);
    }
  });

  it('whose entry reaches no agent, tool, MCP, tracing or model code', () => {
    const { files, packages } = closure(join(runtimeSrc, 'bus.ts'));
    const ours = files.map((f) => f.slice(runtimeSrc.length + 1));
    expect(ours.filter((f) => /^(agent|mcp|telemetry|sandbox|memory|workspace)\//.test(f))).toEqual([]);
    const heavy = [...packages].filter((p) =>
      /^(openai|@anthropic-ai|@modelcontextprotocol|@opentelemetry|@troupe\/llm)/.test(p),
    );
    expect(heavy).toEqual([]);
  });
});
