import type { TokenInfo } from './client.ts';

/**
 * Whether the signed-in token may do `scope` on `pipeline`, as the gateway decides it (docs/gateway.md,
 * "Authentication"). Unknown (a gateway without `GET /v1/token`): offered, and the gateway's refusal is shown.
 */
export function may(who: TokenInfo | undefined, scope: 'submit' | 'approve', pipeline: string): boolean {
  if (!who) return true;
  const granted = who.scopes.includes('admin') || who.scopes.includes(scope);
  return granted && (who.pipelines === undefined || who.pipelines.includes(pipeline));
}
