import { useState } from 'preact/hooks';
import { refusalText, refusedForToken } from './refusal.ts';

/** One control's request to the gateway: in flight or not, and the refusal of the last one, shown beside it. */
export interface Request {
  /** A request is in flight: the control's buttons are disabled until it answers. */
  busy: boolean;
  refusal: string | undefined;
  /** Runs `call` unless one is in flight; its answer, or undefined when it was refused (the refusal is kept). */
  run<T>(what: string, call: () => Promise<T>): Promise<T | undefined>;
  clear(): void;
}

/** A {@link Request}; `onRefusedForToken` is told of a 401 or 403, so the page reads what the token may do again. */
export function useRequest(onRefusedForToken?: () => void): Request {
  const [busy, setBusy] = useState(false);
  const [refusal, setRefusal] = useState<string | undefined>(undefined);
  return {
    busy,
    refusal,
    clear: () => setRefusal(undefined),
    async run(what, call) {
      if (busy) return undefined;
      setBusy(true);
      setRefusal(undefined);
      try {
        return await call();
      } catch (error) {
        setRefusal(refusalText(what, error));
        if (refusedForToken(error)) onRefusedForToken?.();
        return undefined;
      } finally {
        setBusy(false);
      }
    },
  };
}
