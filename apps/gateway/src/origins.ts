import { isIP } from 'node:net';

/** Which browser pages may open a WebSocket to the gateway. */
export interface BrowserOrigins {
  /** Origins allowed by name (`--cors-origin`); `*` allows any. */
  allowed: readonly string[];
  /** The URL the gateway is reached at (`--public-url`): its origin is allowed, and its host trusted. */
  publicUrl?: string | undefined;
  /** The flags a refusal points to, when the gateway was started with others than `troupe gateway`'s. */
  flags?: { publicUrl: string; corsOrigin: string } | undefined;
}

const LOOPBACK_NAMES = new Set(['localhost', '127.0.0.1', '::1']);

/** The name in a Host header, without its port or an IPv6 literal's brackets. */
export function hostnameOf(host: string): string {
  if (host.startsWith('[')) return host.slice(1, host.indexOf(']'));
  return host.split(':')[0] ?? '';
}

/** Whether a Host header names this machine's loopback (any port). */
export function isLoopback(host: string | undefined): boolean {
  return host !== undefined && LOOPBACK_NAMES.has(hostnameOf(host).toLowerCase());
}

/**
 * Why a browser page may not open a WebSocket here, or undefined when it may. Browsers apply no CORS to WebSockets,
 * so the gateway checks the page's `Origin` itself: a request without one is not a browser's; an allowed origin (or
 * the public URL's) may; a page of the gateway's own origin may only when that origin's host is one no one else can
 * claim — a loopback name, an IP address, or the public URL's host. A page that rebinds a DNS name of its own to the
 * gateway's address sends its own name as both Origin and Host, which is none of these.
 */
export function webSocketRefusal(
  origin: string | undefined,
  host: string | undefined,
  config: BrowserOrigins,
): string | undefined {
  if (!origin) return undefined;
  if (config.allowed.includes('*') || config.allowed.includes(origin)) return undefined;
  const publicUrl = config.publicUrl ? new URL(config.publicUrl) : undefined;
  if (publicUrl && publicUrl.origin === origin) return undefined;
  let page: URL;
  try {
    page = new URL(origin);
  } catch {
    return `a WebSocket from origin ${origin} is not allowed: not an origin`;
  }
  const flags = config.flags ?? { publicUrl: '--public-url', corsOrigin: '--cors-origin' };
  if (host === undefined || page.host !== host) {
    return `a WebSocket from ${origin} is not allowed (allow it with ${flags.corsOrigin})`;
  }
  const name = hostnameOf(host).toLowerCase();
  const trusted = LOOPBACK_NAMES.has(name) || isIP(name) !== 0 || name === publicUrl?.hostname.toLowerCase();
  if (trusted) return undefined;
  return (
    `a WebSocket from ${origin} is not allowed: the gateway does not know the name ${name} ` +
    `(give it as ${flags.publicUrl}, or allow the origin with ${flags.corsOrigin})`
  );
}
