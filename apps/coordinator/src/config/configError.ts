/** One problem in a pipeline file, located by the path inside it and, where known, line and column. */
export interface ConfigIssue {
  path: string;
  message: string;
  line?: number;
  column?: number;
  /** A stable code where the problem has one (a tool module's: `tool_module_not_found`, …). */
  code?: string;
}

/** A pipeline file that cannot be used. The message lists every problem as `file:line:col path: what`. */
export class ConfigError extends Error {
  override readonly name = 'ConfigError';
  readonly code = 'invalid_config';
  readonly file: string;
  readonly issues: readonly ConfigIssue[];

  /** `headline`: what is wrong with the file as a whole (it is missing, it is empty), said instead of the list. */
  constructor(
    file: string,
    issues: readonly ConfigIssue[],
    options?: { cause?: unknown; headline?: string },
  ) {
    super(
      options?.headline ??
        `${file} is not a valid pipeline:\n${issues.map((i) => `  ${formatIssue(file, i)}`).join('\n')}`,
      options?.cause === undefined ? undefined : { cause: options.cause },
    );
    this.file = file;
    this.issues = issues;
  }
}

export function formatIssue(file: string, issue: ConfigIssue): string {
  const where = issue.line === undefined ? file : `${file}:${issue.line}:${issue.column ?? 1}`;
  return issue.path === '' ? `${where} ${issue.message}` : `${where} ${issue.path}: ${issue.message}`;
}
