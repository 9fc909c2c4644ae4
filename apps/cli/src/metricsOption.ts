import { errorMessage } from '@troupe/protocol';
import { type Logger, type MetricsServer, parseListen, serveMetrics, TroupeMetrics } from '@troupe/runtime';
import { CliError } from './server.ts';

/** `--metrics [host:]port`: the metrics of this process, served for Prometheus until it stops. */
export interface ServedMetrics {
  metrics: TroupeMetrics;
  server: MetricsServer;
}

/** Starts the metrics server `--metrics` asks for (nothing without it); a port that cannot be had stops the command. */
export async function startMetrics(
  listen: string | undefined,
  logger: Logger,
): Promise<ServedMetrics | undefined> {
  if (listen === undefined) return undefined;
  const where = parseListen(listen);
  if (!where)
    throw new CliError(
      `--metrics must be a port or host:port, such as 9464 or 0.0.0.0:9464 (got "${listen}")`,
      2,
    );
  const metrics = new TroupeMetrics();
  try {
    const server = await serveMetrics(metrics, where, logger);
    logger.info({ url: server.url }, `serving metrics on ${server.url}`);
    return { metrics, server };
  } catch (error) {
    throw new CliError(`cannot serve metrics on ${where.host}:${where.port}: ${errorMessage(error)}`);
  }
}
