import { type Gateway, type GatewayOptions, hashToken, startGateway, TokenStore } from '@troupe/gateway';
import { createLogger, type NatsBus } from '@troupe/runtime';

/** A gateway on `bus`, on a free port, that takes `token` as an admin's; `options` add to or change its settings. */
export function startAdminGateway(
  bus: NatsBus,
  token: string,
  options: Partial<GatewayOptions> = {},
): Promise<Gateway> {
  return startGateway({
    bus,
    logger: createLogger({ level: 'silent' }),
    tokens: new TokenStore([{ name: 'ops', sha256: hashToken(token), scopes: ['admin'] }]),
    port: 0,
    ...options,
  });
}

/** A gateway's HTTP API as a test calls it: a JSON body in, the status and the parsed JSON body (if any) out. */
export async function callGateway(
  gateway: Gateway,
  token: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: ReturnType<typeof JSON.parse> }> {
  const response = await fetch(`${gateway.url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : undefined };
}
