import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';
import { PushError } from './pushError.ts';

/**
 * Where the gateway may send webhooks. A webhook URL is chosen by the caller, and the gateway POSTs to it from inside
 * the deployment's network: without a policy, any token holder could make the gateway reach an internal service
 * (server-side request forgery). So by default private, loopback and link-local addresses are refused, both when a
 * config is made (a literal address) and at each delivery (the address a name resolves to, so a name that later
 * resolves inward is refused too).
 */
export interface PushUrlPolicy {
  /**
   * Hosts webhooks may go to (`hooks.example.com`, or `*.example.com` for its subdomains); any public host when
   * absent or empty.
   */
  allowHosts?: readonly string[];
  /** Allow private, loopback and link-local addresses (a gateway and its receivers on one private network). */
  allowPrivate?: boolean;
}

/** The longest webhook URL kept. */
const MAX_URL_LENGTH = 2_048;

/** Addresses a webhook may not reach unless the policy allows private ones (RFC 1918, 6598, 4193, loopback…). */
const PRIVATE = new BlockList();
for (const [net, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  PRIVATE.addSubnet(net, prefix, 'ipv4');
}
for (const [net, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  PRIVATE.addSubnet(net, prefix, 'ipv6');
}

/** Whether an IP address is one a webhook may not reach by default; an IPv4 address mapped into IPv6 counts as IPv4. */
export function isPrivateAddress(address: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  if (mapped) return PRIVATE.check(mapped, 'ipv4');
  const family = isIP(address);
  if (family === 0) return false;
  return PRIVATE.check(address, family === 4 ? 'ipv4' : 'ipv6');
}

/**
 * The webhook URL, parsed, if the policy lets webhooks go there; else a `url_refused` (or `invalid_config`) error
 * that says why. Only http and https, no credentials in the URL, and a host the policy allows.
 */
export function checkPushUrl(raw: string, policy: PushUrlPolicy = {}): URL {
  if (raw.length === 0) throw new PushError('invalid_config', 'the push config has no url');
  if (raw.length > MAX_URL_LENGTH) {
    throw new PushError('invalid_config', `the webhook url is longer than ${MAX_URL_LENGTH} characters`);
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new PushError('invalid_config', `the webhook url ${JSON.stringify(raw)} is not an absolute URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new PushError(
      'url_refused',
      `webhook url ${url.protocol}// refused: only http and https are sent to`,
    );
  }
  if (url.username || url.password) {
    throw new PushError(
      'url_refused',
      "webhook url refused: it carries credentials; put them in the config's authentication (or token) instead",
    );
  }
  const host = hostOf(url);
  const allowed = policy.allowHosts ?? [];
  if (allowed.length > 0 && !allowed.some((pattern) => hostMatches(host, pattern))) {
    throw new PushError(
      'url_refused',
      `webhook host ${host} refused: this gateway sends webhooks only to ${allowed.join(', ')}`,
    );
  }
  if (
    !policy.allowPrivate &&
    (host === 'localhost' || host.endsWith('.localhost') || isPrivateAddress(host))
  ) {
    throw new PushError(
      'url_refused',
      `webhook host ${host} refused: it is a private, loopback or link-local address, which this gateway does not send to`,
    );
  }
  return url;
}

/**
 * A DNS lookup for the webhook's HTTP request that refuses an address the policy does not allow: checked on the
 * address actually connected to, so a name made to resolve inward after the config was accepted is refused too.
 */
export function guardedLookup(policy: PushUrlPolicy = {}): LookupFunction {
  return (hostname, options, callback) => {
    dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
      if (error) return callback(error, '', 0);
      const usable = policy.allowPrivate
        ? addresses
        : addresses.filter((entry) => !isPrivateAddress(entry.address));
      const first = usable[0];
      if (!first) {
        return callback(new PrivateAddressRefused(hostname), '', 0);
      }
      if ((options as { all?: boolean }).all) return (callback as AllCallback)(null, usable);
      return callback(null, first.address, first.family);
    });
  };
}

/** A webhook host that resolves only inward, as a lookup's error: with an errno-style code, as Node's lookups fail. */
class PrivateAddressRefused extends Error {
  override readonly name = 'PrivateAddressRefused';
  readonly code = 'EPUSHREFUSED';

  constructor(hostname: string) {
    super(`webhook host ${hostname} resolves only to private addresses, which this gateway does not send to`);
  }
}

type AllCallback = (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void;

/** The URL's host without IPv6 brackets, lower-cased. */
function hostOf(url: URL): string {
  return url.hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase();
}

function hostMatches(host: string, pattern: string): boolean {
  const wanted = pattern.toLowerCase();
  if (wanted.startsWith('*.')) return host.endsWith(wanted.slice(1));
  return host === wanted;
}
