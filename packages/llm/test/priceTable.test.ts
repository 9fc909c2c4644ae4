import { describe, expect, it } from 'vitest';
import { DEFAULT_PRICES, type ModelPrice, PriceTable } from '../src/pricing/priceTable.ts';

const usage = (inputTokens: number, outputTokens: number, cachedTokens = 0) => ({
  inputTokens,
  outputTokens,
  cachedTokens,
});

/** Prices that differ from one another, so a test can tell which entry was used. */
const DISTINCT: Record<string, ModelPrice> = {
  'anthropic:claude-sonnet-4': { input: 3, output: 15 },
  'anthropic:claude-sonnet-4-5': { input: 4, cachedInput: 0.4, output: 20 },
  'openai:gpt-5': { input: 1, cachedInput: 0.1, output: 8 },
  'openai:gpt-5-mini': { input: 0.2, cachedInput: 0.02, output: 1.6 },
};

describe('PriceTable.priceOf', () => {
  it('matches a dated model name to the longest key it begins with', () => {
    const table = new PriceTable({}, DISTINCT);
    expect(table.priceOf('anthropic', 'claude-sonnet-4-5-20250929')).toEqual({
      input: 4,
      cachedInput: 0.4,
      output: 20,
    });
    expect(table.priceOf('anthropic', 'claude-sonnet-4-20250514')).toEqual({ input: 3, output: 15 });
  });

  it('finds claude-sonnet-4-5 among the default prices, not claude-sonnet-4', () => {
    const table = new PriceTable();
    expect(table.priceOf('anthropic', 'claude-sonnet-4-5-20250929')).toBe(
      DEFAULT_PRICES['anthropic:claude-sonnet-4-5'],
    );
    expect(table.priceOf('openai', 'gpt-5-mini-2025-08-07')).toBe(DEFAULT_PRICES['openai:gpt-5-mini']);
  });

  it('matches a name exactly', () => {
    const table = new PriceTable({}, DISTINCT);
    expect(table.priceOf('openai', 'gpt-5')).toEqual({ input: 1, cachedInput: 0.1, output: 8 });
    expect(table.priceOf('openai', 'gpt-5-mini')).toEqual({ input: 0.2, cachedInput: 0.02, output: 1.6 });
  });

  it('matches a prefix only at a dash, so gpt-50 is not gpt-5', () => {
    const table = new PriceTable({}, DISTINCT);
    expect(table.priceOf('openai', 'gpt-50')).toBeUndefined();
  });

  it('keeps providers apart', () => {
    const table = new PriceTable({}, DISTINCT);
    expect(table.priceOf('openai-compatible', 'gpt-5')).toBeUndefined();
  });

  it('knows nothing of an unknown model', () => {
    expect(new PriceTable().priceOf('openai-compatible', 'llama3.1:8b')).toBeUndefined();
  });

  it('lets an override win over the default of the same key', () => {
    const table = new PriceTable({ 'openai:gpt-5': { input: 9, output: 99 } }, DISTINCT);
    expect(table.priceOf('openai', 'gpt-5-2025-08-07')).toEqual({ input: 9, output: 99 });
    // Other defaults stay.
    expect(table.priceOf('openai', 'gpt-5-mini')).toEqual(DISTINCT['openai:gpt-5-mini']);
  });

  it("gives an Anthropic override without cache prices Anthropic's (0.1x, 1.25x and 2x input), and keeps given ones", () => {
    const table = new PriceTable(
      {
        'anthropic:claude-x': { input: 4, output: 20 },
        'anthropic:claude-y': { input: 4, output: 20, cachedInput: 1, cacheWrite: 4, cacheWrite1h: 6 },
        'openai:gpt-x': { input: 4, output: 20 },
      },
      DISTINCT,
    );
    expect(table.priceOf('anthropic', 'claude-x')).toEqual({
      input: 4,
      output: 20,
      cachedInput: 0.4,
      cacheWrite: 5,
      cacheWrite1h: 8,
    });
    expect(table.priceOf('anthropic', 'claude-y')).toMatchObject({
      cachedInput: 1,
      cacheWrite: 4,
      cacheWrite1h: 6,
    });
    expect(table.priceOf('openai', 'gpt-x')).toEqual({ input: 4, output: 20 });
    // 1M tokens written for 5 minutes: 1.25 x 4.
    expect(
      table.cost('anthropic', 'claude-x', {
        inputTokens: 1e6,
        outputTokens: 0,
        cachedTokens: 0,
        cacheWriteTokens: 1e6,
      }),
    ).toBe(5);
    // 1M tokens read: 0.1 x 4, not the full input price.
    expect(table.cost('anthropic', 'claude-x', usage(1e6, 0, 1e6))).toBeCloseTo(0.4, 10);
  });

  it('does not price a different model by a shared prefix (gpt-5-pro is not gpt-5)', () => {
    const table = new PriceTable({}, DISTINCT);
    expect(table.priceOf('openai', 'gpt-5-pro')).toBeUndefined();
    const priced = new PriceTable({ 'openai:gpt-5-pro': { input: 7, output: 70 } }, DISTINCT);
    expect(priced.priceOf('openai', 'gpt-5-pro')).toEqual({ input: 7, output: 70 });
    expect(priced.priceOf('openai', 'gpt-5-pro-2025-10-06')).toEqual({ input: 7, output: 70 });
  });
});

describe('PriceTable.cost', () => {
  const table = new PriceTable({}, DISTINCT);

  it('charges input and output per million tokens', () => {
    // 2M input at 1, 0.5M output at 8.
    expect(table.cost('openai', 'gpt-5', usage(2_000_000, 500_000))).toBeCloseTo(2 + 4, 10);
  });

  it('charges cached input tokens at the cached price and the rest at the input price', () => {
    // 1M fresh at 1, 1M cached at 0.1, 1M output at 8.
    expect(table.cost('openai', 'gpt-5', usage(2_000_000, 1_000_000, 1_000_000))).toBeCloseTo(
      1 + 0.1 + 8,
      10,
    );
  });

  it('charges cached tokens at the input price when the model has no cached price', () => {
    // claude-sonnet-4 in DISTINCT has no cachedInput: 1M tokens at 3 whether cached or not.
    const cached = table.cost('anthropic', 'claude-sonnet-4', usage(1_000_000, 0, 400_000));
    expect(cached).toBeCloseTo(3, 10);
  });

  it('counts no more cached tokens than input tokens', () => {
    // 1000 cached of 100 input: all 100 at the cached price, none negative at the input price.
    expect(table.cost('openai', 'gpt-5', usage(100, 0, 1_000))).toBeCloseTo((100 * 0.1) / 1_000_000, 15);
  });

  it('costs 0 for an unknown model', () => {
    expect(table.cost('openai-compatible', 'llama3.1:8b', usage(5_000, 5_000, 1_000))).toBe(0);
  });

  it('costs 0 for no tokens', () => {
    expect(table.cost('openai', 'gpt-5', usage(0, 0))).toBe(0);
  });

  it('uses the default list prices when none are given', () => {
    // gpt-4o-mini: 0.15 input, 0.075 cached, 0.6 output.
    const cost = new PriceTable().cost(
      'openai',
      'gpt-4o-mini-2024-07-18',
      usage(1_000_000, 1_000_000, 200_000),
    );
    expect(cost).toBeCloseTo(0.8 * 0.15 + 0.2 * 0.075 + 0.6, 10);
  });
});

describe('PriceTable.cost with cache writes', () => {
  const priced: Record<string, ModelPrice> = {
    'anthropic:claude-a': { input: 4, cachedInput: 0.4, cacheWrite: 5, cacheWrite1h: 8, output: 20 },
    'anthropic:claude-b': { input: 4, cachedInput: 0.4, cacheWrite: 5, output: 20 },
    'openai:gpt-a': { input: 1, cachedInput: 0.1, output: 8 },
  };
  const table = new PriceTable({}, priced);
  /** 10M input: 1M fresh, 6M read, 3M written of which 2M with the 1-hour lifetime; 1M output. */
  const withWrites = {
    inputTokens: 10_000_000,
    outputTokens: 1_000_000,
    cachedTokens: 6_000_000,
    cacheWriteTokens: 3_000_000,
    cacheWrite1hTokens: 2_000_000,
  };

  it('charges fresh input, reads, 5-minute and 1-hour writes and output each at its price', () => {
    // 1M × 4 + 6M × 0.4 + 1M × 5 + 2M × 8 + 1M × 20.
    expect(table.cost('anthropic', 'claude-a', withWrites)).toBeCloseTo(4 + 2.4 + 5 + 16 + 20, 10);
    // Without write prices (OpenAI's), writes cost plain input: 4M fresh or written at 1, 6M read at 0.1, 1M at 8.
    expect(table.cost('openai', 'gpt-a', withWrites)).toBeCloseTo(4 + 0.6 + 8, 10);
  });

  it('charges 1-hour writes at the 5-minute write price when the model has no 1-hour price', () => {
    expect(table.cost('anthropic', 'claude-b', withWrites)).toBeCloseTo(4 + 2.4 + 3 * 5 + 20, 10);
  });

  it('counts no more writes than the input left after reads, and no more 1-hour writes than writes', () => {
    const odd = {
      inputTokens: 1_000_000,
      outputTokens: 0,
      cachedTokens: 600_000,
      cacheWriteTokens: 900_000,
      cacheWrite1hTokens: 5_000_000,
    };
    // 600k read at 0.4, the other 400k written, all of them with the 1-hour lifetime at 8; nothing fresh.
    expect(table.cost('anthropic', 'claude-a', odd)).toBeCloseTo(0.24 + 3.2, 10);
  });

  it('ships write prices for every Anthropic model (1.25 and 2 times input) and none for OpenAI', () => {
    const entries = Object.entries(DEFAULT_PRICES);
    const anthropic = entries.filter(([key]) => key.startsWith('anthropic:'));
    expect(anthropic.length).toBeGreaterThan(0);
    for (const [key, price] of anthropic) {
      expect({ key, cacheWrite: price.cacheWrite, cacheWrite1h: price.cacheWrite1h }).toEqual({
        key,
        cacheWrite: expect.closeTo(price.input * 1.25, 10),
        cacheWrite1h: expect.closeTo(price.input * 2, 10),
      });
    }
    for (const [, price] of entries.filter(([key]) => key.startsWith('openai:'))) {
      expect(price.cacheWrite).toBeUndefined();
      expect(price.cacheWrite1h).toBeUndefined();
    }
  });

  it('prices a Claude call with writes from the shipped table', () => {
    // claude-sonnet-4-5: input 3, read 0.3, write 3.75 (5 min) / 6 (1 h), output 15.
    const cost = new PriceTable().cost('anthropic', 'claude-sonnet-4-5-20250929', withWrites);
    expect(cost).toBeCloseTo(3 + 1.8 + 3.75 + 12 + 15, 10);
  });
});
