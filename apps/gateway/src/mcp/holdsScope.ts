import { authorize, type Principal, type Scope } from '../auth.ts';

/** Whether the principal's scopes grant `scope` (on some pipeline): what it is offered depends on it. */
export function holdsScope(who: Principal, scope: Scope): boolean {
  try {
    authorize(who, scope);
    return true;
  } catch {
    return false;
  }
}
