// Each command's module (and what it needs: NATS, the coordinator, model SDKs) loads only when it runs, so
// `troupe --help` and `troupe status` start in milliseconds. This file sits beside commands/: scripts/buildCli.mjs
// keeps an `import('./commands/<name>.ts')` out of main's bundle by that path, and loads the command's own bundle.
export const commands = {
  approvals: () => import('./commands/approvals.ts'),
  control: () => import('./commands/control.ts'),
  demo: () => import('./commands/demo.ts'),
  evalDataset: () => import('./commands/evalDataset.ts'),
  family: () => import('./commands/family.ts'),
  files: () => import('./commands/files.ts'),
  init: () => import('./commands/init.ts'),
  logs: () => import('./commands/logs.ts'),
  mcp: () => import('./commands/mcp.ts'),
  natsConfig: () => import('./commands/natsConfig.ts'),
  gateway: () => import('./commands/gateway.ts'),
  graph: () => import('./commands/graph.ts'),
  replay: () => import('./commands/replay.ts'),
  run: () => import('./commands/run.ts'),
  runs: () => import('./commands/runs.ts'),
  steer: () => import('./commands/steer.ts'),
  submit: () => import('./commands/submit.ts'),
  tail: () => import('./commands/tail.ts'),
  trace: () => import('./commands/trace.ts'),
  up: () => import('./commands/up.ts'),
  validate: () => import('./commands/validate.ts'),
  versions: () => import('./commands/versions.ts'),
  worker: () => import('./commands/worker.ts'),
};
