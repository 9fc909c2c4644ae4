import { z } from 'zod';
import { evaluatePolicy, type PermissionRule } from './policy.ts';
import { defineTool } from './tool.ts';
import { ToolError } from './toolError.ts';

const maxRedirects = 5;
const defaultMaxBytes = 256 * 1024;
const shownHeaders = ['content-type', 'content-length', 'location', 'last-modified', 'etag', 'retry-after'];
// Credentials meant for one host must not follow a redirect to another.
const crossOriginDropped = ['authorization', 'cookie', 'proxy-authorization'];

const HttpFetchInput = z.object({
  url: z.string().min(1).describe('Absolute http:// or https:// URL'),
  method: z.enum(['GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD']).default('GET'),
  headers: z.record(z.string(), z.string()).optional().describe('Request headers'),
  body: z.string().optional().describe('Request body; not allowed with GET or HEAD'),
  maxBytes: z
    .number()
    .int()
    .min(1)
    .max(10 * 1024 * 1024)
    .default(defaultMaxBytes)
    .describe(`Read at most this many bytes of the response body; ${defaultMaxBytes} by default`),
});

type HttpFetchInput = z.infer<typeof HttpFetchInput>;

interface Hop {
  url: URL;
  method: HttpFetchInput['method'];
  headers: Record<string, string>;
  body: string | undefined;
}

/** `http_fetch`: one HTTP request, following up to five redirects whose hosts the policy also allows. */
export const httpFetchTool = defineTool({
  name: 'http_fetch',
  description: `Make an HTTP(S) request and return "HTTP <status> <statusText>", selected response headers and the body as text (cut at maxBytes). Follows up to ${maxRedirects} redirects, only to hosts this agent may reach.`,
  input: HttpFetchInput,
  async run({ url, method, headers, body, maxBytes }, ctx) {
    if (body !== undefined && (method === 'GET' || method === 'HEAD')) {
      throw new ToolError(
        'invalid_arguments',
        `http_fetch: a ${method} request cannot have a body; use POST or PUT`,
      );
    }
    let hop: Hop = { url: parseHttpUrl(url, 'url'), method, headers: headers ?? {}, body };
    for (let redirects = 0; ; redirects += 1) {
      const response = await send(hop, ctx.signal);
      const location = response.headers.get('location');
      if (!isRedirect(response.status) || location === null)
        return formatResponse(response, hop.method, maxBytes);
      await response.body?.cancel();
      if (redirects === maxRedirects) {
        throw new ToolError(
          'failed',
          `http_fetch: stopped after ${maxRedirects} redirects, at ${hop.url.href}`,
        );
      }
      const next = parseHttpUrl(new URL(location, hop.url).href, 'redirect location');
      checkRedirectHost(hop.url, next, ctx.rule);
      hop = redirected(hop, next, response.status);
    }
  },
});

function parseHttpUrl(raw: string, what: string): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new ToolError('invalid_arguments', `http_fetch: ${what} ${raw} is not an absolute URL`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ToolError(
      'invalid_arguments',
      `http_fetch refused: ${what} ${raw} uses ${url.protocol.slice(0, -1)}; only http and https are allowed`,
    );
  }
  return url;
}

async function send(hop: Hop, signal: AbortSignal): Promise<Response> {
  try {
    return await fetch(hop.url, {
      method: hop.method,
      headers: hop.headers,
      ...(hop.body === undefined ? {} : { body: hop.body }),
      redirect: 'manual',
      signal,
    });
  } catch (cause) {
    if (signal.aborted) throw signal.reason;
    throw new ToolError(
      'failed',
      `http_fetch: ${hop.method} ${hop.url.href} failed: ${describeCause(cause)}`,
      {
        cause,
      },
    );
  }
}

function isRedirect(status: number): boolean {
  return status === 301 || status === 302 || status === 303 || status === 307 || status === 308;
}

/**
 * The executor checked the first URL against the policy; each redirect target is checked here against the hosts of
 * the rule that allowed the call, with the policy's own matching. Without such hosts only same-host redirects pass.
 */
function checkRedirectHost(from: URL, to: URL, rule: PermissionRule | undefined): void {
  const hosts = rule?.hosts;
  if (hosts === undefined || hosts.length === 0) {
    if (sameHost(from, to)) return;
    throw new ToolError(
      'denied',
      `http_fetch refused a redirect from ${from.host} to ${to.host}: this agent's policy names no hosts, so only redirects within ${from.host} are followed`,
    );
  }
  const allowOnly: PermissionRule = { tool: 'http_fetch', decision: 'allow', hosts };
  const verdict = evaluatePolicy({ tools: ['http_fetch'], rules: [allowOnly] }, 'http_fetch', {
    url: to.href,
  });
  if (verdict.decision !== 'allow') {
    throw new ToolError(
      'denied',
      `http_fetch refused a redirect to ${to.href}: host ${to.hostname} is not among the allowed hosts ${hosts.join(', ')}`,
    );
  }
}

function sameHost(a: URL, b: URL): boolean {
  return a.hostname.toLowerCase() === b.hostname.toLowerCase();
}

// As browsers do: 303, and 301/302 after a POST, become a GET without a body; 307/308 repeat the request as it was.
function redirected(hop: Hop, next: URL, status: number): Hop {
  const toGet = status === 303 || ((status === 301 || status === 302) && hop.method === 'POST');
  const headers = { ...hop.headers };
  for (const name of Object.keys(headers)) {
    const lower = name.toLowerCase();
    if (next.origin !== hop.url.origin && crossOriginDropped.includes(lower)) delete headers[name];
    if (toGet && (lower === 'content-type' || lower === 'content-length')) delete headers[name];
  }
  return {
    url: next,
    method: toGet && hop.method !== 'HEAD' ? 'GET' : hop.method,
    headers,
    body: toGet ? undefined : hop.body,
  };
}

async function formatResponse(response: Response, method: string, maxBytes: number): Promise<string> {
  const status = `HTTP ${response.status} ${response.statusText}`.trimEnd();
  const headers = shownHeaders.flatMap((name) => {
    const value = response.headers.get(name);
    return value === null ? [] : [`${name}: ${value}`];
  });
  const body = method === 'HEAD' ? '' : await readCapped(response, maxBytes);
  return `${[status, ...headers].join('\n')}\n\n${body}`;
}

async function readCapped(response: Response, maxBytes: number): Promise<string> {
  if (!response.body) return '';
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  let read = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return text + decoder.decode();
    const room = maxBytes - read;
    if (value.length > room) {
      // Stream mode holds back a character the cap split.
      text += decoder.decode(value.subarray(0, room), { stream: true });
      await reader.cancel();
      return `${text}\n…[body truncated at ${maxBytes} bytes]`;
    }
    text += decoder.decode(value, { stream: true });
    read += value.length;
  }
}

function describeCause(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  // undici reports "fetch failed" and puts the useful part (ECONNREFUSED, DNS) in `cause`.
  const inner = error.cause instanceof Error ? `: ${error.cause.message}` : '';
  return `${error.message}${inner}`;
}
