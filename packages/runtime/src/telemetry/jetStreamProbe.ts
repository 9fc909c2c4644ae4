import type { JetStreamBus } from '../transport/bus.ts';
import { jetstreamManagerOf } from '../transport/jetstreamSetup.ts';
import { natsConnectionOf } from '../transport/natsBus.ts';

/** The bus's connection: up, being made again after it was lost, or closed for good. */
export type ConnectionState = 'connected' | 'reconnecting' | 'closed';

/** What a health check found of NATS, as a health or readiness endpoint reports it. */
export interface JetStreamProbe {
  connection: ConnectionState;
  /** Why JetStream did not answer; absent when it did (or was not asked, the connection being closed). */
  jetstreamError?: Error;
  /** The first stream asked about that JetStream does not have (or could not say), with why. */
  missingStream?: { name: string; error: Error };
}

/**
 * Asks NATS how it stands for a health check: the connection's state, whether JetStream answers, and whether each of
 * `streams` exists (in order, stopping at the first missing). A closed connection is not probed further.
 */
export async function probeJetStream(
  bus: JetStreamBus,
  streams: readonly string[] = [],
): Promise<JetStreamProbe> {
  const connection = natsConnectionOf(bus);
  if (connection.isClosed()) return { connection: 'closed' };
  const state = (connection as { isReconnecting?: () => boolean }).isReconnecting?.()
    ? 'reconnecting'
    : 'connected';
  let jsm: Awaited<ReturnType<typeof jetstreamManagerOf>>;
  try {
    jsm = await jetstreamManagerOf(bus);
    await jsm.getAccountInfo();
  } catch (error) {
    return { connection: state, jetstreamError: error as Error };
  }
  for (const name of streams) {
    try {
      await jsm.streams.info(name);
    } catch (error) {
      return { connection: state, missingStream: { name, error: error as Error } };
    }
  }
  return { connection: state };
}
