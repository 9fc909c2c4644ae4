import { compareExperiments } from '@troupe/client';
import { EvalComparison } from '@troupe/protocol';
import { describe, expect, it } from 'vitest';
import {
  comparisonJunit,
  comparisonMarkdown,
  comparisonTable,
  renderComparison,
} from '../src/format/evalReportComparison.ts';
import { comparisonGate } from '../src/format/evalReportGate.ts';
import { caseResult, experimentOf, score } from './evalFixtures.ts';
import { elements, parseXml } from './xmlTree.ts';

const baseline = experimentOf('baseline', [
  caseResult('kept', [score('contains', 1)]),
  caseResult('lost', [score('contains', 1)]),
  caseResult('fixed', [score('contains', 0)]),
  caseResult('gone', [score('contains', 1)]),
]);
const candidate = experimentOf('candidate', [
  caseResult('kept', [score('contains', 1)], { costUsd: 0.02 }),
  caseResult('lost', [score('contains', 0, 'no "<v2>" & no tool call')], { costUsd: 0.02 }),
  caseResult('fixed', [score('contains', 1)], { costUsd: 0.02 }),
  caseResult('new', [score('contains', 1)], { costUsd: 0.02 }),
]);
const comparison = compareExperiments(baseline, candidate);

describe('the comparison gate', () => {
  it('fails on a pass lost and, when asked, on a cost rise beyond the allowed per cent', () => {
    expect(comparisonGate(comparison)).toEqual([
      {
        check: 'lost pass',
        caseId: 'lost',
        message: 'passed in A, failed in B: contains (no "<v2>" & no tool call)',
      },
    ]);
    expect(comparisonGate(comparison, { maxCostIncreasePct: 50 }).map((g) => g.message)).toContain(
      'the cost rose by 100.0% ($0.0400 → $0.0800), more than the +50% allowed',
    );
    expect(comparisonGate(comparison, { maxCostIncreasePct: 100 })).toHaveLength(1);
    expect(comparisonGate(compareExperiments(baseline, baseline), { maxCostIncreasePct: 0 })).toEqual([]);
  });

  it('fails when the mean score falls beyond its interval, and not when a passing case only scores lower', () => {
    const many = (value: number) =>
      experimentOf(
        `v${value}`,
        Array.from({ length: 12 }, (_, i) => caseResult(`c${i}`, [score('judge', value - (i % 3) * 0.05)])),
      );
    const fell = comparisonGate(compareExperiments(many(0.9), many(0.6)));
    expect(fell.map((g) => g.check)).toEqual(['mean score']);
    expect(fell[0]?.message).toMatch(/^the mean score fell by 0\.30, 95% interval \[−0\.30, −0\.30\]$/);
    expect(comparisonGate(compareExperiments(many(0.6), many(0.9)))).toEqual([]);
  });

  it('passes the same scores summed in another order, as the verdict does (no fall from rounding)', () => {
    const scored = (id: string, values: number[]) =>
      experimentOf(id, [
        caseResult(
          'x',
          values.map((v, i) => score(`s${i}`, v)),
        ),
        caseResult(
          'y',
          values.map((v, i) => score(`s${i}`, v)),
        ),
      ]);
    const rounded = compareExperiments(scored('a', [0.1, 0.2, 0.3]), scored('b', [0.3, 0.2, 0.1]));
    // The deltas are about -5.6e-17, not 0.
    expect(rounded.summary.meanScore.interval?.high).toBeLessThan(0);
    expect(rounded.summary.verdict).toBe('no clear difference');
    expect(comparisonGate(rounded)).toEqual([]);
  });
});

describe('comparison reports', () => {
  it('lays the cases out as a table, changes first, then the summary and the gate', () => {
    const lines = comparisonTable(comparison, comparisonGate(comparison));
    expect(lines[0]).toMatch(
      /^A baseline: notes@2, notes \(examples\/evals\/notes\.yaml, sha-baseline\), mode replay$/,
    );
    expect(lines[2]).toMatch(/^CASE\s+CHANGE\s+A\s+B\s+ΔSCORE\s+ΔCOST\s+ΔDURATION\s+WHY$/);
    expect(lines.slice(3, 8).map((l) => l.split(/\s+/).slice(0, 2))).toEqual([
      ['lost', 'regressed'],
      ['fixed', 'improved'],
      ['new', 'added'],
      ['gone', 'removed'],
      ['kept', 'unchanged'],
    ]);
    expect(lines[3]).toMatch(
      /^lost\s+regressed\s+passed 1\.00\s+failed 0\.00\s+−1\.00\s+\+\$0\.0100\s+\+0\.0 s\s+passed in A/,
    );
    expect(lines.slice(8)).toEqual([
      'verdict: worse — 1 case that passed in A fails in B.',
      'cases: 3 in both (1 regressed, 1 improved, 1 unchanged), 1 added, 1 removed',
      'passed: 3/4 (75%) → 3/4 (75%)',
      expect.stringMatching(
        /^mean score: 0\.67 → 0\.67 \(\+0\.00, 95% interval \[−1\.00, \+1\.00\] by a paired bootstrap over 3 cases, 10000 resamples, seed 34\)$/,
      ),
      'cost: $0.0400 → $0.0800 (+$0.0400, +100%); judges $0.0040 → $0.0040',
      'p50 latency: 1.2 s → 1.2 s (+0.0 s)',
      'gate: FAILED — lost: passed in A, failed in B: contains (no "<v2>" & no tool call)',
    ]);
  });

  it('prints JSON that reads back as the comparison, with the gate beside it', () => {
    const json = JSON.parse(renderComparison(comparison, comparisonGate(comparison), 'json'));
    expect(EvalComparison.parse(json)).toEqual(comparison);
    expect(json.gate).toMatchObject({ passed: false, failures: [{ check: 'lost pass', caseId: 'lost' }] });
  });

  it('writes JUnit XML where each regression and each failing summary check is a failure', () => {
    const gate = comparisonGate(comparison, { maxCostIncreasePct: 10 });
    const root = parseXml(comparisonJunit(comparison, gate));
    const [suite] = elements(root, 'testsuite');
    expect(suite?.attributes).toMatchObject({
      name: 'baseline → candidate',
      tests: '6',
      failures: '2',
      skipped: '1',
    });
    const cases = elements(root, 'testcase');
    expect(cases.map((c) => c.attributes.name)).toEqual(['kept', 'lost', 'fixed', 'gone', 'new', '(cost)']);
    const failed = cases.filter((c) => elements(c, 'failure').length > 0).map((c) => c.attributes.name);
    expect(failed).toEqual(['lost', '(cost)']);
    expect(elements(cases[1] as never, 'failure')[0]?.attributes).toEqual({
      message: 'passed in A, failed in B: contains (no "<v2>" & no tool call)',
      type: 'regressed',
    });
    expect(elements(cases[3] as never, 'skipped')).toHaveLength(1);
    const properties = Object.fromEntries(
      elements(root, 'property').map((p) => [p.attributes.name, p.attributes.value]),
    );
    expect(properties.verdict).toBe('worse');
  });

  it('writes Markdown for a pull request: the verdict, a summary table, the regressions and every case folded', () => {
    const lines = comparisonMarkdown(comparison, comparisonGate(comparison));
    expect(lines[0]).toBe('### Eval: 🔴 worse — `candidate` against `baseline`');
    expect(lines).toContain(
      '**Gate: failed.** lost: passed in A, failed in B: contains (no "&lt;v2&gt;" & no tool call)',
    );
    const summary = lines.indexOf('|  | A | B | Δ |');
    expect(lines.slice(summary + 1, summary + 4)).toEqual([
      '| --- | ---: | ---: | ---: |',
      '| Passed | 3/4 (75%) | 3/4 (75%) | +0 |',
      expect.stringMatching(/^\| Mean score \| 0\.67 \| 0\.67 \| \+0\.00 \[−1\.00, \+1\.00\] \|$/),
    ]);
    const regressions = lines.indexOf('#### Regressions (1)');
    expect(lines.slice(regressions + 2, regressions + 5)).toEqual([
      '| Case | A | B | Δ score | Why |',
      '| --- | --- | --- | ---: | --- |',
      '| lost | passed 1.00 | failed 0.00 | −1.00 | passed in A, failed in B: contains (no "&lt;v2&gt;" & no tool call) |',
    ]);
    expect(lines).toContain('#### Improvements (1)');
    const details = lines.indexOf('<details><summary>All 5 cases</summary>');
    const table = lines.slice(details + 2, lines.indexOf('</details>') - 1);
    expect(table).toHaveLength(2 + 5);
    for (const row of table) expect(row.split('|').length - 2).toBe(7);
    expect(lines.at(-1)).toContain('seed 34');
  });
});
