import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PushError } from '../src/a2a/pushError.ts';
import { checkPushUrl, isPrivateAddress } from '../src/a2a/pushUrls.ts';
import { postWebhook, WebhookFailed } from '../src/a2a/webhookPost.ts';

describe('where webhooks may go', () => {
  it('knows private, loopback and link-local addresses, IPv4 mapped into IPv6 too', () => {
    for (const address of [
      '127.0.0.1',
      '10.0.0.8',
      '172.20.1.1',
      '192.168.1.1',
      '169.254.169.254',
      '100.64.0.1',
      '0.0.0.0',
      '::1',
      '::',
      'fd00::1',
      'fe80::1',
      '::ffff:127.0.0.1',
      '::ffff:10.1.1.1',
      '::ffff:7f00:1',
    ]) {
      expect(isPrivateAddress(address), address).toBe(true);
    }
    for (const address of [
      '8.8.8.8',
      '172.32.0.1',
      '2001:4860:4860::8888',
      '::ffff:8.8.8.8',
      'hooks.example.com',
    ]) {
      expect(isPrivateAddress(address), address).toBe(false);
    }
  });

  it('refuses what a webhook may not be, saying why', () => {
    const refused = (url: string, policy = {}) => {
      try {
        checkPushUrl(url, policy);
        return undefined;
      } catch (error) {
        expect(error).toBeInstanceOf(PushError);
        return error as PushError;
      }
    };
    expect(refused('https://hooks.example.com/a?b=c')).toBeUndefined();
    expect(refused('ftp://hooks.example.com/')?.code).toBe('url_refused');
    expect(refused('http://[::ffff:7f00:1]/')?.message).toMatch(/private, loopback or link-local/);
    expect(refused('http://LOCALHOST:8080/')?.code).toBe('url_refused');
    expect(refused('http://app.localhost/')?.code).toBe('url_refused');
    expect(refused('')?.code).toBe('invalid_config');
    expect(refused(`https://hooks.example.com/${'x'.repeat(2_100)}`)?.code).toBe('invalid_config');
    expect(refused('http://127.0.0.1/', { allowPrivate: true })).toBeUndefined();
    const only = { allowHosts: ['hooks.example.com', '*.acme.test'] };
    expect(refused('https://hooks.example.com/', only)).toBeUndefined();
    expect(refused('https://a.b.acme.test/', only)).toBeUndefined();
    expect(refused('https://acme.test/', only)?.message).toMatch(/only to hooks.example.com, \*\.acme\.test/);
    expect(refused('https://hooks.example.com.evil.test/', only)?.code).toBe('url_refused');
  });
});

describe('a webhook POST', () => {
  let server: Server;
  let port: number;
  let answer = 200;
  const bodies: string[] = [];

  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = '';
      req.on('data', (chunk) => (body += chunk));
      req.on('end', () => {
        bodies.push(body);
        if (answer === 0) return; // never answers
        res.writeHead(answer, answer === 302 ? { location: 'http://169.254.169.254/' } : {}).end();
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const post = (host: string, policy = { allowPrivate: true }, timeoutMs = 2_000) =>
    postWebhook(new URL(`http://${host}:${port}/hook`), '{"n":1}', {
      headers: { 'content-type': 'application/a2a+json' },
      policy,
      timeoutMs,
    });

  it('resolves on 2xx and fails on anything else, a redirect included, with the status', async () => {
    answer = 204;
    await expect(post('127.0.0.1')).resolves.toBeUndefined();
    expect(bodies.at(-1)).toBe('{"n":1}');
    for (const status of [302, 404, 500]) {
      answer = status;
      const failure = await post('127.0.0.1').catch((error: unknown) => error);
      expect(failure).toBeInstanceOf(WebhookFailed);
      expect((failure as WebhookFailed).status).toBe(status);
    }
  });

  it('gives up on a receiver that does not answer in time', async () => {
    answer = 0;
    await expect(post('127.0.0.1', { allowPrivate: true }, 300)).rejects.toThrow(/no answer within 300 ms/);
  });

  it('refuses to connect to a name that resolves to a private address, checked when it connects', async () => {
    answer = 200;
    const count = bodies.length;
    // `localhost` passes no check of its URL here: the guard is the address it resolves to.
    await expect(post('localhost', {} as { allowPrivate: boolean })).rejects.toThrow(
      /localhost resolves only to private addresses/,
    );
    expect(bodies.length).toBe(count);
    await expect(post('localhost')).resolves.toBeUndefined();
  });
});
