import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { EventFactory } from '../../src/events/eventFactory.ts';
import { createLogger } from '../../src/logging/logger.ts';
import {
  forgetSecrets,
  redactDeep,
  redactSecrets,
  registerSecret,
  registerSecretsFromEnv,
} from '../../src/logging/secrets.ts';

const KEY = 'canary-7f3a9c1d2e';

afterEach(() => forgetSecrets());

describe('redactSecrets', () => {
  it('replaces a registered value wherever it appears, and leaves other text alone', () => {
    registerSecret(KEY);
    expect(redactSecrets(`Incorrect API key provided: ${KEY}. See https://x`)).toBe(
      'Incorrect API key provided: [redacted]. See https://x',
    );
    expect(redactSecrets(`"${KEY}${KEY}"`)).toBe('"[redacted][redacted]"');
    expect(redactSecrets('nothing to see')).toBe('nothing to see');
  });

  it('ignores values too short to be told from ordinary text', () => {
    registerSecret('abc');
    registerSecret('');
    expect(redactSecrets('abc and more')).toBe('abc and more');
  });

  it('registers the environment variables whose names say they hold secrets, and only those', () => {
    registerSecretsFromEnv({
      OPENAI_API_KEY: 'sk-live-0123456789abcdef',
      GITHUB_TOKEN: 'ghp_0123456789abcdefghij',
      DB_PASSWORD: 'hunter2hunter2',
      HOME: '/home/someone-long',
      TROUPE_LOG_LEVEL: 'debugging',
    });
    expect(redactSecrets('ghp_0123456789abcdefghij hunter2hunter2 sk-live-0123456789abcdef')).toBe(
      '[redacted] [redacted] [redacted]',
    );
    expect(redactSecrets('/home/someone-long at debugging')).toBe('/home/someone-long at debugging');
  });

  it('catches what is shaped like a secret though nobody registered it', () => {
    expect(redactSecrets('Authorization: Bearer eyJhbGciOi.J9.x-y_z')).toBe(
      'Authorization: Bearer [redacted]',
    );
    expect(redactSecrets('auth Basic dXNlcjpwYXNzd29yZA==')).toBe('auth Basic [redacted]');
    expect(redactSecrets('key sk-ant-api03-abcdefghijklmnopqrstuv')).toBe('key [redacted]');
    expect(redactSecrets('nats://alice:s3cretpass@nats.example:4222')).toBe(
      'nats://alice:[redacted]@nats.example:4222',
    );
    const seed = `SU${'A'.repeat(56)}`;
    expect(redactSecrets(`seed ${seed}`)).toBe('seed [redacted]');
    expect(redactSecrets('token trp_AbCdEfGhIjKlMnOpQrStUvWx0123')).toBe('token [redacted]');
    expect(redactSecrets('GET /v1/events?pipeline=demo&access_token=opaque.value-1&after=3')).toBe(
      'GET /v1/events?pipeline=demo&access_token=[redacted]&after=3',
    );
    // Prose is not a token.
    for (const prose of [
      'Bearer authentication failed; Basic auth is off',
      'See the Basic functionality.',
      'Basic well-formed input, Bearer token-based flows',
    ])
      expect(redactSecrets(prose)).toBe(prose);
  });

  it('leaves JSON, e-mail addresses and plain URLs whole', () => {
    const json = '{"url":"https://api.example.com/v1","to":"bob@example.com","list":["a:b","c@d"]}';
    expect(redactSecrets(json)).toBe(json);
    expect(JSON.parse(redactSecrets('{"db":"postgres://app:s3cr3tpw@db:5432/x"}'))).toEqual({
      db: 'postgres://app:[redacted]@db:5432/x',
    });
  });

  it('does not register a short plain word as a secret, whatever the variable is called', () => {
    registerSecretsFromEnv({ POSTGRES_PASSWORD: 'postgres', SSH_AUTH_SOCK: '/tmp/ssh-agent.1234' });
    expect(redactSecrets('postgres at /tmp/ssh-agent.1234')).toBe('postgres at /tmp/ssh-agent.1234');
  });

  it('redacts every string of an object, copying only what changed', () => {
    registerSecret(KEY);
    const clean = { a: 'x', list: ['y'] };
    expect(redactDeep(clean)).toBe(clean);
    const dirty = { a: 'x', nested: { message: `key ${KEY}` }, list: ['y', KEY], n: 3 };
    const redacted = redactDeep(dirty);
    expect(redacted).toEqual({
      a: 'x',
      nested: { message: 'key [redacted]' },
      list: ['y', '[redacted]'],
      n: 3,
    });
    expect(dirty.nested.message).toBe(`key ${KEY}`);
  });

  it('survives a cycle, and redacts a URL object and a null-prototype object', () => {
    registerSecret(KEY);
    const cyclic: Record<string, unknown> = { note: `has ${KEY}` };
    cyclic.self = cyclic;
    const redacted = redactDeep(cyclic);
    expect(redacted.note).toBe('has [redacted]');
    const bare = Object.assign(Object.create(null), { key: KEY });
    expect(redactDeep({ bare, url: new URL(`https://u:${KEY}@example.com/`) })).toEqual({
      bare: { key: '[redacted]' },
      url: 'https://u:[redacted]@example.com/',
    });
  });
});

describe('secrets in logs and events', () => {
  it('keeps them out of log lines: the message, its fields and an error’s message and stack', () => {
    registerSecret(KEY);
    const lines: string[] = [];
    const logger = createLogger({
      destination: new Writable({
        write(chunk, _encoding, done) {
          lines.push(String(chunk));
          done();
        },
      }) as never,
    });
    logger.error(
      { err: new Error(`401: bad key ${KEY}`), url: `https://api?key=${KEY}` },
      `model call failed with ${KEY}`,
    );
    const text = lines.join('');
    expect(text).toContain('[redacted]');
    expect(text).not.toContain(KEY);
  });

  it('keeps them out of events', () => {
    registerSecret(KEY);
    const event = new EventFactory({ now: () => 0 }).make(
      'llm.error',
      { pipeline: 'demo', taskId: 't1', traceparent: '' },
      {
        agent: 'coder',
        stepId: 't1.s.1',
        turn: 1,
        provider: 'openai',
        model: 'm',
        code: 'auth',
        message: `bad key ${KEY}`,
      },
    );
    expect(event.data.message).toBe('bad key [redacted]');
  });
});
