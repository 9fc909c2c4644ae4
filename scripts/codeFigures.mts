// Prints figures of the TypeScript sources under apps/*/src and packages/*/src (tests, dist and the dashboard's build
// left out): the largest files, the longest functions, and counts of the casts and shortcuts issue 31 names.
//
//   npx tsx scripts/codeFigures.mts          the working tree as it is
//   npx tsx scripts/codeFigures.mts 3178a53  a revision, checked out into a temporary worktree removed afterwards
//
// Functions are found in a real syntax tree, not by pattern: TypeScript 7 ships no JavaScript compiler API, so the
// tree comes from oxc's parser (rolldown/parseAst), which vite already brings; comments and strings never count.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parseAst } from 'rolldown/parseAst';

const repo = join(import.meta.dirname, '..');
const TOP = 5;

/** A node of the ESTree-shaped tree oxc gives, as far as this script reads it. */
interface Node {
  type: string;
  start: number;
  end: number;
  [key: string]: unknown;
}

interface FunctionSpan {
  name: string;
  file: string;
  line: number;
  lines: number;
}

interface Counts {
  asNever: number;
  asUnknown: number;
  assignedErrors: number;
  openStringUnions: number;
}

const isNode = (value: unknown): value is Node =>
  typeof value === 'object' && value !== null && typeof (value as { type?: unknown }).type === 'string';

/** The source files measured, relative to `root`. */
function sourceFiles(root: string): string[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir)) {
      const path = join(dir, entry);
      if (statSync(path).isDirectory()) {
        if (!['dist', 'node_modules', 'test', '__tests__'].includes(entry)) walk(path);
      } else if (/\.tsx?$/.test(entry) && !/\.(test|spec)\.tsx?$|\.d\.ts$/.test(entry)) {
        files.push(relative(root, path));
      }
    }
  };
  for (const group of ['apps', 'packages']) {
    const top = join(root, group);
    if (!existsSync(top)) continue;
    for (const name of readdirSync(top)) {
      const src = join(top, name, 'src');
      if (existsSync(src)) walk(src);
    }
  }
  return files.sort();
}

/** Line numbers (from 1) of character offsets in `text`. */
function lineIndex(text: string): (offset: number) => number {
  const starts = [0];
  for (let i = text.indexOf('\n'); i !== -1; i = text.indexOf('\n', i + 1)) starts.push(i + 1);
  return (offset) => {
    let low = 0;
    let high = starts.length - 1;
    while (low < high) {
      const mid = (low + high + 1) >> 1;
      if ((starts[mid] ?? 0) <= offset) low = mid;
      else high = mid - 1;
    }
    return low + 1;
  };
}

const keyName = (key: unknown): string | undefined => {
  if (!isNode(key)) return undefined;
  if (key.type === 'Identifier' || key.type === 'PrivateIdentifier') return String(key.name);
  if (key.type === 'Literal') return String(key.value);
  return undefined;
};
const isFunction = (node: unknown): node is Node =>
  isNode(node) && (node.type === 'ArrowFunctionExpression' || node.type === 'FunctionExpression');

/** What one file holds: its functions with a name, its imports and the shortcuts counted. */
function measure(file: string, text: string) {
  const program = parseAst(text, { lang: file.endsWith('x') ? 'tsx' : 'ts' }, file) as unknown as Node;
  const lineOf = lineIndex(text);
  const functions: FunctionSpan[] = [];
  const imports: string[] = [];
  const importedNames: string[] = [];
  const counts: Counts = { asNever: 0, asUnknown: 0, assignedErrors: 0, openStringUnions: 0 };
  const add = (name: string, node: Node) => {
    const line = lineOf(node.start);
    functions.push({ name, file, line, lines: lineOf(node.end) - line + 1 });
  };

  const visit = (node: Node, className: string | undefined) => {
    switch (node.type) {
      case 'FunctionDeclaration': {
        const name = keyName(node.id);
        if (name) add(name, node);
        break;
      }
      case 'MethodDefinition':
      case 'TSAbstractMethodDefinition': {
        const name = keyName(node.key) ?? '[computed]';
        if (isNode(node.value) && node.value.body) add(className ? `${className}.${name}` : name, node);
        break;
      }
      case 'VariableDeclarator': {
        const name = keyName(node.id);
        if (name && isFunction(node.init)) add(name, node.init);
        break;
      }
      case 'Property':
      case 'PropertyDefinition': {
        const name = keyName(node.key);
        if (name && isFunction(node.value)) add(className ? `${className}.${name}` : name, node.value);
        break;
      }
      case 'AssignmentExpression': {
        const target = node.left;
        const name =
          isNode(target) && target.type === 'MemberExpression' ? keyName(target.property) : keyName(target);
        if (name && isFunction(node.right)) add(name, node.right);
        break;
      }
      case 'TSAsExpression': {
        const type = (node.typeAnnotation as Node | undefined)?.type;
        if (type === 'TSNeverKeyword') counts.asNever++;
        if (type === 'TSUnknownKeyword') counts.asUnknown++;
        break;
      }
      case 'CallExpression': {
        const callee = node.callee as Node;
        const first = (node.arguments as Node[])[0];
        if (
          callee.type === 'MemberExpression' &&
          keyName(callee.object) === 'Object' &&
          keyName(callee.property) === 'assign' &&
          first?.type === 'NewExpression' &&
          keyName(first.callee) === 'Error'
        )
          counts.assignedErrors++;
        break;
      }
      case 'TSIntersectionType': {
        const types = node.types as Node[];
        const open = types.some((t) => t.type === 'TSStringKeyword');
        const empty = types.some((t) => t.type === 'TSTypeLiteral' && (t.members as unknown[]).length === 0);
        if (types.length === 2 && open && empty) counts.openStringUnions++;
        break;
      }
      case 'ImportDeclaration':
      case 'ExportNamedDeclaration':
      case 'ExportAllDeclaration': {
        const source = node.source;
        if (isNode(source)) imports.push(String(source.value));
        for (const specifier of (node.specifiers as Node[] | undefined) ?? []) {
          const imported = keyName(specifier.imported) ?? keyName(specifier.local);
          if (node.type === 'ImportDeclaration' && imported) importedNames.push(imported);
        }
        break;
      }
      case 'ImportExpression': {
        const source = node.source;
        if (isNode(source) && source.type === 'Literal') imports.push(String(source.value));
        break;
      }
    }
    const inClass =
      node.type === 'ClassDeclaration' || node.type === 'ClassExpression'
        ? (keyName(node.id) ?? '(class)')
        : className;
    for (const [key, value] of Object.entries(node)) {
      if (key === 'type' || key === 'start' || key === 'end') continue;
      if (Array.isArray(value)) {
        for (const item of value) if (isNode(item)) visit(item, inClass);
      } else if (isNode(value)) visit(value, inClass);
    }
  };
  visit(program, undefined);
  return { functions, imports, importedNames, counts };
}

function figures(root: string, label: string): string {
  const files = sourceFiles(root);
  const sizes: { file: string; lines: number }[] = [];
  const functions: FunctionSpan[] = [];
  const totals: Counts = { asNever: 0, asUnknown: 0, assignedErrors: 0, openStringUnions: 0 };
  const natsBusFiles: string[] = [];
  const natsIoFiles: string[] = [];
  let totalLines = 0;
  for (const file of files) {
    const text = readFileSync(join(root, file), 'utf8');
    const lines = text.endsWith('\n') ? text.split('\n').length - 1 : text.split('\n').length;
    totalLines += lines;
    sizes.push({ file, lines });
    const found = measure(file, text);
    functions.push(...found.functions);
    for (const key of Object.keys(totals) as (keyof Counts)[]) totals[key] += found.counts[key];
    if (!file.startsWith('apps/')) continue;
    if (found.importedNames.includes('NatsBus')) natsBusFiles.push(file);
    if (found.imports.some((source) => source.startsWith('@nats-io/'))) natsIoFiles.push(file);
  }
  sizes.sort((a, b) => b.lines - a.lines || a.file.localeCompare(b.file));
  functions.sort((a, b) => b.lines - a.lines || a.file.localeCompare(b.file));
  const out: string[] = [
    `code figures of ${label}: ${files.length} source files, ${totalLines} lines (apps/*/src, packages/*/src; no tests, dist or dashboard build)`,
    '',
    `largest files (top ${TOP}, lines):`,
    ...sizes.slice(0, TOP).map((s) => `  ${String(s.lines).padStart(5)}  ${s.file}`),
    '',
    `longest functions (top ${TOP}, lines; declarations, methods, functions assigned to names):`,
    ...functions.slice(0, TOP).map((f) => `  ${String(f.lines).padStart(5)}  ${f.name}  ${f.file}:${f.line}`),
    '',
    'counts:',
    `  as never                        ${totals.asNever}`,
    `  as unknown                      ${totals.asUnknown}`,
    `  Object.assign(new Error, …)     ${totals.assignedErrors}`,
    `  (string & {})                   ${totals.openStringUnions}`,
    `  app files importing NatsBus     ${natsBusFiles.length}`,
    `  app files importing @nats-io/*  ${natsIoFiles.length}`,
    '',
    'app files importing NatsBus:',
    ...natsBusFiles.map((f) => `  ${f}`),
    'app files importing @nats-io/*:',
    ...natsIoFiles.map((f) => `  ${f}`),
  ];
  return out.join('\n');
}

const git = (...args: string[]) => execFileSync('git', args, { cwd: repo, encoding: 'utf8' }).trim();

const rev = process.argv[2];
if (rev === undefined) {
  console.log(figures(repo, 'the working tree'));
} else {
  const commit = git('rev-parse', '--short', `${rev}^{commit}`);
  const tree = `/tmp/figures-${commit}`;
  git('worktree', 'add', '--detach', tree, commit);
  try {
    console.log(figures(tree, `revision ${commit}`));
  } finally {
    git('worktree', 'remove', '--force', tree);
  }
}
