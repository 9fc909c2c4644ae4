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
