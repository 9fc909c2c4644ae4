/**
 * Call a Troupe pipeline as an A2A agent with the official A2A client (@a2a-js/sdk): stream a task's updates, and
 * print its output.
 *
 *   troupe up examples/demo.yaml --gateway 8080 --gateway-tokens troupe-tokens.yaml     # in one terminal
 *   TROUPE_TOKEN=trp_… npx tsx examples/a2aClient.ts http://127.0.0.1:8080/a2a/demo/ "Write a short hello note"
 *
 * The URL is the folder of the pipeline's agent card (…/a2a/<pipeline>/.well-known/agent-card.json).
 */
import { randomUUID } from 'node:crypto';
import { Role, taskStateToJSON } from '@a2a-js/sdk';
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
} from '@a2a-js/sdk/client';

const [agentUrl = 'http://127.0.0.1:8080/a2a/demo/', goal = 'Write a short hello note'] =
  process.argv.slice(2);

// Every request, the card's too, carries the gateway token.
const fetchImpl: typeof fetch = (url, init = {}) => {
  const headers = new Headers(init.headers);
  headers.set('authorization', `Bearer ${process.env.TROUPE_TOKEN ?? ''}`);
  return fetch(url, { ...init, headers });
};
const factory = new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
    transports: [new JsonRpcTransportFactory({ fetchImpl }), new RestTransportFactory({ fetchImpl })],
    cardResolver: new DefaultAgentCardResolver({ fetchImpl }),
  }),
);
const client = await factory.createFromUrl(agentUrl);

// The SDK's own form: oneofs are { $case, value }, enums are numbers (taskStateToJSON names them).
const message = {
  messageId: randomUUID(),
  contextId: '',
  taskId: '',
  role: Role.ROLE_USER,
  parts: [
    { content: { $case: 'text' as const, value: goal }, metadata: undefined, filename: '', mediaType: '' },
  ],
  metadata: undefined,
  extensions: [],
  referenceTaskIds: [],
};
const request = { tenant: '', message, configuration: undefined, metadata: undefined };
for await (const { payload } of client.sendMessageStream(request)) {
  if (payload?.$case === 'task')
    console.log(`task ${payload.value.id} in context ${payload.value.contextId}`);
  if (payload?.$case === 'statusUpdate') {
    const { state, message: said } = payload.value.status ?? {};
    const words = said?.parts[0]?.content;
    console.log(`${taskStateToJSON(state ?? 0)}: ${words?.$case === 'text' ? words.value : ''}`);
  }
  if (payload?.$case === 'artifactUpdate') {
    const output = payload.value.artifact?.parts[0]?.content;
    console.log(output?.$case === 'text' ? output.value : JSON.stringify(output?.value));
  }
}
