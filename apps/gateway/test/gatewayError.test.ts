import { OperationError } from '@troupe/client';
import { describe, expect, it } from 'vitest';
import { InvalidRequest } from '../src/actions.ts';
import { AuthRefusal } from '../src/auth.ts';
import { answerTo } from '../src/errors.ts';
import { GatewayError } from '../src/gatewayError.ts';
import { TooManyStreams } from '../src/streamQuota.ts';

const ana = { name: 'ana', scopes: ['read' as const] };

describe('the gateway refusals', () => {
  it.each([
    ['a bad request', new InvalidRequest('goal: required'), 400, 'invalid_request', 'InvalidRequest'],
    ['no token', new AuthRefusal(401, 'no bearer token'), 401, 'unauthenticated', 'AuthRefusal'],
    ['a token that may not', new AuthRefusal(403, 'token ana may not'), 403, 'forbidden', 'AuthRefusal'],
    ['a full cap', new TooManyStreams(ana, 'consumers', 3), 429, 'too_many_consumers', 'TooManyStreams'],
    [
      'a WebSocket following too many tasks',
      new GatewayError('too_many_subscriptions', 429, 'a connection follows at most 100 tasks'),
      429,
      'too_many_subscriptions',
      'GatewayError',
    ],
  ])('answers %s with its status and stable code', (_what, error, status, code, name) => {
    expect(GatewayError.is(error)).toBe(true);
    expect(error).toBeInstanceOf(Error);
    expect(error.name).toBe(name);
    expect(answerTo(error)).toEqual({ status, code, message: error.message });
  });

  it('keeps a cause it was given', () => {
    const cause = new Error('depth');
    expect(new InvalidRequest('too deep', { cause }).cause).toBe(cause);
  });

  it('answers an operation error and a Fastify refusal, and leaves a fault to be a 500', () => {
    expect(answerTo(new OperationError('not_found', 'no task t-1'))).toEqual({
      status: 404,
      code: 'not_found',
      message: 'no task t-1',
    });
    expect(answerTo(Object.assign(new Error('body too large'), { statusCode: 413 }))).toMatchObject({
      status: 413,
      code: 'too_large',
    });
    expect(answerTo(new Error('boom'))).toBeUndefined();
  });
});
