import { A2A_ERROR_CODE, RequestMalformedError } from '@a2a-js/sdk/errors';
import type { FastifyRequest } from 'fastify';
import { describe, expect, it } from 'vitest';
import { rpcError } from '../src/a2a/a2aErrorAnswers.ts';
import { parseRpc, RpcEnvelopeError, versionOf } from '../src/a2a/a2aRequest.ts';

const thrown = (text: string) => {
  try {
    parseRpc(text);
  } catch (error) {
    return error;
  }
  throw new Error(`parseRpc took ${text}`);
};

describe('an A2A JSON-RPC envelope', () => {
  it('refuses a body that is not JSON with -32700, as a malformed request', () => {
    const error = thrown('{not json');
    expect(error).toBeInstanceOf(RpcEnvelopeError);
    expect(error).toBeInstanceOf(RequestMalformedError);
    expect(rpcError(7, error)).toMatchObject({
      jsonrpc: '2.0',
      id: 7,
      error: { code: A2A_ERROR_CODE.PARSE_ERROR },
    });
  });

  it.each([
    ['[]', 'not an object'],
    ['{"jsonrpc":"1.0","method":"GetTask"}', 'jsonrpc is not "2.0"'],
    ['{"jsonrpc":"2.0"}', 'no method'],
    ['{"jsonrpc":"2.0","method":"GetTask","id":1.5}', 'id is not a string, an integer or null'],
  ])('refuses %s with -32600, saying why', (text, why) => {
    const error = thrown(text);
    expect((error as Error).message).toBe(`not a JSON-RPC 2.0 request: ${why}`);
    expect(rpcError(null, error).error.code).toBe(A2A_ERROR_CODE.INVALID_REQUEST);
  });

  it('takes a request', () => {
    expect(parseRpc('{"jsonrpc":"2.0","method":"GetTask","id":"a"}')).toEqual({
      jsonrpc: '2.0',
      method: 'GetTask',
      id: 'a',
    });
  });

  it('reads the version asked for, a patch number not counting', () => {
    const request = (header?: string) =>
      ({ headers: header ? { 'a2a-version': header } : {}, query: {} }) as unknown as FastifyRequest;
    expect(versionOf(request('1.0.1'))).toBe('1.0');
    expect(versionOf(request())).toBeUndefined();
  });
});
