/** Stable codes of a large value that cannot be kept or read back. */
export type ValueStoreErrorCode =
  /** The object is gone: its bucket's retention removed it, or it was never written. */
  | 'value_missing'
  /** What was read is not what was written (its size or SHA-256 differ from the reference's). */
  | 'value_corrupt'
  /** NATS refused or did not answer the read or the write. */
  | 'value_unavailable';

/** A large value that cannot be kept in, or read back from, its object store; with a stable `code` and the `cause`. */
export class ValueStoreError extends Error {
  override readonly name = 'ValueStoreError';
  readonly code: ValueStoreErrorCode;

  constructor(code: ValueStoreErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  /** True when `error` is a ValueStoreError, and of `code` when one is given. */
  static is(error: unknown, code?: ValueStoreErrorCode): error is ValueStoreError {
    return error instanceof ValueStoreError && (code === undefined || error.code === code);
  }
}
