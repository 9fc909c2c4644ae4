import { compareExperiments, EvalStore } from '@troupe/client';
import { ErrorBody, EvalComparison, TaskTrace } from '@troupe/protocol';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { addRunsToDataset } from '../datasetRuns.ts';
import { AddedRuns, AddRunsBody } from '../datasetRunsApi.ts';
import { GatewayEvals, onlineScores } from '../evals.ts';
import {
  CaseParams,
  CompareQuery,
  DatasetBody,
  DatasetList,
  DatasetParams,
  DatasetQuery,
  ExperimentBody,
  ExperimentList,
  ExperimentParams,
  ScoresQuery,
  TaskScoreList,
} from '../evalsApi.ts';
import type { GatewayServices } from '../gatewayServices.ts';
import { principalOf } from '../requestAuth.ts';

const Comparison = EvalComparison.meta({ id: 'EvalComparison' });
const refused = { 401: ErrorBody, 403: ErrorBody };

/**
 * Evals (docs/evals.md), read from the `troupe-evals` object store: datasets, experiments, a comparison of two, and
 * a case's timeline. Reading needs the read scope (docs/gateway.md says who sees what).
 */
export const evalRoutes: FastifyPluginAsyncZod<GatewayServices> = async (app, { bus, actions }) => {
  let store: EvalStore | undefined;
  const evals = new GatewayEvals({
    bus,
    store: () => (store ??= new EvalStore(bus)),
    compare: compareExperiments,
    actions,
  });
  const writer = () => (store ??= new EvalStore(bus));

  app.get(
    '/v1/evals/datasets',
    {
      schema: {
        summary: 'Every version of every dataset, newest first, without their cases',
        response: { 200: DatasetList, ...refused },
      },
    },
    async (request) => ({ datasets: await evals.datasets(principalOf(request)) }),
  );

  app.get(
    '/v1/evals/datasets/:name',
    {
      schema: {
        summary: 'A dataset with its cases and scorers: its newest version, or `?version=`',
        params: DatasetParams,
        querystring: DatasetQuery,
        response: { 200: DatasetBody, 400: ErrorBody, ...refused, 404: ErrorBody },
      },
    },
    async (request) => evals.dataset(principalOf(request), request.params.name, request.query.version),
  );

  app.post(
    '/v1/evals/datasets/:name/cases',
    {
      schema: {
        summary:
          "Adds recorded runs as cases: the dataset's next version, made from the tasks named or chosen",
        description:
          'As `troupe eval dataset add`: `taskIds` (each task whatever its status or age), or a `pipeline` with ' +
          '`status`, `since` and `limit` (its ended tasks, newest first). Each case keeps its run whole (events, ' +
          "journal records, stored values) to replay; the previous version's cases and scorers are kept, a case of " +
          'the same id replaced. Answers the new version, and each task skipped with why; stores nothing (400, ' +
          'saying why) when no case could be made. Needs the submit scope and a token without a pipeline list, as ' +
          'reading datasets does (a dataset may hold runs of any pipeline): a limited token is refused (403).',
        params: DatasetParams,
        body: AddRunsBody,
        response: { 201: AddedRuns, 400: ErrorBody, ...refused },
      },
    },
    async (request, reply) => {
      const added = await addRunsToDataset(
        bus,
        writer(),
        principalOf(request),
        request.params.name,
        request.body,
      );
      return reply.code(201).send(added);
    },
  );

  app.get(
    '/v1/evals/experiments',
    {
      schema: {
        summary: 'The experiments stored, newest first, without their cases',
        response: { 200: ExperimentList, ...refused },
      },
    },
    async (request) => ({ experiments: await evals.experiments(principalOf(request)) }),
  );

  app.get(
    '/v1/evals/experiments/:id',
    {
      schema: {
        summary:
          'An experiment whole: each case with its scores, usage, duration and (for a replay) its events',
        params: ExperimentParams,
        response: { 200: ExperimentBody, ...refused, 404: ErrorBody },
      },
    },
    async (request) => evals.experiment(principalOf(request), request.params.id),
  );

  app.get(
    '/v1/evals/experiments/:id/cases/:caseId/trace',
    {
      schema: {
        summary:
          "A case's timeline: the trace of a replay's or model run's stored events, or of a live case's task",
        params: CaseParams,
        response: { 200: TaskTrace, ...refused, 404: ErrorBody },
      },
    },
    async (request) => evals.caseTrace(principalOf(request), request.params.id, request.params.caseId),
  );

  app.get(
    '/v1/evals/compare',
    {
      schema: {
        summary: 'Experiment `b` compared with `a`: per case, and a summary with a verdict',
        description:
          'As `troupe eval compare a b --format json`: each case regressed, improved, unchanged, added or removed, ' +
          'with score, cost and duration deltas and each scorer in A and B; the mean score delta with its 95% ' +
          'interval and a verdict (`better`, `worse`, `no clear difference`), the cost delta and the p50 latency.',
        querystring: CompareQuery,
        response: { 200: Comparison, 400: ErrorBody, ...refused, 404: ErrorBody },
      },
    },
    async (request) => evals.compare(principalOf(request), request.query.a, request.query.b),
  );

  app.get(
    '/v1/evals/scores',
    {
      schema: {
        summary: "Tasks' online scores (`eval.scored`) since a time, newest first: what the task list shows",
        querystring: ScoresQuery,
        response: { 200: TaskScoreList, 400: ErrorBody, ...refused },
      },
    },
    async (request) => ({
      scores: await onlineScores(bus, principalOf(request), {
        since: new Date(request.query.since),
        pipeline: request.query.pipeline,
      }),
    }),
  );
};
