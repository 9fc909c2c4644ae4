import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { beforeAll, describe, expect, it } from 'vitest';

/**
 * Turbo replays a task's cached result while the task's hash is unchanged, so the hash must cover every file the
 * task reads, or a change passes unchecked. These read turbo's own plan of the tasks (a dry run, nothing runs) and
 * check it against what the workspaces' files import and what the e2e tests read.
 */

const repoRoot = join(import.meta.dirname, '..');

interface PlannedTask {
  taskId: string;
  package: string;
  task: string;
  directory: string;
  dependencies: string[];
  inputs: Record<string, string>;
}

/** The workspaces whose files a workspace's `.ts` files import by name (`@troupe/…`), itself left out. */
function importedWorkspaces(directory: string, self: string): Set<string> {
  const found = new Set<string>();
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      if (['node_modules', 'dist', '.turbo'].includes(entry.name)) continue;
      const path = join(dir, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (/\.(m?ts|tsx)$/.test(entry.name))
        for (const [, name] of readFileSync(path, 'utf8').matchAll(/['"](@troupe\/[a-z0-9-]+)['"]/g))
          if (name !== undefined && name !== self) found.add(name);
    }
  };
  walk(directory);
  return found;
}

describe("turbo's task hashes", () => {
  let tasks: Map<string, PlannedTask>;

  beforeAll(async () => {
    const { stdout } = await promisify(execFile)(
      join(repoRoot, 'node_modules', '.bin', 'turbo'),
      ['run', 'typecheck', 'test', 'build', '--dry=json'],
      { cwd: repoRoot, env: { ...process.env, TURBO_TELEMETRY_DISABLED: '1' }, maxBuffer: 64 * 1024 * 1024 },
    );
    const plan = JSON.parse(stdout) as { tasks: PlannedTask[] };
    tasks = new Map(plan.tasks.map((task) => [task.taskId, task]));
  });

  /** Every task `taskId` waits for, directly or through others. */
  const reached = (taskId: string): Set<string> => {
    const seen = new Set<string>();
    const visit = (id: string) => {
      for (const dependency of tasks.get(id)?.dependencies ?? []) {
        if (seen.has(dependency)) continue;
        seen.add(dependency);
        visit(dependency);
      }
    };
    visit(taskId);
    return seen;
  };

  it("cover the files of every workspace a workspace's code or tests import, in its typecheck and its test", () => {
    const missing: string[] = [];
    for (const task of tasks.values()) {
      if (task.task !== 'typecheck' && task.task !== 'test') continue;
      const covered = reached(task.taskId);
      for (const name of importedWorkspaces(join(repoRoot, task.directory), task.package))
        if (!covered.has(`${name}#transit`) && !covered.has(`${name}#typecheck`))
          missing.push(`${task.taskId} reads ${name}, whose files are not in its hash`);
    }
    expect(missing).toEqual([]);
  });

  it('cover the files outside any workspace that the e2e tests and the scripts they run read', () => {
    const e2e = tasks.get('@troupe/e2e#test');
    expect(e2e).toBeDefined();
    const inputs = Object.keys(e2e?.inputs ?? {});
    // What the tests name under the repository's root, and what scripts/pack.mjs (run by install.test.ts) copies.
    const read = new Set(['LICENSE']);
    for (const entry of readdirSync(join(repoRoot, 'test'), { recursive: true, encoding: 'utf8' })) {
      if (!entry.endsWith('.ts') || entry.includes('node_modules')) continue;
      const text = readFileSync(join(repoRoot, 'test', entry), 'utf8');
      for (const [, first] of text.matchAll(/join\(repoRoot, '([^']+)'/g))
        if (first !== undefined) read.add(first);
    }
    // Workspaces reach the hash through the task's dependencies; node_modules through the lockfile.
    const elsewhere = ['apps', 'packages', 'test', 'node_modules'];
    const uncovered = [...read]
      .filter((path) => !elsewhere.includes(path))
      .filter((path) => !inputs.some((input) => input === `../${path}` || input.startsWith(`../${path}/`)));
    expect(uncovered).toEqual([]);
  });
});
