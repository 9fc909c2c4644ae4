/**
 * Submit a task with @troupe/client, follow its events as they come, and print its result.
 *
 *   troupe up examples/demo.yaml          # in one terminal (or any running Troupe)
 *   npx tsx examples/client.ts demo "Write a short hello note in notes/hello.md"
 *
 * NATS_URL says where Troupe's NATS is (nats://127.0.0.1:4222 when unset).
 */
import { OperationError, TroupeClient } from '@troupe/client';

const [pipeline = 'demo', goal = 'Write a short hello note in notes/hello.md'] = process.argv.slice(2);
const troupe = await TroupeClient.connect({ servers: process.env.NATS_URL ?? 'nats://127.0.0.1:4222' });
try {
  const { taskId } = await troupe.submit(pipeline, { goal });
  console.log(`submitted ${taskId} to ${pipeline}`);
  for await (const { seq, event } of troupe.events(taskId)) {
    const agent = 'agent' in event.data ? ` ${event.data.agent}` : '';
    console.log(`#${seq} ${event.kind}${agent}`);
  }
  const result = await troupe.wait(taskId);
  console.log(
    result.status === 'completed'
      ? `completed: ${result.output}`
      : `${result.status}: ${result.failure?.message ?? ''}`,
  );
} catch (error) {
  // Every refusal has a stable code: not_found, invalid_request, too_large, no_coordinator, unavailable, …
  if (OperationError.is(error)) console.error(`${error.code}: ${error.message}`);
  else throw error;
  process.exitCode = 1;
} finally {
  await troupe.close();
}
