import {
  CancelTaskRequest,
  DeleteTaskPushNotificationConfigRequest,
  GetTaskPushNotificationConfigRequest,
  GetTaskRequest,
  ListTaskPushNotificationConfigsRequest,
  ListTasksRequest,
  SendMessageRequest,
  SubscribeToTaskRequest,
  TaskPushNotificationConfig,
} from '@a2a-js/sdk';
import { A2A_ERROR_CODE, RequestMalformedError } from '@a2a-js/sdk/errors';
import { exceedsDepth, MAX_MESSAGE_DEPTH } from '@troupe/protocol';
import type { FastifyRequest } from 'fastify';
import { decode } from './restBinding.ts';

/** What an A2A request's body and headers say, read as the bindings and the spec say, refused with A2A's errors. */

/**
 * A JSON-RPC envelope that is not JSON (-32700) or not a request (-32600): malformed, with the JSON-RPC code its
 * answer carries.
 */
export class RpcEnvelopeError extends RequestMalformedError {
  readonly rpcCode: number;

  constructor(message: string, rpcCode: number) {
    super(message);
    this.rpcCode = rpcCode;
  }
}

/** A JSON-RPC request's envelope, checked as JSON-RPC 2.0 says (-32700 not JSON, -32600 not a request). */
export function parseRpc(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = parseJson(text);
  } catch (error) {
    throw new RpcEnvelopeError((error as Error).message, A2A_ERROR_CODE.PARSE_ERROR);
  }
  const invalid = (why: string) =>
    new RpcEnvelopeError(`not a JSON-RPC 2.0 request: ${why}`, A2A_ERROR_CODE.INVALID_REQUEST);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw invalid('not an object');
  const rpc = value as Record<string, unknown>;
  if (rpc.jsonrpc !== '2.0') throw invalid('jsonrpc is not "2.0"');
  if (typeof rpc.method !== 'string' || rpc.method === '') throw invalid('no method');
  const id = rpc.id;
  if (
    id !== undefined &&
    id !== null &&
    typeof id !== 'string' &&
    !(typeof id === 'number' && Number.isInteger(id))
  ) {
    throw invalid('id is not a string, an integer or null');
  }
  return rpc;
}

/** The SDK's reader of each method's params, which its JSON-RPC transport runs outside our handler. */
const PARAMS_OF: Record<string, { fromJSON(object: unknown): unknown }> = {
  SendMessage: SendMessageRequest,
  SendStreamingMessage: SendMessageRequest,
  GetTask: GetTaskRequest,
  ListTasks: ListTasksRequest,
  CancelTask: CancelTaskRequest,
  SubscribeToTask: SubscribeToTaskRequest,
  CreateTaskPushNotificationConfig: TaskPushNotificationConfig,
  GetTaskPushNotificationConfig: GetTaskPushNotificationConfigRequest,
  ListTaskPushNotificationConfigs: ListTaskPushNotificationConfigsRequest,
  DeleteTaskPushNotificationConfig: DeleteTaskPushNotificationConfigRequest,
};

/** Reads a request's params as the SDK will, first: what it cannot read is InvalidParams, not an internal error. */
export function checkParams(rpc: Record<string, unknown>): void {
  const type = PARAMS_OF[rpc.method as string];
  const params = rpc.params;
  if (type && typeof params === 'object' && params !== null && !Array.isArray(params)) decode(type, params);
}

/** JSON as the gateway takes it: parsed without prototype keys, and refused past the depth every message is held to. */
export function parseJson(text: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text, (key, v: unknown) => (key === '__proto__' ? undefined : v));
  } catch (error) {
    throw new RequestMalformedError(`the body is not JSON: ${(error as Error).message}`);
  }
  if (exceedsDepth(value, MAX_MESSAGE_DEPTH)) {
    throw new RequestMalformedError(
      `the body nests objects and arrays more than ${MAX_MESSAGE_DEPTH} levels deep`,
    );
  }
  return value;
}

/**
 * The version a request asks for: the `A2A-Version` header, else the query parameter; empty is read as 0.3. Only
 * `Major.Minor` counts: the spec says a patch number must not be considered, so `1.0.1` asks for 1.0.
 */
export function versionOf(request: FastifyRequest): string | undefined {
  const header = request.headers['a2a-version'];
  const fromHeader = Array.isArray(header) ? header[0] : header;
  const fromQuery = (request.query as Record<string, unknown> | undefined)?.['A2A-Version'];
  const asked = fromHeader?.trim() || (typeof fromQuery === 'string' ? fromQuery.trim() : '');
  return asked === '' ? undefined : asked.replace(/^(\d+\.\d+)\.\d+$/, '$1');
}
