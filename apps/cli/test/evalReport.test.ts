import { Experiment } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import {
  experimentJunit,
  experimentMarkdown,
  experimentTable,
  renderExperiment,
} from '../src/format/evalReport.ts';
import { xmlEscape } from '../src/format/evalReportXml.ts';
import { caseResult, experimentOf, score } from './evalFixtures.ts';
import { elements, parseXml } from './xmlTree.ts';

const HOSTILE = 'said <b>"hi"</b> & left\u0001 | done';

const experiment = experimentOf('notes-baseline', [
  caseResult('release-1', [score('contains', 1), score('cel', 1)]),
  caseResult('release-2', [score('contains', 0, `missing "v2" in ${HOSTILE}`), score('cel', 1)], {
    output: HOSTILE,
  }),
  caseResult('a|b <case>', [], { error: 'the model key & the recording are missing' }),
]);

describe('experiment reports', () => {
  it('lays the cases out as a table: a row per case with its score and failing scorers, then the totals', () => {
    const lines = experimentTable(experiment);
    expect(lines[0]).toBe(
      'experiment notes-baseline: dataset notes@2, pipeline notes (examples/evals/notes.yaml, sha-notes-ba), mode replay, 2026-12-07T06:30:00.000Z',
    );
    expect(lines[1]).toMatch(/^CASE\s+STATUS\s+SCORE\s+FAILING\s+COST\s+DURATION$/);
    expect(lines[2]).toMatch(/^release-1\s+passed\s+1\.00\s+-\s+\$0\.0100\s+1\.2 s$/);
    expect(lines[3]).toMatch(/^release-2\s+failed\s+0\.50\s+contains\s+\$0\.0100\s+1\.2 s$/);
    expect(lines[4]).toMatch(
      /^a\|b <case>\s+error\s+0\.00\s+error: the model key & the recording are missing/,
    );
    expect(lines[5]).toBe(
      '3 cases: 1 passed, 1 failed, 1 errored, 0 skipped · mean score 0.50 · cost $0.0300 (judges $0.0040) · p50 1.2 s, p90 1.2 s · took 4.3 s',
    );
    expect(lines).toHaveLength(6);
  });

  it('says the spend against a budget and by how much it went over, a case judged by its task alone, and 1 case', () => {
    const unscored = experimentOf('budgeted', [
      caseResult('quiet', []),
      caseResult('broke', [], { status: 'failed', taskStatus: 'failed' }),
    ]);
    const over = { ...unscored, budget: { usd: 0.01, spentUsd: 0.02 } };
    const table = experimentTable(over);
    expect(table[2]).toMatch(/^quiet\s+passed\s+1\.00\s+no scores: judged by its task's end\s+\$0\.0100/);
    expect(table[3]).toMatch(/^broke\s+failed\s+0\.00\s+task failed \(no scores: judged by its task's end\)/);
    expect(table.at(-1)).toBe(
      'budget $0.0100: spent $0.0200, over budget by $0.0100 (cases already started)',
    );
    expect(experimentMarkdown(over)).toContain(
      'budget $0.0100: spent $0.0200, over budget by $0.0100 (cases already started)',
    );
    expect(experimentMarkdown(over)).toContain(
      "- **broke**: the task ended failed (no scores: judged by its task's end)",
    );
    const within = experimentTable({ ...unscored, budget: { usd: 1, spentUsd: 0.02 } });
    expect(within.at(-1)).toBe('budget $1.0000: spent $0.0200');
    // No budget given: no line of it; one case in the singular.
    const one = experimentTable(experimentOf('one', [caseResult('only', [score('contains', 1)])]));
    expect(one.at(-1)).toMatch(/^1 case: 1 passed/);
    const xml = parseXml(experimentJunit(over));
    const properties = elements(xml, 'property').map((p) => [p.attributes.name, p.attributes.value]);
    expect(properties).toContainEqual(['spentUsd', '0.020000']);
  });

  it('prints JSON that reads back as the experiment', () => {
    expect(Experiment.parse(JSON.parse(renderExperiment(experiment, 'json')))).toEqual(experiment);
  });

  it('writes well-formed JUnit XML: a testcase per case, a failure per failed scorer with its reason, an error per error', () => {
    const xml = experimentJunit(experiment);
    expect(xml.startsWith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites ')).toBe(true);
    const root = parseXml(xml);
    expect(root.name).toBe('testsuites');
    expect(root.attributes).toMatchObject({ tests: '3', failures: '1', errors: '1', time: '4.321' });
    const [suite] = elements(root, 'testsuite');
    expect(suite?.attributes).toMatchObject({
      name: 'notes-baseline',
      tests: '3',
      failures: '1',
      errors: '1',
    });
    const properties = Object.fromEntries(
      elements(root, 'property').map((p) => [p.attributes.name, p.attributes.value]),
    );
    expect(properties).toMatchObject({
      dataset: 'notes@2',
      mode: 'replay',
      'pipeline.hash': experiment.pipeline.hash,
    });
    const cases = elements(root, 'testcase');
    expect(cases.map((c) => c.attributes.name)).toEqual(['release-1', 'release-2', 'a|b <case>']);
    expect(cases[0]?.children).toEqual([expect.objectContaining({ name: 'system-out' })]);
    const failures = elements(cases[1] as never, 'failure');
    expect(failures).toHaveLength(1);
    expect(failures[0]?.attributes.type).toBe('contains');
    // What XML cannot carry (U+0001) is replaced; the rest comes back as it was.
    const hostile = HOSTILE.replace('\u0001', '\uFFFD');
    expect(failures[0]?.attributes.message).toBe(`contains: missing "v2" in ${hostile}`);
    expect(failures[0]?.text).toBe(`contains: 0.00 (threshold 1.00): missing "v2" in ${hostile}`);
    expect(elements(cases[1] as never, 'system-out')[0]?.text).toBe(`task eval-release-2\n${hostile}`);
    const errors = elements(cases[2] as never, 'error');
    expect(errors.map((e) => e.attributes.message)).toEqual(['the model key & the recording are missing']);
    expect(elements(cases[2] as never, 'failure')).toEqual([]);
  });

  it('escapes the five markup characters and drops what XML 1.0 cannot carry', () => {
    expect(xmlEscape(`<a href="x">'&'</a>\u0000\u001f\t`)).toBe(
      '&lt;a href=&quot;x&quot;&gt;&apos;&amp;&apos;&lt;/a&gt;\uFFFD\uFFFD\t',
    );
    // A report of a case whose every text is hostile still parses.
    expect(() => parseXml(experimentJunit(experimentOf('x"<&>', experiment.cases)))).not.toThrow();
  });

  it('writes Markdown: a summary, a table with a row per case and as many cells as its header, and the failures', () => {
    const lines = experimentMarkdown(experiment);
    expect(lines[0]).toBe('### Experiment `notes-baseline`');
    expect(lines).toContain(
      '**1 of 3 passed** (33%) · 1 failed · 1 errored · 0 skipped · mean score 0.50 · cost $0.0300 (judges $0.0040) · p50 1.2 s · p90 1.2 s',
    );
    const header = lines.indexOf('| Case | Status | Score | Failing | Cost | Duration |');
    expect(header).toBeGreaterThan(0);
    expect(lines[header + 1]).toBe('| --- | --- | ---: | --- | ---: | ---: |');
    const rows = lines.slice(header + 2, header + 5);
    // Each row has six cells: an escaped pipe does not split one.
    for (const row of rows) expect(row.split(/(?<!\\)\|/).length - 2).toBe(6);
    expect(rows[2]).toContain('a\\|b &lt;case&gt;');
    expect(lines[header + 5]).toBe('');
    expect(lines.slice(header + 6)).toEqual([
      '#### Failures',
      '',
      `- **release-2**: contains: 0.00 (threshold 1.00): missing "v2" in said &lt;b&gt;"hi"&lt;/b&gt; & left\u0001 \\| done`,
      '- **a\\|b &lt;case&gt;** (error): the model key & the recording are missing',
    ]);
  });
});
