import { createHash } from 'node:crypto';
import { estimateTokens, type FakeInputUsage } from './fakeModelServer.ts';
import { withoutPromptCache } from './withoutPromptCache.ts';

/** Lifetimes a `cache_control` breakpoint may ask for; a bare `{ type: 'ephemeral' }` is 5 minutes. */
const TTL_MS = { '5m': 5 * 60_000, '1h': 60 * 60_000 } as const;
type Ttl = keyof typeof TTL_MS;

/** The most `cache_control` breakpoints one request may carry. */
export const MAX_BREAKPOINTS = 4;
/** How many blocks before a breakpoint (besides its own) a read looks back for a prefix cached earlier. */
export const LOOKBACK_BLOCKS = 20;
/** The shortest prefix Anthropic caches on most models (Sonnet 4.x, Opus 4 and 4.1); shorter ones are not stored. */
export const DEFAULT_MIN_CACHEABLE_TOKENS = 1024;

export interface AnthropicPromptCacheOptions {
  /** The time in ms; entries expire on it. */
  now: () => number;
  /** Prefixes shorter than this many tokens are neither written nor read. */
  minCacheableTokens: number;
}

/** One block of the prompt in Anthropic's order (tools, system, messages), with what the cache needs of it. */
interface PromptBlock {
  /** Where the block sits in the request, as the API names it in errors: `tools.0`, `messages.3.content.1`. */
  path: string;
  /** A digest of the prompt up to and including this block. */
  prefixKey: string;
  /** Tokens of the prompt up to and including this block. */
  prefixTokens: number;
  /** The block's `cache_control` lifetime, when it is a breakpoint. */
  breakpoint?: Ttl | { invalid: unknown };
}

interface Entry {
  ttlMs: number;
  expiresAt: number;
}

/**
 * The prompt cache of a fake Anthropic server: prefixes are written at `cache_control` breakpoints and read back
 * by later requests whose prefix is the same up to a breakpoint or up to one of the 20 blocks before it, the way
 * the Messages API does. An entry lives for its lifetime (5 minutes or 1 hour) from its last use; time is `now()`.
 * Tokens are estimated at about 4 characters each, like the rest of the fake's usage.
 */
export class AnthropicPromptCache {
  readonly #entries = new Map<string, Entry>();
  readonly #options: AnthropicPromptCacheOptions;

  constructor(options: AnthropicPromptCacheOptions) {
    this.#options = options;
  }

  /**
   * The API's 400 for a request whose breakpoints it refuses: more than four, a lifetime other than 5m or 1h, or a
   * 1-hour breakpoint after a 5-minute one. `message` is Anthropic's `error.message`.
   */
  refusal(body: AnthropicBody): string | undefined {
    const breakpoints = blocksOf(body).filter((block) => block.breakpoint !== undefined);
    if (breakpoints.length > MAX_BREAKPOINTS) {
      return `A maximum of ${MAX_BREAKPOINTS} blocks with cache_control may be provided. Found ${breakpoints.length}.`;
    }
    let sawShort = false;
    for (const { path, breakpoint } of breakpoints) {
      if (typeof breakpoint === 'object') {
        return `${path}.cache_control.ttl: Input should be '5m' or '1h'`;
      }
      if (breakpoint === '1h' && sawShort) {
        return (
          `${path}.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control ` +
          'block. Note that blocks are processed in the following order: `tools`, `system`, `messages`.'
        );
      }
      if (breakpoint === '5m') sawShort = true;
    }
    return undefined;
  }

  /**
   * Reads and writes the cache for a request the model answers, and says how its input is billed: `inputTokens` is
   * what was neither read nor written (Anthropic's `input_tokens`). A request without breakpoints neither reads nor
   * writes: all of it is input, as estimated for any request.
   */
  account(body: AnthropicBody): FakeInputUsage {
    const total = estimateTokens(withoutPromptCache(body));
    const blocks = blocksOf(body);
    const breakpoints = blocks.flatMap((block, index) =>
      typeof block.breakpoint === 'string' ? [{ index, ttl: block.breakpoint, block }] : [],
    );
    if (breakpoints.length === 0)
      return { inputTokens: total, cachedTokens: 0, cacheWriteTokens: 0, cacheWrite1hTokens: 0 };

    const now = this.#options.now();
    this.#dropExpired(now);
    const hit = this.#longestHit(
      blocks,
      breakpoints.map((b) => b.index),
    );
    const read = hit?.prefixTokens ?? 0;
    // A read refreshes what it used: the entry hit and the request's breakpoints already cached inside it.
    if (hit) this.#touch(hit.prefixKey, now);
    for (const { block } of breakpoints) if (block.prefixTokens <= read) this.#touch(block.prefixKey, now);

    // Billing follows the API's rule for mixed lifetimes: reads up to the hit, 1h writes up to the last 1-hour
    // breakpoint past it, 5m writes from there to the last breakpoint.
    const written = breakpoints.filter(
      ({ block }) => block.prefixTokens > read && block.prefixTokens >= this.#options.minCacheableTokens,
    );
    const lastLong = Math.max(
      read,
      ...written.filter((w) => w.ttl === '1h').map((w) => w.block.prefixTokens),
    );
    const last = Math.max(lastLong, ...written.map((w) => w.block.prefixTokens));
    for (const { ttl, block } of written) this.#write(block.prefixKey, TTL_MS[ttl], now);
    const cacheWrite1hTokens = lastLong - read;
    const cacheWriteTokens = last - read;
    return {
      inputTokens: Math.max(0, total - last),
      cachedTokens: read,
      cacheWriteTokens,
      cacheWrite1hTokens,
    };
  }

  /** The longest cached prefix found at a breakpoint or up to LOOKBACK_BLOCKS blocks before one. */
  #longestHit(blocks: PromptBlock[], breakpointIndexes: number[]): PromptBlock | undefined {
    let best: PromptBlock | undefined;
    for (const index of breakpointIndexes) {
      for (let at = index; at >= 0 && at >= index - LOOKBACK_BLOCKS; at--) {
        const block = blocks[at];
        if (block && this.#entries.has(block.prefixKey)) {
          if (!best || block.prefixTokens > best.prefixTokens) best = block;
          break;
        }
      }
    }
    return best;
  }

  #touch(key: string, now: number): void {
    const entry = this.#entries.get(key);
    if (entry) entry.expiresAt = Math.max(entry.expiresAt, now + entry.ttlMs);
  }

  #write(key: string, ttlMs: number, now: number): void {
    const entry = this.#entries.get(key);
    const ttl = Math.max(ttlMs, entry?.ttlMs ?? 0);
    this.#entries.set(key, { ttlMs: ttl, expiresAt: Math.max(entry?.expiresAt ?? 0, now + ttlMs) });
  }

  #dropExpired(now: number): void {
    for (const [key, entry] of this.#entries) if (entry.expiresAt <= now) this.#entries.delete(key);
  }
}

/** The parts of a Messages request body the cache reads; anything else passes through untouched. */
export interface AnthropicBody {
  model?: unknown;
  tools?: unknown;
  system?: unknown;
  messages?: unknown;
  cache_control?: unknown;
}

/**
 * The prompt's blocks in the order Anthropic processes them: each tool, each system text block (a string system
 * is one block), each content block of each message (a string content is one block). A request-level
 * `cache_control` (automatic caching) is a breakpoint on the last block.
 */
function blocksOf(body: AnthropicBody): PromptBlock[] {
  const parts: Part[] = [];
  for (const [i, tool] of arrayOf(body.tools).entries()) parts.push(part(`tools.${i}`, 'tool', tool));
  if (typeof body.system === 'string') parts.push(part('system', 'system', body.system));
  for (const [i, block] of arrayOf(body.system).entries()) parts.push(part(`system.${i}`, 'system', block));
  for (const [i, message] of arrayOf(body.messages).entries()) {
    const role = String((message as { role?: unknown })?.role);
    const content = (message as { content?: unknown })?.content;
    if (typeof content === 'string') parts.push(part(`messages.${i}.content`, role, content));
    for (const [j, block] of arrayOf(content).entries())
      parts.push(part(`messages.${i}.content.${j}`, role, block));
  }
  const automatic = body.cache_control;
  const lastPart = parts.at(-1);
  if (automatic !== undefined && lastPart && lastPart.marker === undefined) lastPart.marker = automatic;

  let key = createHash('sha256').update(String(body.model)).digest('hex');
  let chars = 0;
  return parts.map(({ path, role, json, marker }) => {
    key = createHash('sha256').update(key).update(`\n${role}:`).update(json).digest('hex');
    chars += json.length;
    const block: PromptBlock = { path, prefixKey: key, prefixTokens: Math.ceil(chars / 4) };
    if (marker !== undefined) block.breakpoint = ttlOf(marker);
    return block;
  });
}

/** A block as the cache sees it: its JSON without the marker (what the model reads), its role, its marker. */
interface Part {
  path: string;
  role: string;
  json: string;
  marker: unknown;
}

function part(path: string, role: string, block: unknown): Part {
  const marker = isRecord(block) ? block.cache_control : undefined;
  return { path, role, json: JSON.stringify(withoutPromptCache(block)), marker };
}

function ttlOf(marker: unknown): Ttl | { invalid: unknown } {
  const ttl = isRecord(marker) ? marker.ttl : undefined;
  if (ttl === undefined) return '5m';
  return ttl === '5m' || ttl === '1h' ? ttl : { invalid: ttl };
}

function arrayOf(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
