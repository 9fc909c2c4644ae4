import { describe, expect, it } from 'vitest';
import {
  AgentStepRequest,
  applyWorkspaceChanges,
  carriedManifest,
  MAX_WORKSPACE_FILES,
  noWorkspaceChanges,
  WorkspaceManifest,
  workspaceDiff,
  workspaceRef,
} from '../src/index.ts';

const file = (digit: string, bytes = 3) => ({ bytes, sha256: digit.repeat(64) });

describe('workspace manifests', () => {
  it('diffs a manifest against the one a step started from: written, changed and removed files', () => {
    const base = { 'a.txt': file('a'), 'src/b.ts': file('b'), 'gone.md': file('c') };
    const now = { 'a.txt': file('a'), 'src/b.ts': file('d'), 'new/e.txt': file('e', 9) };
    expect(workspaceDiff(base, now)).toEqual({
      files: { 'src/b.ts': file('d'), 'new/e.txt': file('e', 9) },
      removed: ['gone.md'],
    });
    expect(noWorkspaceChanges(workspaceDiff(now, now))).toBe(true);
    expect(workspaceDiff(undefined, now).files).toEqual(now);
  });

  it('applies changes in the order steps ended: the last writer of a path wins, a removal drops it', () => {
    const base = { 'a.txt': file('a'), 'b.txt': file('b') };
    const first = applyWorkspaceChanges(base, {
      files: { 'a.txt': file('1'), 'c.txt': file('c') },
      removed: [],
    });
    const second = applyWorkspaceChanges(first, { files: { 'a.txt': file('2') }, removed: ['b.txt'] });
    expect(second).toEqual({ 'a.txt': file('2'), 'c.txt': file('c') });
    expect(base).toEqual({ 'a.txt': file('a'), 'b.txt': file('b') });
    // Applying a step's diff to what it started from gives what it ended with.
    const now = { 'a.txt': file('9'), 'z/y.txt': file('y') };
    expect(applyWorkspaceChanges(base, workspaceDiff(base, now))).toEqual(now);
  });

  it('refuses a path that could leave the workspace, and more files than a message may carry', () => {
    for (const path of ['../etc/passwd', '/etc/passwd', 'a/../../b', 'a//b', './a', 'a/', 'a\0b', '']) {
      expect(WorkspaceManifest.safeParse({ [path]: file('a') }).success, path).toBe(false);
    }
    expect(WorkspaceManifest.safeParse({ 'src/.hidden/x..y': file('a') }).success).toBe(true);
    const many = Object.fromEntries(
      Array.from({ length: MAX_WORKSPACE_FILES + 1 }, (_, i) => [`f${i}`, file('a')]),
    );
    expect(WorkspaceManifest.safeParse(many).success).toBe(false);
  });

  it('names a file by task and content in the pipeline bucket, and rides in a step request', () => {
    expect(workspaceRef('demo', 'task-1', file('a', 5))).toEqual({
      bucket: 'troupe-values-demo',
      name: `ws.task-1.${'a'.repeat(64)}`,
      bytes: 5,
      sha256: 'a'.repeat(64),
    });
    const request = {
      stepId: 't.s.1',
      taskId: 't',
      pipeline: 'demo',
      agent: 'coder',
      step: 's',
      round: 1,
      goal: 'g',
      context: [],
      expect: 'text',
      workspace: { 'out/report.md': file('f') },
    };
    expect(AgentStepRequest.parse(request).workspace).toEqual({ 'out/report.md': file('f') });
    expect(AgentStepRequest.safeParse({ ...request, workspace: { '../x': file('f') } }).success).toBe(false);
  });

  it("names a restart's carried file by the task that stored it, not copied; a chain keeps the first task's", () => {
    const carried = carriedManifest(
      { 'a.md': file('a'), 'b.md': { ...file('b'), task: 'task-0' } },
      'task-1',
    );
    expect(carried).toEqual({
      'a.md': { ...file('a'), task: 'task-1' },
      'b.md': { ...file('b'), task: 'task-0' },
    });
    expect(WorkspaceManifest.parse(carried)).toEqual(carried);
    expect(workspaceRef('demo', 'task-2', carried['a.md'] ?? file('x'))).toEqual({
      bucket: 'troupe-values-demo',
      name: `ws.task-1.${'a'.repeat(64)}`,
      bytes: 3,
      sha256: 'a'.repeat(64),
    });
    // A later step that leaves the file as it was hands nothing on for it: it stays the origin's object.
    expect(workspaceDiff(carried, { 'a.md': file('a'), 'b.md': file('c') })).toEqual({
      files: { 'b.md': file('c') },
      removed: [],
    });
  });
});
