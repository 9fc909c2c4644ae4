import { KvStore, type NatsBus, TransportError, type TroupeBucket } from '@troupe/runtime';
import type { z } from 'zod';
import { CLI_WAIT, CliError } from './server.ts';

/** A KV bucket; a server no coordinator has used has none, which is said plainly, as is any other failure. */
export async function openOrExplain<S extends z.ZodType>(
  bus: NatsBus,
  bucket: TroupeBucket,
  schema: S,
): Promise<KvStore<S>> {
  try {
    return await KvStore.open(bus, bucket, schema, CLI_WAIT);
  } catch (error) {
    throw new CliError(`no Troupe coordinator has run on this server yet (${(error as Error).message})`);
  }
}

/** A KV bucket, or undefined when no coordinator has made it on this server; other failures are thrown as they are. */
export async function openIfAny<S extends z.ZodType>(
  bus: NatsBus,
  bucket: TroupeBucket,
  schema: S,
): Promise<KvStore<S> | undefined> {
  try {
    return await KvStore.open(bus, bucket, schema, CLI_WAIT);
  } catch (error) {
    if (TransportError.is(error, 'bucket_missing')) return undefined;
    throw error;
  }
}
