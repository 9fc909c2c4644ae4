import type { TokenScope } from '@troupe/protocol';
import { authorize, type Principal } from '../auth.ts';

/** Whether the principal's scopes grant `scope` (on some pipeline): what it is offered depends on it. */
export function holdsScope(who: Principal, scope: TokenScope): boolean {
  try {
    authorize(who, scope);
    return true;
  } catch {
    return false;
  }
}
