import type { Usage } from '../types.ts';

/**
 * USD per million tokens. `cachedInput` is what a prompt-cache read costs instead of `input`; `cacheWrite` and
 * `cacheWrite1h` what a token written to the cache costs with the 5-minute and the 1-hour lifetime (Anthropic bills
 * writes above `input`; a price without them bills writes as plain input).
 */
export interface ModelPrice {
  input: number;
  output: number;
  cachedInput?: number | undefined;
  cacheWrite?: number | undefined;
  cacheWrite1h?: number | undefined;
}

/** What Anthropic bills a cache write, as a multiple of the input price: with the 5-minute and the 1-hour lifetime. */
const ANTHROPIC_WRITE_5M = 1.25;
const ANTHROPIC_WRITE_1H = 2;

/** What Anthropic bills a cache read: a tenth of the input price. */
const anthropicRead = (input: number): number => input / 10;

/**
 * An Anthropic price from its input and output prices: a cache read costs a tenth of the input price, a cache
 * write 1.25 times it with the 5-minute lifetime and 2 times with the 1-hour one, for every Claude model.
 */
const anthropic = (input: number, output: number): ModelPrice => ({
  input,
  cachedInput: anthropicRead(input),
  cacheWrite: input * ANTHROPIC_WRITE_5M,
  cacheWrite1h: input * ANTHROPIC_WRITE_1H,
  output,
});

/**
 * List prices of current models, USD per million tokens, as the vendors published them in late 2025 (OpenAI
 * charges nothing extra for a cache write, so its entries have no write prices and writes cost plain input).
 * Prices change: override them under `prices:` in a pipeline file. Models not listed cost 0 and are reported
 * as such. A key matches its model exactly, or with a date or `-latest` after it (`claude-sonnet-4-5` covers
 * `claude-sonnet-4-5-20250929`, `gpt-5` does not cover `gpt-5-pro`).
 */
export const DEFAULT_PRICES: Readonly<Record<string, ModelPrice>> = {
  'openai:gpt-5': { input: 1.25, cachedInput: 0.125, output: 10 },
  'openai:gpt-5-mini': { input: 0.25, cachedInput: 0.025, output: 2 },
  'openai:gpt-5-nano': { input: 0.05, cachedInput: 0.005, output: 0.4 },
  'openai:gpt-4.1': { input: 2, cachedInput: 0.5, output: 8 },
  'openai:gpt-4.1-mini': { input: 0.4, cachedInput: 0.1, output: 1.6 },
  'openai:gpt-4.1-nano': { input: 0.1, cachedInput: 0.025, output: 0.4 },
  'openai:gpt-4o': { input: 2.5, cachedInput: 1.25, output: 10 },
  'openai:gpt-4o-mini': { input: 0.15, cachedInput: 0.075, output: 0.6 },
  'openai:o3': { input: 2, cachedInput: 0.5, output: 8 },
  'openai:o4-mini': { input: 1.1, cachedInput: 0.275, output: 4.4 },
  'anthropic:claude-opus-4-5': anthropic(5, 25),
  'anthropic:claude-opus-4-1': anthropic(15, 75),
  'anthropic:claude-opus-4': anthropic(15, 75),
  'anthropic:claude-sonnet-4-6': anthropic(3, 15),
  'anthropic:claude-sonnet-4-5': anthropic(3, 15),
  'anthropic:claude-sonnet-4': anthropic(3, 15),
  'anthropic:claude-haiku-4-5': anthropic(1, 5),
  'anthropic:claude-3-5-haiku': anthropic(0.8, 4),
};

/** A dated snapshot or alias of a model: `-20250929`, `-2025-08-07`, `-latest`. */
const VERSION_SUFFIX = /^-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)$/;

/** Looks up prices by `provider:model`. */
export class PriceTable {
  readonly #prices: Map<string, ModelPrice>;

  /**
   * An override of an `anthropic:` key that gives no cache prices gets Anthropic's rule for them (reads 0.1 ×,
   * writes 1.25 × and 2 × its `input`), so neither is billed as plain input; prices it gives are kept.
   */
  constructor(overrides: Readonly<Record<string, ModelPrice>> = {}, defaults = DEFAULT_PRICES) {
    const own = Object.entries(overrides).map(([key, price]): [string, ModelPrice] =>
      key.startsWith('anthropic:')
        ? [
            key,
            {
              ...price,
              cachedInput: price.cachedInput ?? anthropicRead(price.input),
              cacheWrite: price.cacheWrite ?? price.input * ANTHROPIC_WRITE_5M,
              cacheWrite1h: price.cacheWrite1h ?? price.input * ANTHROPIC_WRITE_1H,
            },
          ]
        : [key, price],
    );
    this.#prices = new Map([...Object.entries(defaults), ...own]);
  }

  priceOf(provider: string, model: string): ModelPrice | undefined {
    const name = `${provider}:${model}`;
    const exact = this.#prices.get(name);
    if (exact) return exact;
    for (const [key, price] of this.#prices) {
      if (name.startsWith(key) && VERSION_SUFFIX.test(name.slice(key.length))) return price;
    }
    return undefined;
  }

  /**
   * USD for one call. Of the input, cache reads are at `cachedInput`, cache writes at `cacheWrite` (those with
   * the 1-hour lifetime at `cacheWrite1h`, else `cacheWrite`), and the rest at `input`; a price not given is
   * `input`'s. Counts that do not add up (more reads or writes than input) are capped, never negative.
   */
  cost(provider: string, model: string, usage: Usage): number {
    const price = this.priceOf(provider, model);
    if (!price) return 0;
    const reads = Math.min(usage.cachedTokens, usage.inputTokens);
    const writes = Math.min(usage.cacheWriteTokens ?? 0, usage.inputTokens - reads);
    const writes1h = Math.min(usage.cacheWrite1hTokens ?? 0, writes);
    const fresh = usage.inputTokens - reads - writes;
    const writePrice = price.cacheWrite ?? price.input;
    return (
      (fresh * price.input +
        reads * (price.cachedInput ?? price.input) +
        (writes - writes1h) * writePrice +
        writes1h * (price.cacheWrite1h ?? writePrice) +
        usage.outputTokens * price.output) /
      1_000_000
    );
  }
}
