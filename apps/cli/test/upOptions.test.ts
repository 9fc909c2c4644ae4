import { createLogger } from '@troupe/runtime';
import { describe, expect, it } from 'vitest';
import { CliError } from '../src/cliError.ts';
import { start } from '../src/commands/up.ts';
import { seconds } from '../src/program/options.ts';

const logger = createLogger({ level: 'silent' });
const options = { home: '/nonexistent-troupe-home', agents: true, concurrency: 1 } as const;

describe('troupe up options', () => {
  // Hosts refuse a step request whose heartbeat a timer cannot hold: every step of such a `up` would fail.
  it.each([
    ['a millisecond', 0.001],
    ['longer than a timer holds', 3_000_000],
  ])('refuses a step heartbeat of %s before it starts anything', async (_label, stepHeartbeat) => {
    const started = start([], { ...options, stepHeartbeat }, 'nats://127.0.0.1:1', logger);
    await expect(started).rejects.toBeInstanceOf(CliError);
    await expect(started).rejects.toThrow(/--step-heartbeat must be between 0.01 and 2147483 seconds/);
  });
  it('refuses a checkpoint linger longer than a timer holds before it starts anything', async () => {
    const started = start([], { ...options, checkpointLinger: 3_000_000 }, 'nats://127.0.0.1:1', logger);
    await expect(started).rejects.toBeInstanceOf(CliError);
    await expect(started).rejects.toThrow('--checkpoint-linger must be at most 2147483 seconds');
  });
});

describe('--passivate-after', () => {
  it('takes 0 (passivation off) and any positive number of seconds, and refuses the rest', () => {
    expect(seconds('0')).toBe(0);
    expect(seconds('2.5')).toBe(2.5);
    for (const bad of ['-1', 'soon', 'Infinity'])
      expect(() => seconds(bad)).toThrow('must be 0 or a positive number of seconds');
  });
});
