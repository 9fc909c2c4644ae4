import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Environment } from '@marcbachmann/cel-js';
import { describe, expect, it, vi } from 'vitest';
import { builtinTools } from '../src/config/builtinTools.ts';
import { ConfigError } from '../src/config/configError.ts';
import { loadPipeline, parsePipeline } from '../src/config/loadPipeline.ts';

const toolNames = builtinTools().names();
/** Types one condition of the big pipeline below declares at most: those it reads, a few a condition. */
const PER_CONDITION = 20;
const FILE = 'pipeline.yaml';
const examples = fileURLToPath(new URL('../../../examples/', import.meta.url));

/**
 * A pipeline whose planner declares a closed output schema, whose notes agent declares an open one, whose writer
 * declares none, and whose input is typed; `fix` is the step whose `when` each test writes.
 */
const TYPED = `version: 1
name: typed
models:
  scripted: { provider: scripted, script: ./typed.script.yaml }
defaults: { model: scripted }
input:
  type: object
  properties:
    notify: { type: boolean }
    limit: { type: integer }
agents:
  planner:
    instructions: Plan.
    output:
      type: object
      additionalProperties: false
      required: [summary, risky]
      properties:
        summary: { type: string }
        risky: { type: boolean }
        count: { type: integer }
        tags: { type: array, items: { type: string } }
        owner:
          type: object
          additionalProperties: false
          properties: { name: { type: string }, active: { type: boolean } }
        status: { type: string, enum: [open, done] }
  notes:
    instructions: Take notes.
    output: { type: object, properties: { text: { type: string } } }
  writer: { instructions: Write. }
  fixer: { instructions: Fix. }
flow:
  - { id: plan, kind: agent, agent: planner }
  - { id: take-notes, kind: agent, agent: notes }
  - { id: write, kind: agent, agent: writer }
  - id: fix
    kind: agent
    agent: fixer
    when: WHEN
`;

/** TYPED with the condition `when` (as a YAML string, so any CEL fits). */
const withWhen = (when: string) => TYPED.replace('WHEN', JSON.stringify(when));

function refusal(text: string): ConfigError {
  try {
    parsePipeline(text, FILE, { toolNames });
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  return expect.fail('the pipeline was accepted');
}

/** The one issue at `flow[3].when`, which must be on the `when:` line and printed as `file:line:col path: message`. */
function whenIssue(when: string): string {
  const text = withWhen(when);
  const error = refusal(text);
  const issue = error.issues.find((i) => i.path === 'flow[3].when');
  expect(issue, JSON.stringify(error.issues)).toBeDefined();
  const line = text.split('\n').findIndex((l) => l.includes('    when: ')) + 1;
  expect(issue?.line).toBe(line);
  expect(error.message).toContain(`${FILE}:${line}:${issue?.column} flow[3].when: ${issue?.message}`);
  return issue?.message ?? '';
}

const loads = (text: string) => parsePipeline(text, FILE, { toolNames });

describe('a condition is type-checked at load against the JSON Schemas the pipeline declares', () => {
  it('refuses a when that gives a declared string, number, list or object, saying what it is and how to compare it', () => {
    expect(whenIssue('steps.plan.output.summary')).toBe(
      'must give a bool, but steps.plan.output.summary is a string (the output schema of step plan says so); compare it: steps.plan.output.summary != ""',
    );
    expect(whenIssue('steps.plan.output.count')).toContain(
      'steps.plan.output.count is a number (the output schema of step plan says so); compare it: steps.plan.output.count > 0',
    );
    expect(whenIssue('steps.plan.output.tags')).toContain(
      'is a list (the output schema of step plan says so); compare it: size(steps.plan.output.tags) > 0',
    );
    expect(whenIssue('steps.plan.output.owner')).toContain(
      'is an object (the output schema of step plan says so); compare it: has(steps.plan.output.owner.name)',
    );
    expect(whenIssue('steps["take-notes"].output.text')).toContain(
      'steps["take-notes"].output.text is a string (the output schema of step take-notes says so)',
    );
    expect(whenIssue('task.goal')).toBe(
      'must give a bool, but task.goal is a string; compare it: task.goal != ""',
    );
    expect(whenIssue('input.limit')).toContain(
      "input.limit is a number (the pipeline's input schema says so)",
    );
  });

  it('refuses a string where an operator wants a bool: !, &&, || and a ternary', () => {
    const notBool =
      'steps.plan.output.summary is a string, not a bool (the output schema of step plan says so); compare it: steps.plan.output.summary != ""';
    expect(whenIssue('!steps.plan.output.summary')).toBe(notBool);
    expect(whenIssue('steps.plan.output.risky && steps.plan.output.summary')).toBe(notBool);
    expect(whenIssue('steps.plan.output.summary || task.round > 1')).toBe(notBool);
    expect(whenIssue('steps.plan.output.summary ? true : false')).toBe(notBool);
    expect(whenIssue('steps.plan.output.tags.exists(t, t)')).toBe(
      't is a string, not a bool; compare it: t != ""',
    );
  });

  it('refuses a key a closed schema does not declare, suggesting the key meant', () => {
    expect(whenIssue('steps.plan.output.sumary == "x"')).toBe(
      'reads steps.plan.output.sumary, but the output schema of step plan declares no "sumary" in steps.plan.output (only summary, risky, count, tags, owner, status; additionalProperties: false) (did you mean "summary"?)',
    );
    expect(whenIssue('steps.plan.output.owner.nmae == "ann"')).toContain(
      'declares no "nmae" in steps.plan.output.owner (only name, active; additionalProperties: false) (did you mean "name"?)',
    );
    expect(whenIssue('steps["plan"].output["summry"] == "x"')).toContain('(did you mean "summary"?)');
    expect(whenIssue('task.rounds > 1')).toBe(
      'reads task.rounds, but task has no "rounds" (only id, goal, pipeline, metadata, round) (did you mean "round"?)',
    );
    expect(whenIssue('steps.plan.outptu == "x"')).toContain(
      'steps.plan has no "outptu" (only output, error)',
    );
  });

  it("refuses a string compared with a value its schema's enum does not list", () => {
    expect(whenIssue('steps.plan.output.status == "dnoe"')).toBe(
      'steps.plan.output.status is one of "open", "done" (the output schema of step plan says so), never "dnoe" (did you mean "done"?)',
    );
    expect(whenIssue('"closed" != steps.plan.output.status')).toContain('never "closed"');
    expect(whenIssue('steps.plan.output.status in ["open", "closed"]')).toContain('never "closed"');
  });

  it('refuses a declared string, bool or list compared with null, saying how to test that the key is there', () => {
    expect(whenIssue('steps.plan.output.summary != null')).toBe(
      'steps.plan.output.summary is a string, never null (the output schema of step plan says so); to test that it is there: has(steps.plan.output.summary)',
    );
    expect(whenIssue('steps.plan.error == null')).toBe(
      'steps.plan.error is a string, never null; to test that it is absent: !has(steps.plan.error)',
    );
    expect(whenIssue('null != steps["plan"].output.owner.active')).toContain(
      'steps["plan"].output.owner.active is a bool, never null (the output schema of step plan says so); to test that it is there: steps["plan"].output.owner.?active.hasValue()',
    );
    expect(whenIssue('steps.plan.output["tags"] != null')).toContain(
      'is a list, never null (the output schema of step plan says so); to test that it is there: steps.plan.output[?"tags"].hasValue()',
    );
    // What the messages offer loads.
    for (const when of [
      'has(steps.plan.output.summary)',
      '!has(steps.plan.error)',
      'steps["plan"].output.owner.?active.hasValue()',
      'steps.plan.output[?"tags"].hasValue()',
    ]) {
      expect(() => loads(withWhen(when)), when).not.toThrow();
    }
  });

  it("refuses a macro over a declared object's keys, saying how to iterate them", () => {
    expect(whenIssue('steps.plan.output.owner.exists(k, k == "name")')).toBe(
      'steps.plan.output.owner is typed as an object, whose keys all, exists, map and filter do not iterate; iterate them as dyn(steps.plan.output.owner).exists(…), or test a key with has(…) or "key" in …',
    );
    expect(() => loads(withWhen('dyn(steps.plan.output.owner).exists(k, k == "name")'))).not.toThrow();
  });

  it('refuses what the evaluator would refuse, with a JSON number read as the double it is', () => {
    expect(whenIssue('steps.plan.output.count + 1 > 2')).toBe(
      'no such overload: double + int in steps.plan.output.count + 1 (a JSON number is a double: write 1.0, not 1, or convert with int(…))',
    );
    expect(whenIssue('steps.plan.output.summary == 1')).toContain('no such overload: string == int');
  });

  it('accepts comparisons, &&, ||, !, has(), in, size(), ternaries, string methods, macros and optionals', () => {
    for (const when of [
      'steps.plan.output.risky',
      '!steps.plan.output.risky',
      'steps.plan.output.summary != ""',
      'steps.plan.output.count == 2 && steps.plan.output.count > 1.5',
      'steps.plan.output.count >= 3 || steps.plan.output.risky',
      'int(steps.plan.output.count) + 1 > 2',
      'steps.plan.output.status == "done" || steps.plan.output.status in ["open"]',
      'has(steps.plan.output.count) && steps.plan.output.count < 10',
      'has(steps.plan) && "plan" in steps',
      '"urgent" in steps.plan.output.tags',
      'size(steps.plan.output.tags) > 0 && size(steps.plan.output) > 1',
      'steps.plan.output.summary in ["a", "b"]',
      'steps.plan.output.risky ? steps.plan.output.count > 1 : steps.plan.output.summary == "x"',
      'steps.plan.output.summary.startsWith("fix") || steps.plan.output.summary.matches("^b")',
      'steps.plan.output.summary.contains("x") && steps.plan.output.summary.size() < 200',
      'steps.plan.output.tags.exists(t, t == "urgent") && steps.plan.output.tags.all(t, t != "")',
      'steps.plan.output.?count.orValue(0) > 1',
      'steps.plan.output.owner.active && steps.plan.output.owner.name == "ann"',
      'steps.plan.output == null || steps.plan.error != ""',
      'task.round == 1 && task.metadata.team == "core" && task.goal != ""',
      'has(input.notify) && input.notify',
      'input.limit > 3',
    ]) {
      expect(() => loads(withWhen(when)), when).not.toThrow();
    }
  });

  it('leaves to run time what an open or absent schema does not say', () => {
    for (const when of [
      // An open schema types what it names and leaves any other key to the task.
      'steps["take-notes"].output.mood',
      'steps["take-notes"].output.extra.deep == 1',
      // No schema: the writer's output is whatever it wrote.
      'steps.write.output',
      'steps.write.output.anything',
      // The input schema is open too.
      'input.other',
    ]) {
      expect(() => loads(withWhen(when)), when).not.toThrow();
    }
    // Nothing declared at all: every read is dyn.
    const bare = withWhen('steps.plan.output.summary')
      .replace(/ {4}output:\n(?: {6}.*\n)+/, '')
      .replace(/input:\n(?: {2}.*\n)+/, '');
    for (const when of ['steps.plan.output.summary', 'input.exists(k, k == "a")', 'size(input) > 0']) {
      expect(() => loads(bare.replace(/when: .*/, `when: ${JSON.stringify(when)}`)), when).not.toThrow();
    }
  });

  it("types a foreach step's input.item from its items, and refuses items that are not a list", () => {
    const EACH = `version: 1
name: each
models:
  scripted: { provider: scripted, script: ./each.script.yaml }
defaults: { model: scripted }
agents:
  planner:
    instructions: Plan.
    output:
      type: object
      properties:
        parts:
          type: array
          items:
            type: object
            additionalProperties: false
            properties: { name: { type: string }, risky: { type: boolean } }
  builder: { instructions: Build. }
flow:
  - { id: plan, kind: agent, agent: planner }
  - id: build-each
    kind: foreach
    items: steps.plan.output.parts
    maxItems: 10
    do:
      - id: build
        kind: agent
        agent: builder
        when: input.item.risky
`;
    expect(() => loads(EACH)).not.toThrow();
    const issueOf = (text: string, path: string) =>
      refusal(text).issues.find((i) => i.path === path)?.message ?? '';
    expect(
      issueOf(EACH.replace('when: input.item.risky', 'when: input.item.name'), 'flow[1].do[0].when'),
    ).toBe(
      `must give a bool, but input.item.name is a string (its foreach step's items say so); compare it: input.item.name != ""`,
    );
    expect(
      issueOf(EACH.replace('when: input.item.risky', 'when: input.item.riksy'), 'flow[1].do[0].when'),
    ).toContain('(did you mean "risky"?)');
    expect(
      issueOf(EACH.replace('when: input.item.risky', 'when: input.index'), 'flow[1].do[0].when'),
    ).toContain('input.index is a number');
    // items that map the parts to their names make each item a string.
    const names = EACH.replace(
      'items: steps.plan.output.parts',
      'items: steps.plan.output.parts.map(p, p.name)',
    );
    expect(issueOf(names, 'flow[1].do[0].when')).toBe(
      "reads input.item.risky, but input.item is a string (its foreach step's items say so), which has no keys",
    );
    expect(() =>
      loads(names.replace('when: input.item.risky', 'when: input.item.startsWith("a")')),
    ).not.toThrow();
    expect(
      issueOf(
        EACH.replace('items: steps.plan.output.parts', 'items: steps.plan.output.parts[0]'),
        'flow[1].items',
      ),
    ).toBe('must give a list, but gives an object');
  });

  it("checks a route's on against the schema too", () => {
    const route = (on: string) =>
      withWhen('true').replace(
        '  - { id: write, kind: agent, agent: writer }\n',
        `  - { id: pick, kind: route, on: ${JSON.stringify(on)}, cases: { done: fix }, default: end }\n`,
      );
    const onIssue = (on: string) =>
      refusal(route(on)).issues.find((i) => i.path === 'flow[2].on')?.message ?? '';
    expect(() => loads(route('steps.plan.output.status'))).not.toThrow();
    expect(() => loads(route('steps.plan.output.risky ? "done" : "open"'))).not.toThrow();
    expect(onIssue('steps.plan.output.statsu')).toContain(
      'declares no "statsu" in steps.plan.output (only summary, risky, count, tags, owner, status; additionalProperties: false) (did you mean "status"?)',
    );
    expect(onIssue('steps.plan.output.count + 1')).toContain('no such overload: double + int');
  });
});

describe('every example pipeline still loads', () => {
  it('examples/*.yaml', async () => {
    const files = (await readdir(examples)).filter((f) => f.endsWith('.yaml') && !f.endsWith('.script.yaml'));
    expect(files).toContain('fanout.yaml');
    for (const file of files) {
      // Keys and tokens are not needed to check a file; a remote agent's token must only be set.
      const text = await readFile(join(examples, file), 'utf8');
      expect(text, file).toMatch(/^version: 1$/m);
      await expect(
        loadPipeline(join(examples, file), { toolNames, requireKeys: false, env: { DEMO_TOKEN: 'token' } }),
        file,
      ).resolves.toBeDefined();
    }
  });
});

describe('a pipeline with many typed steps and conditions', () => {
  it('loads in seconds, not minutes, declaring only the schemas each condition reads', () => {
    // 60 agents, each with an output schema of 16 objects, and a when on every step after the first.
    const fields = Array.from(
      { length: 15 },
      (_, i) =>
        `        f${i}: { type: object, additionalProperties: false, properties: { a: { type: string }, b: { type: integer }, c: { type: array, items: { type: object, properties: { x: { type: boolean } } } } } }`,
    ).join('\n');
    const ids = Array.from({ length: 60 }, (_, i) => i);
    const agents = ids
      .map(
        (i) =>
          `  a${i}:\n    instructions: Work.\n    output:\n      type: object\n      additionalProperties: false\n      properties:\n        ok: { type: boolean }\n${fields}\n`,
      )
      .join('');
    const flow = ids
      .map((i) =>
        i === 0
          ? '  - { id: s0, kind: agent, agent: a0 }\n'
          : `  - { id: s${i}, kind: agent, agent: a${i}, when: 'steps.s${i - 1}.output.ok && steps.s0.output.f3.b > 2 && steps.s0.output.f1.c.exists(c, c.x)' }\n`,
      )
      .join('');
    const text = `version: 1\nname: big\nmodels:\n  scripted: { provider: scripted, script: ./big.script.yaml }\ndefaults: { model: scripted }\nagents:\n${agents}flow:\n${flow}`;
    // Declaring every schema for every condition took 44 s here; declaring only what is selected, 0.4 s. Counted
    // rather than timed, so a busy machine cannot fail it: every schema would be some 1,000 types a condition.
    const declared = vi.spyOn(Environment.prototype, 'registerType');
    loads(text);
    const conditions = ids.length - 1;
    expect(declared.mock.calls.length / conditions).toBeLessThan(PER_CONDITION);
    declared.mockRestore();
    // The pruned declarations still type what is read.
    expect(() => loads(text.replace('steps.s0.output.f3.b > 2 &&', 'steps.s0.output.f3.a &&'))).toThrow(
      'steps.s0.output.f3.a is a string, not a bool',
    );
  }, 120_000);
});
