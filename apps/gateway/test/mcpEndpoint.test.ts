import { createLogger } from '@troupe/runtime';
import Fastify, { type FastifyInstance } from 'fastify';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { TokenStore } from '../src/auth.ts';
import { mcpEndpoint } from '../src/mcp/mcpEndpoint.ts';
import { roundStateCodec } from '../src/mcp/roundState.ts';

const INITIALIZE = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'probe', version: '1' } },
};

describe('/mcp: 2025-11-25 sessions', () => {
  let app: FastifyInstance | undefined;
  afterEach(async () => {
    await app?.close();
    vi.useRealTimers();
  });

  it('an initialize the transport refuses leaves no server behind looking for pipelines', async () => {
    // Only intervals are faked: a session's server looks for new pipelines on one, and HTTP keeps its real timers.
    vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
    let looks = 0;
    app = Fastify();
    await app.register(mcpEndpoint, {
      mcp: {
        bus: {} as never,
        actions: {} as never,
        pipelines: async () => {
          looks += 1;
          return [];
        },
        codec: roundStateCodec(),
        version: '0.0.0',
        refreshMs: 10,
      },
      tokens: new TokenStore([]),
      auth: 'none',
      logger: createLogger({ level: 'silent' }),
    });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    // No `Accept: text/event-stream`: refused with 406, and no session is made.
    const refused = await fetch(`${url}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json' },
      body: JSON.stringify(INITIALIZE),
    });
    expect(refused.status).toBe(406);
    expect(refused.headers.get('mcp-session-id')).toBeNull();
    const built = looks;
    expect(built).toBe(1);
    vi.advanceTimersByTime(1_000);
    expect(looks).toBe(built);
  });

  it('past its limit a token gives up an idle session, never one with a request open, whose calls would be cancelled', async () => {
    app = Fastify();
    await app.register(mcpEndpoint, {
      mcp: {
        bus: {} as never,
        actions: {} as never,
        pipelines: async () => [],
        codec: roundStateCodec(),
        version: '0.0.0',
      },
      tokens: new TokenStore([]),
      auth: 'none',
      logger: createLogger({ level: 'silent' }),
      sessions: { perToken: 1 },
    });
    const url = await app.listen({ host: '127.0.0.1', port: 0 });
    const headers = {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': '2025-11-25',
    };
    const initialize = async () => {
      const response = await fetch(`${url}/mcp`, {
        method: 'POST',
        headers,
        body: JSON.stringify(INITIALIZE),
      });
      await response.text();
      return { status: response.status, id: response.headers.get('mcp-session-id') };
    };
    const alive = async (id: string) => {
      const response = await fetch(`${url}/mcp`, {
        method: 'POST',
        headers: { ...headers, 'mcp-session-id': id },
        body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'ping' }),
      });
      await response.text();
      return response.status;
    };
    const first = await initialize();
    expect(first.status).toBe(200);
    // The first is idle: a second session takes its place.
    const second = await initialize();
    expect(second.status).toBe(200);
    expect(await alive(first.id ?? '')).toBe(404);
    expect(await alive(second.id ?? '')).toBe(200);
    // The second holds its event stream open: a third is refused, and the second lives on.
    const stream = new AbortController();
    const listening = await fetch(`${url}/mcp`, {
      headers: {
        accept: 'text/event-stream',
        'mcp-session-id': second.id ?? '',
        'mcp-protocol-version': '2025-11-25',
      },
      signal: stream.signal,
    });
    expect(listening.status).toBe(200);
    const third = await initialize();
    expect(third.status).toBe(429);
    expect(await alive(second.id ?? '')).toBe(200);
    stream.abort();
  });
});
