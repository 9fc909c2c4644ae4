import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { guardedLookup, type PushUrlPolicy } from './pushUrls.ts';

/** How long one webhook POST may take, answer included (the A2A spec recommends 10–30 s). */
export const DEFAULT_WEBHOOK_TIMEOUT_MS = 15_000;

export interface WebhookPostOptions {
  headers: Record<string, string>;
  timeoutMs?: number;
  /** Held to at connect time, on the address the host resolves to. */
  policy?: PushUrlPolicy;
  signal?: AbortSignal;
}

/** A webhook POST that did not end in a 2xx answer: `status` when the receiver answered at all. */
export class WebhookFailed extends Error {
  override readonly name = 'WebhookFailed';
  readonly status: number | undefined;

  constructor(message: string, status?: number, options?: { cause?: unknown }) {
    super(message, options);
    this.status = status;
  }
}

/**
 * POSTs a body to a webhook and resolves once it answered 2xx; otherwise fails with {@link WebhookFailed}, saying
 * why (the status, a refused connection, a timeout, an address the policy refuses). Redirects are not followed:
 * a receiver's 3xx could send the gateway anywhere, so it counts as a failure. The answer's body is read and
 * dropped.
 */
export function postWebhook(url: URL, body: string, options: WebhookPostOptions): Promise<void> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_WEBHOOK_TIMEOUT_MS;
  const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
  return new Promise<void>((resolve, reject) => {
    const req = send(url, {
      method: 'POST',
      headers: { ...options.headers, 'content-length': String(Buffer.byteLength(body)) },
      lookup: guardedLookup(options.policy),
      ...(options.signal ? { signal: options.signal } : {}),
    });
    // The whole exchange, not only a silence: a receiver that trickles bytes does not hold a delivery up.
    const timer = setTimeout(
      () => req.destroy(new WebhookFailed(`no answer within ${timeoutMs} ms`)),
      timeoutMs,
    );
    const settle = (error?: WebhookFailed) => {
      clearTimeout(timer);
      if (error) reject(error);
      else resolve();
    };
    req.on('error', (error) =>
      settle(
        error instanceof WebhookFailed
          ? error
          : new WebhookFailed(error.message, undefined, { cause: error }),
      ),
    );
    req.on('response', (res) => {
      res.resume();
      res.on('error', () => undefined);
      const status = res.statusCode ?? 0;
      if (status >= 200 && status < 300) settle();
      else
        settle(
          new WebhookFailed(`the receiver answered ${status} ${res.statusMessage ?? ''}`.trim(), status),
        );
    });
    req.end(body);
  });
}
