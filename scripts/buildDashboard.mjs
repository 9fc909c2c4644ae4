// Builds the gateway's dashboard with Vite: apps/gateway/dashboard (Preact and htm, TypeScript) into static files
// in apps/gateway/dashboard/dist, which the gateway serves at `/`. Nothing is built when the gateway runs. Runs on
// `npm ci` (prepare) and before the end-to-end tests.
import { join } from 'node:path';
import { build } from 'vite';

const root = join(import.meta.dirname, '..', 'apps', 'gateway', 'dashboard');
await build({
  root,
  base: './',
  logLevel: 'warn',
  build: {
    outDir: join(root, 'dist'),
    emptyOutDir: true,
    target: 'es2022',
    // One small page: no source maps shipped, assets named by content so they can be cached for ever.
    sourcemap: false,
    reportCompressedSize: false,
  },
});
