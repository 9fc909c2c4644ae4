import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { CliError } from '../src/cliError.ts';
import { eventBatchOf, eventBatchOption, noEventBatchOption } from '../src/program/options.ts';

/** What `troupe up`'s or `troupe worker`'s batching flags parse to (undefined: neither given). */
function flagOf(args: string[]): boolean | undefined {
  const command = new Command().addOption(eventBatchOption()).addOption(noEventBatchOption());
  command.parse(args, { from: 'user' });
  return command.opts<{ eventBatch?: boolean }>().eventBatch;
}

describe('whether troupe up and troupe worker batch their events', () => {
  it('batch by default: no flag, and TROUPE_EVENT_BATCH unset, empty or 1', () => {
    expect(flagOf([])).toBeUndefined();
    for (const env of [{}, { TROUPE_EVENT_BATCH: '' }, { TROUPE_EVENT_BATCH: '1' }]) {
      expect(eventBatchOf(flagOf([]), env)).toBe(true);
    }
  });

  it('send each event alone with --no-event-batch, or TROUPE_EVENT_BATCH=0', () => {
    expect(eventBatchOf(flagOf(['--no-event-batch']), {})).toBe(false);
    expect(eventBatchOf(flagOf([]), { TROUPE_EVENT_BATCH: '0' })).toBe(false);
  });

  it('take the flag over the environment', () => {
    expect(eventBatchOf(flagOf(['--event-batch']), { TROUPE_EVENT_BATCH: '0' })).toBe(true);
    expect(eventBatchOf(flagOf(['--no-event-batch']), { TROUPE_EVENT_BATCH: '1' })).toBe(false);
  });

  it('refuse another TROUPE_EVENT_BATCH, which someone may have meant as off, with a usage error', () => {
    for (const value of ['false', 'off', 'yes', ' 0']) {
      const refusal = (() => {
        try {
          eventBatchOf(undefined, { TROUPE_EVENT_BATCH: value });
        } catch (error) {
          return error;
        }
        return undefined;
      })();
      expect(refusal, value).toBeInstanceOf(CliError);
      expect((refusal as CliError).exitCode).toBe(2);
      expect((refusal as CliError).message).toBe(
        `TROUPE_EVENT_BATCH must be 0 (each event alone) or 1 (events in batches, the default), not "${value}"`,
      );
    }
  });
});
