import { stat } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import fastifyStatic from '@fastify/static';
import type { FastifyPluginAsync } from 'fastify';

/**
 * Serves the dashboard at `/`: static files built ahead (no build at run time), under a Content-Security-Policy
 * that lets the page talk to this gateway only. Without a build there, `/` says how to make one.
 */
export const dashboardRoute: FastifyPluginAsync<{ dir: string | false }> = async (app, { dir }) => {
  if (dir === false) return;
  const built = await stat(join(dir, 'index.html')).then(
    () => true,
    () => false,
  );
  if (!built) {
    app.get('/', { schema: { hide: true } }, async (_request, reply) =>
      reply
        .code(503)
        .type('text/plain')
        .send(
          `The dashboard is not built (no ${dir}/index.html): run npm run build in the Troupe checkout.\n`,
        ),
    );
    return;
  }
  await app.register(fastifyStatic, {
    root: dir,
    prefix: '/',
    index: 'index.html',
    setHeaders: (res) => {
      res.header(
        'content-security-policy',
        "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'",
      );
      res.header('x-content-type-options', 'nosniff');
    },
  });
};

/** The dashboard's built files, beside the gateway's package (wherever the gateway's code was bundled to). */
export function defaultDashboardDir(): string {
  return join(
    dirname(createRequire(import.meta.url).resolve('@troupe/gateway/package.json')),
    'dashboard',
    'dist',
  );
}
