import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: [
            'packages/*/test/**/*.test.ts',
            'apps/*/test/**/*.test.ts',
            // The dashboard is a project of its own (browser code, built by Vite): its unit tests sit beside it.
            'apps/gateway/dashboard/test/**/*.test.ts',
          ],
        },
      },
      {
        extends: true,
        test: {
          name: 'e2e',
          include: ['test/**/*.test.ts'],
          globalSetup: ['test/support/buildCli.ts'],
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
    ],
    // Two files at a time on CI's two cores: most e2e time is waiting on nats-server and troupe processes, so one
    // worker (vitest's default there: cores less one) left a core idle; with two busy loops beside it the suite took
    // 887 s of vitest time with two workers against 1,744 s with one.
    maxWorkers: 2,
    // What Troupe's own code builds (events, KV records) is checked against its schemas as it is built, strictly: a
    // builder that drifts from its schema fails its tests (in production the types check it; docs/protocol.md).
    env: { TROUPE_STRICT: '1' },
    testTimeout: 20_000,
    hookTimeout: 30_000,
  },
});
