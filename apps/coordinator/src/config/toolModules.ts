import { stat } from 'node:fs/promises';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { errorMessage } from '@troupe/protocol';
import { type Tool, ToolError, ToolRegistry, withTimeout } from '@troupe/runtime';
import { suggestion } from './didYouMean.ts';

/** Stable reasons a tool module named under `tools.modules` cannot be used. */
export type ToolModuleErrorCode =
  /** No file at the path. */
  | 'tool_module_not_found'
  /** It does not parse, a package it imports cannot be found, or its code threw while it loaded. */
  | 'tool_module_failed'
  /** It loaded but exports no tool. */
  | 'tool_module_empty'
  /** The same file is named twice. */
  | 'tool_module_repeated'
  /** An export that should be a tool is not a usable one. */
  | 'invalid_tool_export'
  /** A tool's name is a built-in tool's, or another export's. */
  | 'tool_name_taken';

/** A tool module that cannot be used, with what to do about it; `module` is its path as the pipeline file writes it. */
export class ToolModuleError extends Error {
  override readonly name = 'ToolModuleError';
  readonly code: ToolModuleErrorCode;
  readonly module: string;

  constructor(code: ToolModuleErrorCode, module: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.module = module;
  }
}

/** How long a module may take to load: its code runs once, at start, and should only define its tools. */
const MODULE_LOAD_TIMEOUT_MS = 30_000;

/** Imports a module given its absolute path, and gives its namespace. */
export type ImportModule = (file: string) => Promise<Record<string, unknown>>;

/** Node's own `import()`: JavaScript only, since Node 20 cannot strip types. `troupe` passes one that loads TypeScript. */
export const importWithNode: ImportModule = (file) => import(pathToFileURL(file).href);

/** A tool a module exports, and where it came from. */
export interface ModuleTool {
  tool: Tool;
  /** The module's path as the pipeline file writes it. */
  module: string;
  /** Which export: `export default`, `export default[1]`, `export wordCount`. */
  export: string;
}

export interface ToolModules {
  tools: ModuleTool[];
  /** What is wrong, each with the index of its module in the list. */
  problems: { index: number; error: ToolModuleError }[];
}

export interface ToolModuleOptions {
  /** Module paths are relative to this directory (the pipeline file's). */
  baseDir: string;
  importModule?: ImportModule;
  /** Names a module's tool may not take: the tools the host has already. */
  taken: readonly string[];
}

/**
 * Loads tool modules and checks what they export: every problem is reported, each naming the module (and the file
 * and line inside it where the loader says), so a bad module stops a start rather than a task.
 */
export async function loadToolModules(
  modules: readonly string[],
  options: ToolModuleOptions,
): Promise<ToolModules> {
  const importModule = options.importModule ?? importWithNode;
  const tools: ModuleTool[] = [];
  const problems: ToolModules['problems'] = [];
  const seen = new Map<string, number>();
  for (const [index, written] of modules.entries()) {
    const file = resolve(options.baseDir, written);
    const earlier = seen.get(file);
    if (earlier !== undefined) {
      const why = `${written} is named twice (also tools.modules[${earlier}]); name each module once`;
      problems.push({ index, error: new ToolModuleError('tool_module_repeated', written, why) });
      continue;
    }
    seen.set(file, index);
    const loaded = await loadToolModule(written, file, importModule);
    for (const error of loaded.errors) problems.push({ index, error });
    for (const found of loaded.tools) {
      const clash = clashOf(found, tools, options.taken);
      if (clash) problems.push({ index, error: clash });
      else tools.push(found);
    }
  }
  return { tools, problems };
}

/** One module's tools, or why it has none usable. */
async function loadToolModule(
  written: string,
  file: string,
  importModule: ImportModule,
): Promise<{ tools: ModuleTool[]; errors: ToolModuleError[] }> {
  const missing = await notAFile(file);
  if (missing) {
    const why = `${written}: ${missing} (looked for ${file})`;
    return { tools: [], errors: [new ToolModuleError('tool_module_not_found', written, why)] };
  }
  let namespace: Record<string, unknown> | 'timeout';
  try {
    // A ref'd timer: an import that never settles would otherwise end the process with code 13 and no word.
    namespace = await withTimeout(importModule(file), MODULE_LOAD_TIMEOUT_MS);
  } catch (error) {
    return { tools: [], errors: [loadFailure(written, file, error)] };
  }
  if (namespace === 'timeout') {
    const why =
      `${written}: did not finish loading in ${MODULE_LOAD_TIMEOUT_MS / 1000} s: an await at its top level (or in a ` +
      'module it imports) never settled; connect to what a tool needs when the tool runs, not as the module loads';
    return { tools: [], errors: [new ToolModuleError('tool_module_failed', written, why)] };
  }
  const exported = exportsOf(namespace);
  const tools: ModuleTool[] = [];
  const errors: ToolModuleError[] = [];
  // The same object as default and named export is one tool.
  const taken = new Set<unknown>();
  for (const [label, value] of candidates(exported)) {
    const problem = checked(value);
    if (problem !== undefined) {
      const why = `${written}: ${label} is not a usable tool: ${problem}`;
      errors.push(new ToolModuleError('invalid_tool_export', written, why));
    } else if (!taken.has(value)) {
      taken.add(value);
      tools.push({ tool: asTool(value as Record<string, unknown>), module: written, export: label });
    }
  }
  if (tools.length === 0 && errors.length === 0) {
    const names = Object.keys(exported);
    const why =
      `${written} exports no tool: export one (or an array of them) as its default export, or as named exports; ` +
      `it exports ${names.length > 0 ? names.join(', ') : 'nothing'}`;
    errors.push(new ToolModuleError('tool_module_empty', written, why));
  }
  return { tools, errors };
}

async function notAFile(file: string): Promise<string | undefined> {
  try {
    return (await stat(file)).isFile() ? undefined : 'not a file';
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    return code === 'ENOENT' || code === 'ENOTDIR' ? 'no such file' : errorMessage(error);
  }
}

/**
 * The module's exports. A TypeScript file that is not an ES module (no `"type": "module"` in its package.json)
 * is compiled to CommonJS: Node then shows its exports object as the default export, marked `__esModule`.
 */
function exportsOf(namespace: Record<string, unknown>): Record<string, unknown> {
  const fallback = namespace.default;
  return isObject(fallback) && fallback.__esModule === true ? fallback : namespace;
}

/**
 * The exports taken as tools: the default export (a tool or an array of tools), and each named export that is an
 * object with a `run` or an `input` (or an array holding one); other named exports (helpers, constants) are left.
 */
function candidates(exported: Record<string, unknown>): [string, unknown][] {
  const found: [string, unknown][] = [];
  for (const [key, value] of Object.entries(exported)) {
    const label = key === 'default' ? 'export default' : `export ${key}`;
    if (Array.isArray(value)) {
      if (key === 'default' || value.some(toolLike)) {
        for (const [i, item] of value.entries()) found.push([`${label}[${i}]`, item]);
      }
    } else if (key === 'default' || toolLike(value)) found.push([label, value]);
  }
  return found;
}

const toolLike = (value: unknown): boolean => isObject(value) && ('run' in value || 'input' in value);

/** {@link toolProblem}, where an export whose properties throw when read is a problem too, not a crash. */
function checked(value: unknown): string | undefined {
  try {
    return toolProblem(value);
  } catch (error) {
    return `reading it threw: ${errorMessage(error)}`;
  }
}

/**
 * The tool as the runtime runs it, its own properties read once. `run` always gives a promise: a plain JavaScript
 * module may return its text straight away.
 */
function asTool(spec: Record<string, unknown>): Tool {
  const { name, description, input, run, timeoutMs, rerunnable, readOnly } = spec as unknown as Tool;
  return {
    name,
    description,
    input,
    run: async (args, ctx) => run.call(spec, args, ctx),
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
    ...(rerunnable === undefined ? {} : { rerunnable }),
    ...(readOnly === undefined ? {} : { readOnly }),
  };
}

// The longest delay Node's setTimeout keeps: a longer one fires after 1 ms, which would time every call out.
const MAX_TIMER_MS = 2_147_483_647;
const TOOL_KEYS = ['name', 'description', 'input', 'run', 'timeoutMs', 'rerunnable', 'readOnly'];
// A module's own tools have no dot: `<server>.<tool>` names are MCP servers' tools.
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/** What is wrong with an export as a tool, checked by shape alone: it may come from another copy of our packages. */
function toolProblem(value: unknown): string | undefined {
  if (!isObject(value)) {
    return `it is ${kindOf(value)}; a tool is an object with name, description, input and run (defineTool makes one)`;
  }
  const problems: string[] = [];
  const { name, description, input, run, timeoutMs, rerunnable, readOnly } = value;
  if (typeof name !== 'string' || !TOOL_NAME.test(name)) {
    problems.push(`name must be 1 to 64 letters, digits, _ or - (it is ${shown(name)})`);
  }
  if (typeof description !== 'string' || description.trim() === '') {
    problems.push('description must be a text that tells the model what the tool does');
  }
  const schemaProblem = inputProblem(input);
  if (schemaProblem) problems.push(schemaProblem);
  if (typeof run !== 'function') problems.push(`run must be a function (it is ${kindOf(run)})`);
  if (timeoutMs !== undefined && !(Number.isInteger(timeoutMs) && (timeoutMs as number) > 0)) {
    problems.push(`timeoutMs must be a whole number of milliseconds above 0 (it is ${shown(timeoutMs)})`);
  } else if (typeof timeoutMs === 'number' && timeoutMs > MAX_TIMER_MS) {
    problems.push(
      `timeoutMs must be at most ${MAX_TIMER_MS} (about 24 days; Node ends a longer timer at once) (it is ${timeoutMs})`,
    );
  }
  if (rerunnable !== undefined && typeof rerunnable !== 'boolean') {
    problems.push(`rerunnable must be true or false (it is ${shown(rerunnable)})`);
  }
  if (readOnly !== undefined && typeof readOnly !== 'boolean') {
    problems.push(`readOnly must be true or false (it is ${shown(readOnly)})`);
  }
  for (const key of Object.keys(value)) {
    if (!TOOL_KEYS.includes(key)) {
      problems.push(`unknown key "${key}"${suggestion(key, TOOL_KEYS)}; a tool has ${TOOL_KEYS.join(', ')}`);
    }
  }
  if (problems.length > 0) return problems.join('; ');
  // The registry's own rules (an object schema with a JSON Schema form) are checked now, not at the first task.
  try {
    new ToolRegistry().register(value as unknown as Tool);
  } catch (error) {
    if (error instanceof ToolError) return error.message;
    throw error;
  }
  return undefined;
}

/** Why `input` is not a zod 4 object schema; zod 4 schemas of any copy carry `_zod.def`, which is all we read. */
function inputProblem(input: unknown): string | undefined {
  if (!isObject(input)) return `input must be a zod schema, z.object({ … }) (it is ${kindOf(input)})`;
  const zod = input._zod;
  if (!isObject(zod) || !isObject(zod.def)) {
    return '_def' in input
      ? 'input is a zod 3 schema; tools need zod 4 (npm install zod@4)'
      : 'input must be a zod 4 schema, z.object({ … })';
  }
  if (zod.def.type !== 'object')
    return `input must be a z.object({ … }), since models send an object (it is z.${String(zod.def.type)}())`;
  return undefined;
}

function clashOf(
  found: ModuleTool,
  tools: readonly ModuleTool[],
  taken: readonly string[],
): ToolModuleError | undefined {
  const { name } = found.tool;
  const where = `${found.export} of ${found.module}`;
  if (taken.includes(name)) {
    const why = `tool "${name}" (${where}) has the name of a built-in tool; give it another name`;
    return new ToolModuleError('tool_name_taken', found.module, why);
  }
  const other = tools.find((t) => t.tool.name === name);
  if (!other) return undefined;
  const why = `tool "${name}" (${where}) has the name of ${other.export} of ${other.module}; tool names must be unique`;
  return new ToolModuleError('tool_name_taken', found.module, why);
}

/** Why the module did not load, with the file and line the loader names where it names one. */
function loadFailure(written: string, file: string, error: unknown): ToolModuleError {
  const fail = (why: string) =>
    new ToolModuleError('tool_module_failed', written, `${written}: ${why}`, { cause: error });
  const compile = compileError(error);
  if (compile) return fail(`does not parse: ${written}:${compile.line}:${compile.column}: ${compile.text}`);
  const code = isObject(error) ? error.code : undefined;
  if (code === 'ERR_UNKNOWN_FILE_EXTENSION') {
    return fail(
      'Node cannot load TypeScript by itself; `troupe` loads it with tsx, a program of your own must pass ' +
        'importModule (docs/tools.md) or name the compiled .js',
    );
  }
  const message = firstLine(errorMessage(error));
  if (code === 'ERR_MODULE_NOT_FOUND' || code === 'MODULE_NOT_FOUND') {
    return fail(
      `cannot load what it imports: ${message}; install the packages it imports where it finds them (npm install beside it)`,
    );
  }
  const at = locationIn(error, file);
  const where = at ? ` at ${written}:${at}` : '';
  const kind = error instanceof SyntaxError ? 'does not parse' : 'threw while loading';
  return fail(`${kind}${where}: ${error instanceof Error ? `${error.name}: ` : ''}${message}`);
}

/**
 * The first error of an esbuild transform (how tsx reports a TypeScript file that does not parse): its `errors`
 * where they survived, else its message (`Transform failed with 1 error:\n<file>:3:2: ERROR: Expected …`), which is
 * all that reaches us when tsx compiles the module on its loader thread.
 */
function compileError(error: unknown): { line: number; column: number; text: string } | undefined {
  if (!isObject(error)) return undefined;
  const first: unknown = Array.isArray(error.errors) ? error.errors[0] : undefined;
  if (isObject(first) && typeof first.text === 'string' && isObject(first.location)) {
    const { line, column } = first.location;
    // esbuild counts columns from 0; editors and Node from 1.
    if (typeof line === 'number' && typeof column === 'number')
      return { line, column: column + 1, text: first.text };
  }
  const message = typeof error.message === 'string' ? error.message : '';
  const found = /^Transform failed with \d+ errors?:\n.*?:(\d+):(\d+): ERROR: (.*)$/m.exec(message);
  if (!found) return undefined;
  return { line: Number(found[1]), column: Number(found[2]) + 1, text: found[3] ?? '' };
}

/** `line:column` in `file` where the error was raised: a stack frame in it, or Node's header of a syntax error. */
function locationIn(error: unknown, file: string): string | undefined {
  const stack = error instanceof Error ? (error.stack ?? '') : '';
  for (const name of [file, pathToFileURL(file).href]) {
    const at = stack.indexOf(name);
    // A loader may add a query to the module's URL (tsx adds a namespace).
    const found = at < 0 ? null : /^(?:\?[^:\s)]*)?:(\d+)(?::(\d+))?/.exec(stack.slice(at + name.length));
    if (found) return found[2] === undefined ? found[1] : `${found[1]}:${found[2]}`;
  }
  return undefined;
}

const firstLine = (text: string): string => text.split('\n')[0] ?? text;

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'object') return 'an object';
  return typeof value === 'undefined' ? 'missing' : `a ${typeof value}`;
}

function shown(value: unknown): string {
  if (value === undefined) return 'missing';
  return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean'
    ? JSON.stringify(value)
    : kindOf(value);
}
