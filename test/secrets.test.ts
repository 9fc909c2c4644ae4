import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { subjects } from '@troupe/protocol';
import {
  type FakeModelServer,
  type OtlpReceiver,
  startFakeOpenAI,
  startOtlpReceiver,
  startTestNats,
  type TestNats,
} from '@troupe/testkit';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CliProcess, cliEnv, startTroupe, troupe } from './support/cli.ts';

/**
 * Canary secrets, and a task that makes them turn up: the model provider's 401 quotes the API key it was given (as
 * OpenAI's does), and a tool writes and reads back a password that is in the environment. Every output a person or
 * a backend sees — the process's logs, the events, the spans, what `submit`, `logs` and `trace` print — is scanned.
 */
describe('secrets never leave', () => {
  const apiKey = `sk-canary-${randomBytes(12).toString('hex')}`;
  const password = `canary-${randomBytes(12).toString('hex')}`;
  let nats: TestNats;
  let openai: FakeModelServer;
  let receiver: OtlpReceiver;
  let client: NatsConnection;
  let dir: string;
  let up: CliProcess | undefined;
  const events: string[] = [];

  beforeAll(async () => {
    [nats, openai, receiver] = await Promise.all([startTestNats(), startFakeOpenAI(), startOtlpReceiver()]);
    dir = await mkdtemp(join(tmpdir(), 'troupe-secrets-'));
    client = await connect({ servers: nats.url });
    client.subscribe(subjects.allEvents, {
      callback: (_error, msg) => {
        events.push(msg.string());
      },
    });
    await client.flush();
    await writeFile(
      join(dir, 'leaky.yaml'),
      `version: 1
name: leaky
models:
  gpt: { provider: openai, model: gpt-5-mini, baseURL: "${openai.baseURL}", maxAttempts: 1 }
  scripted: { provider: scripted, script: ./leaky.script.yaml }
agents:
  reader:
    model: scripted
    instructions: Read the settings.
    tools: [write_file, read_file]
    permissions:
      - { tool: write_file, decision: allow, paths: ["*.txt"] }
      - { tool: read_file, decision: allow, paths: ["*.txt"] }
  keyed: { model: gpt, instructions: Answer. }
flow:
  - { id: read, kind: agent, agent: reader }
  - { id: ask, kind: agent, agent: keyed }
`,
    );
    await writeFile(
      join(dir, 'leaky.script.yaml'),
      `agents:
  reader:
    - toolCalls: [{ name: write_file, arguments: { path: settings.txt, content: "DB_PASSWORD=${password}" } }]
    - toolCalls: [{ name: read_file, arguments: { path: settings.txt } }]
    - content: "The database password is ${password}."
`,
    );
    openai.enqueue({ kind: 'error', status: 401, message: `Incorrect API key provided: ${apiKey}.` });
  });
  afterAll(async () => {
    await up?.stop('SIGTERM');
    await client?.close();
    await Promise.all([nats?.stop(), openai?.stop(), receiver?.stop()]);
    await rm(dir, { recursive: true, force: true });
  });

  it('redacts the canaries in logs, events, spans and everything the CLI prints', async () => {
    const env = cliEnv({
      OPENAI_API_KEY: apiKey,
      DB_PASSWORD: password,
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_BSP_SCHEDULE_DELAY: '100',
      OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT: 'true',
    });
    const home = join(dir, 'home');
    up = startTroupe(
      ['up', join(dir, 'leaky.yaml'), '--server', nats.url, '--home', home, '--json', '--log-level', 'debug'],
      env,
    );
    await up.waitFor(/troupe is up/);
    const submitted = await troupe(
      [
        'submit',
        'leaky',
        'read the settings',
        '--id',
        'leak-1',
        '--wait',
        '--server',
        nats.url,
        '--home',
        home,
      ],
      env,
      60_000,
    );
    // The task failed on the key, as planned, and the model server was given the key.
    expect(submitted.code, submitted.stdout + submitted.stderr).toBe(1);
    expect(openai.requests.at(-1)?.headers.authorization).toBe(`Bearer ${apiKey}`);
    const logs = await troupe(['logs', 'leak-1', '--json', '--server', nats.url], env);
    const trace = await troupe(['trace', 'leak-1', '--server', nats.url], env);
    await expect
      .poll(() => receiver.spans.some((s) => s.name === 'invoke_workflow leaky'), { timeout: 20_000 })
      .toBe(true);
    await expect.poll(() => events.some((e) => e.includes('"task.failed"'))).toBe(true);

    const outputs: Record<string, string> = {
      'troupe up (logs)': up.output(),
      'troupe submit': submitted.stdout + submitted.stderr,
      'troupe logs': logs.stdout + logs.stderr,
      'troupe trace': trace.stdout + trace.stderr,
      events: events.join('\n'),
      spans: JSON.stringify(receiver.spans),
    };
    for (const [where, text] of Object.entries(outputs)) {
      expect(text.length, where).toBeGreaterThan(0);
      expect(text.includes(apiKey), `the API key in ${where}`).toBe(false);
      expect(text.includes(password), `the password in ${where}`).toBe(false);
    }
    // They were there to leak, and were redacted where they would have been.
    expect(outputs.events).toMatch(/Incorrect API key provided: \[redacted\]/);
    expect(outputs.events).toContain('DB_PASSWORD=[redacted]');
    expect(outputs.spans).toContain('DB_PASSWORD=[redacted]');
    expect(outputs['troupe submit']).toContain('[redacted]');
  });
});
