import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpFetchTool } from '../../src/tools/httpTool.ts';
import type { PermissionRule } from '../../src/tools/policy.ts';
import { ToolExecutor } from '../../src/tools/toolExecutor.ts';
import { ToolRegistry } from '../../src/tools/toolRegistry.ts';
import { call, failure } from './toolHarness.ts';

let server: http.Server;
let port: number;
/** The same server under a second host name, so redirects can cross hosts. */
let local: (path: string) => string;
let other: (path: string) => string;
const seen: { method: string; url: string; headers: http.IncomingHttpHeaders; body: string }[] = [];

beforeAll(async () => {
  server = http.createServer(async (req, res) => {
    let body = '';
    for await (const chunk of req) body += chunk;
    seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
    const route = new URL(req.url ?? '/', 'http://x');
    const redirectTo = route.searchParams.get('to');
    if (route.pathname === '/hello') {
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'x-internal': 'not shown' });
      res.end('héllo');
    } else if (route.pathname === '/redirect' && redirectTo !== null) {
      res.writeHead(Number(route.searchParams.get('status') ?? 302), { location: redirectTo });
      res.end();
    } else if (route.pathname === '/loop') {
      res.writeHead(302, { location: '/loop' });
      res.end();
    } else if (route.pathname === '/big') {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': 100_000, etag: '"b1"' });
      res.end('b'.repeat(100_000));
    } else if (route.pathname === '/echo') {
      res.writeHead(201, 'Made It', { 'content-type': 'application/json' });
      res.end(JSON.stringify({ method: req.method, body, auth: req.headers.authorization ?? null }));
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('no such page');
    }
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as AddressInfo).port;
  local = (path) => `http://127.0.0.1:${port}${path}`;
  other = (path) => `http://localhost:${port}${path}`;
});

afterAll(async () => {
  const closed = new Promise((resolve) => server.close(resolve));
  // fetch keeps connections alive; close() would wait for their keep-alive timeout.
  server.closeAllConnections();
  await closed;
});

const onlyLoopback: PermissionRule = { tool: 'http_fetch', decision: 'allow', hosts: ['127.0.0.1'] };
const fetchAs = (args: unknown, rule?: PermissionRule) =>
  call(httpFetchTool, '/nonexistent', args, rule ? { rule } : {});

describe('http_fetch', () => {
  it('GETs an allowed host through the executor: status, selected headers, body', async () => {
    const executor = new ToolExecutor({
      registry: new ToolRegistry().register(httpFetchTool),
      policy: { tools: ['http_fetch'], rules: [onlyLoopback] },
      agent: 'researcher',
      workspace: '/nonexistent',
      taskId: 't',
    });
    const result = await executor.execute({
      id: 'c1',
      name: 'http_fetch',
      arguments: JSON.stringify({ url: local('/hello') }),
    });
    expect(result).toMatchObject({ ok: true, decision: 'allow' });
    expect(result.output).toBe('HTTP 200 OK\ncontent-type: text/plain; charset=utf-8\n\nhéllo');
    const refused = await executor.execute({
      id: 'c2',
      name: 'http_fetch',
      arguments: JSON.stringify({ url: other('/hello') }),
    });
    expect(refused).toMatchObject({ ok: false, decision: 'deny', error: { code: 'denied' } });
  });

  it('sends method, headers and body, and shows a non-2xx status as a result', async () => {
    const output = await fetchAs({
      url: local('/echo'),
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer t' },
      body: '{"a":1}',
    });
    expect(output).toBe(
      'HTTP 201 Made It\ncontent-type: application/json\n\n{"method":"POST","body":"{\\"a\\":1}","auth":"Bearer t"}',
    );
    await expect(fetchAs({ url: local('/missing') })).resolves.toMatch(/^HTTP 404 Not Found\n/);
    await expect(fetchAs({ url: local('/hello'), method: 'HEAD' })).resolves.toBe(
      'HTTP 200 OK\ncontent-type: text/plain; charset=utf-8\n\n',
    );
  });

  it('follows a redirect to a host the rule allows, dropping credentials across origins', async () => {
    const rule: PermissionRule = { ...onlyLoopback, hosts: ['127.0.0.1', 'localhost'] };
    const output = await fetchAs(
      {
        url: local(`/redirect?status=307&to=${encodeURIComponent(other('/echo'))}`),
        method: 'PUT',
        headers: { authorization: 'Bearer t' },
        body: 'x',
      },
      rule,
    );
    expect(output).toMatch(/\n\n\{"method":"PUT","body":"x","auth":null\}$/);
  });

  it('refuses a redirect to a host the rule does not allow, without requesting it', async () => {
    seen.length = 0;
    const error = await failure(
      fetchAs({ url: local(`/redirect?to=${encodeURIComponent(other('/hello'))}`) }, onlyLoopback),
    );
    expect(error.code).toBe('denied');
    expect(error.message).toBe(
      `http_fetch refused a redirect to ${other('/hello')}: host localhost is not among the allowed hosts 127.0.0.1`,
    );
    expect(seen.map((request) => request.url)).toEqual([
      `/redirect?to=${encodeURIComponent(other('/hello'))}`,
    ]);
  });

  it('without hosts in the rule, follows same-host redirects only', async () => {
    await expect(fetchAs({ url: local(`/redirect?to=/hello`) })).resolves.toMatch(
      /^HTTP 200 OK\n[\s\S]*héllo$/,
    );
    const error = await failure(
      fetchAs({ url: local(`/redirect?to=${encodeURIComponent(other('/hello'))}`) }),
    );
    expect(error.message).toBe(
      `http_fetch refused a redirect from 127.0.0.1:${port} to localhost:${port}: this agent's policy names no hosts, so only redirects within 127.0.0.1:${port} are followed`,
    );
  });

  it('turns a POST into a GET without a body on 303', async () => {
    const output = await fetchAs({
      url: local('/redirect?status=303&to=/echo'),
      method: 'POST',
      body: 'gone',
    });
    expect(output).toMatch(/\{"method":"GET","body":"","auth":null\}$/);
  });

  it('stops after five redirects', async () => {
    const error = await failure(fetchAs({ url: local('/loop') }));
    expect(error).toMatchObject({
      code: 'failed',
      message: `http_fetch: stopped after 5 redirects, at ${local('/loop')}`,
    });
  });

  it('caps the body with a marker', async () => {
    const output = await fetchAs({ url: local('/big'), maxBytes: 1000 });
    expect(output).toBe(
      `HTTP 200 OK\ncontent-type: text/plain\ncontent-length: 100000\netag: "b1"\n\n${'b'.repeat(1000)}\n…[body truncated at 1000 bytes]`,
    );
  });

  it('refuses schemes other than http and https, also in a redirect', async () => {
    for (const url of ['file:///etc/passwd', 'ftp://example.com/x', 'data:text/plain,hi']) {
      const error = await failure(fetchAs({ url }));
      expect(error.code).toBe('invalid_arguments');
      expect(error.message).toMatch(/only http and https are allowed$/);
    }
    const error = await failure(fetchAs({ url: local('/redirect?to=file:///etc/passwd') }));
    expect(error.message).toBe(
      'http_fetch refused: redirect location file:///etc/passwd uses file; only http and https are allowed',
    );
    expect((await failure(fetchAs({ url: 'not a url' }))).message).toBe(
      'http_fetch: url not a url is not an absolute URL',
    );
  });

  it('refuses a body on GET, and reports a refused connection', async () => {
    expect((await failure(fetchAs({ url: local('/hello'), body: 'x' }))).message).toBe(
      'http_fetch: a GET request cannot have a body; use POST or PUT',
    );
    const closed = await new Promise<number>((resolve) => {
      const probe = http.createServer().listen(0, '127.0.0.1', () => {
        const free = (probe.address() as AddressInfo).port;
        probe.close(() => resolve(free));
      });
    });
    const error = await failure(fetchAs({ url: `http://127.0.0.1:${closed}/` }));
    expect(error.code).toBe('failed');
    expect(error.message).toMatch(
      /^http_fetch: GET http:\/\/127\.0\.0\.1:\d+\/ failed: fetch failed: .*ECONNREFUSED/,
    );
  });

  it('gives up when the call is cancelled', async () => {
    const controller = new AbortController();
    const reason = new Error('cancelled by test');
    controller.abort(reason);
    await expect(
      call(httpFetchTool, '/nonexistent', { url: local('/hello') }, { signal: controller.signal }),
    ).rejects.toBe(reason);
  });
});
