import { type ASTNode, type TypeError as CelTypeError, Environment } from '@marcbachmann/cel-js';
import { suggestion } from './didYouMean.ts';
import { CEL_OPTIONS } from './expressions.ts';
import type { ForeachStepConfig, PipelineConfig, StepConfig } from './pipelineSchema.ts';
import { DYN, NUMBER, type ObjectShape, openObject, type Shape, STRING, shapeOf } from './schemaShape.ts';

/** What a condition must give: a `when` a bool, a foreach step's `items` a list, a route's `on` anything. */
export type Want = 'bool' | 'list' | 'any';

/** The shapes of the variables a condition reads (see `expressions.ts`). */
interface Roots {
  input: Shape;
  steps: Shape;
  task: Shape;
}

/**
 * The run-time evaluator sees every value as `dyn`; this environment is only ever asked to check. It is never
 * registered on, so each check clones it and declares its own types.
 */
const base = new Environment(CEL_OPTIONS);

/**
 * Checks conditions against the types the pipeline's JSON Schemas declare — an agent's `output`, a human step's
 * `answer`, the pipeline's `input`, a foreach step's item — with CEL's own type checker, so a `when` reading a string
 * is refused at load rather than failing its task with `condition_failed`. Where no schema says, the type is `dyn`
 * and the check is left to run time, as before.
 */
export function conditionTypeChecker(config: PipelineConfig, steps: readonly StepConfig[]) {
  // What `steps.<id>` holds when the task runs: the step's output, and why it failed when its onError went on.
  const stepFields = Object.fromEntries(
    steps.map((step): [string, ObjectShape] => [
      step.id,
      { kind: 'object', fields: { output: outputShapeOf(step, config), error: STRING }, closed: true },
    ]),
  );
  const outer: Roots = {
    // Without a schema the input is any object, as it is to the evaluator: a map, whose keys macros may iterate.
    input: config.input === undefined ? { kind: 'map', of: DYN } : shapeOf(config.input),
    steps: { kind: 'object', fields: stepFields, closed: true },
    task: {
      kind: 'object',
      fields: {
        id: STRING,
        goal: STRING,
        pipeline: STRING,
        metadata: { kind: 'map', of: STRING },
        round: NUMBER,
      },
      closed: true,
    },
  };
  const inside = new Map<string, Roots>();
  /** What a foreach step's `do` steps see: the input with the item and its index in it. */
  const rootsIn = (foreach: ForeachStepConfig | undefined): Roots => {
    if (!foreach) return outer;
    const known = inside.get(foreach.id);
    if (known) return known;
    const item = itemShape(typed(foreach.items, outer));
    const input = outer.input.kind === 'object' ? outer.input : openObject();
    const roots: Roots = {
      ...outer,
      input: { kind: 'object', fields: { ...input.fields, item, index: NUMBER }, closed: input.closed },
    };
    inside.set(foreach.id, roots);
    return roots;
  };
  /**
   * Why `expression`, written in a step inside `foreach` (when it is), does not give what it must with the declared
   * types, or undefined. Expects an expression that parses and passes the untyped check.
   */
  return (expression: string, want: Want, foreach?: ForeachStepConfig): string | undefined => {
    const roots = rootsIn(foreach);
    const checked = typed(expression, roots);
    if (checked.error) return checked.error;
    if (checked.type === undefined || !checked.ast) return undefined;
    return resultProblem(checked, want) ?? enumProblem(checked.ast, roots);
  };
}

/** The shape a step's output has, when its step declares a JSON Schema Troupe holds it to; else `dyn`. */
function outputShapeOf(step: StepConfig, config: PipelineConfig): Shape {
  if (step.kind === 'human') return step.answer === undefined ? DYN : shapeOf(step.answer);
  // A foreach step's output is the list of its items' results.
  if (step.kind === 'foreach') return { kind: 'list', of: DYN };
  if (step.kind !== 'agent') return DYN;
  const agent = config.agents[step.agent];
  // An agent of another system answers as it will: its `output` is not a promise Troupe can keep.
  if (!agent || agent.a2a !== undefined || agent.output === undefined) return DYN;
  return shapeOf(agent.output);
}

interface Typed {
  /** The CEL type the expression gives; undefined when it did not parse (the untyped check says why). */
  type?: string;
  error?: string;
  ast?: ASTNode;
  names: Map<string, Shape>;
}

/**
 * Type-checks `expression` with the variables typed as `roots` say. A schema the checker cannot declare (a key it
 * will not take) leaves the expression to run time rather than failing the load.
 */
function typed(expression: string, roots: Roots): Typed {
  const env = base.clone();
  let ast: ASTNode;
  let declared: Declared;
  try {
    ast = env.parse(expression).ast;
    declared = new Declared(env, selectedKeys(ast));
    for (const [name, shape] of Object.entries(roots))
      env.registerVariable(name, declared.celType(shape, name));
  } catch {
    return { names: new Map() };
  }
  const result = env.check(expression);
  if (!result.valid) {
    return { names: declared.names, error: explainError(result.error as CelTypeError, declared.names) };
  }
  return { type: result.type ?? 'dyn', ast, names: declared.names };
}

/** Declares shapes as CEL types in one environment, naming each object type by where it is read (`steps.plan.output`). */
class Declared {
  readonly names = new Map<string, Shape>();
  constructor(
    private readonly env: Environment,
    /** Every key the expression selects: an open object declares them `dyn`, so reading one is no error. */
    private readonly selected: ReadonlySet<string>,
  ) {}

  celType(shape: Shape, path: string): string {
    switch (shape.kind) {
      case 'dyn':
        return 'dyn';
      case 'string':
        return 'string';
      case 'bool':
        return 'bool';
      // A JSON number is a double to the evaluator, which still compares it with an int (`n == 2`) as a dyn value.
      case 'number':
        return 'dyn<double>';
      case 'list':
        return `list<${this.inside(shape.of, `${path}.item`)}>`;
      case 'map':
        return `map<string, ${this.inside(shape.of, `${path}.value`)}>`;
      case 'object':
        return this.object(shape, path);
    }
  }

  /** In a list or map the evaluator sees a number as plain `dyn` (`1 in [1.0]` holds), so it is declared so. */
  private inside(shape: Shape, path: string): string {
    return shape.kind === 'number' ? 'dyn' : this.celType(shape, path);
  }

  private object(shape: ObjectShape, path: string): string {
    let name = path.replace(/[^A-Za-z0-9_.]/g, '_');
    while (this.names.has(name)) name = `${name}_`;
    this.names.set(name, shape);
    const fields: Record<string, string> = Object.create(null);
    // Fields first: a type's fields must be declared before it is. A field the expression never selects is `dyn`:
    // declaring every schema a pipeline holds for each of its conditions made a load of 60 steps take 44 s.
    for (const [key, field] of Object.entries(shape.fields))
      fields[key] = this.selected.has(key) ? this.celType(field, `${path}.${key}`) : 'dyn';
    if (!shape.closed) for (const key of this.selected) fields[key] ??= 'dyn';
    this.env.registerType(name, { fields });
    // At run time every object is a map: what CEL allows on a map, it allows here.
    const never = () => {
      throw new Error('declared for type checks only');
    };
    this.env.registerOperator(`string in ${name}`, never);
    this.env.registerOperator(`${name} == null`, never);
    this.env.registerOperator(`${name} == ${name}`, never);
    this.env.registerFunction({
      name: 'size',
      returnType: 'int',
      params: [{ name: 'value', type: name }],
      handler: never,
    });
    this.env.registerFunction({
      name: 'size',
      receiverType: name,
      returnType: 'int',
      params: [],
      handler: never,
    });
    return name;
  }
}

/** The keys an expression selects (`a.key`, `a.?key`, `a["key"]`). */
function selectedKeys(ast: ASTNode): Set<string> {
  const keys = new Set<string>();
  const visit = (value: unknown): void => {
    if (Array.isArray(value)) {
      for (const v of value) visit(v);
      return;
    }
    if (!isNode(value)) return;
    const { op, args } = value;
    if ((op === '.' || op === '.?') && typeof args[1] === 'string') keys.add(args[1]);
    if ((op === '[]' || op === '[?]') && isNode(args[1]) && typeof args[1].args === 'string')
      keys.add(args[1].args);
    visit(args);
  };
  visit(ast);
  return keys;
}

const isNode = (value: unknown): value is ASTNode =>
  typeof value === 'object' && value !== null && 'op' in value && 'args' in value;

/** What an expression's node was checked to be. The checker keeps it on the node (cel-js 8 `checkedType`). */
const checkedTypeOf = (node: unknown): string | undefined =>
  (node as { checkedType?: { name?: string } } | undefined)?.checkedType?.name;

/** A foreach step's item: the element of the list its `items` gives. */
function itemShape(items: Typed): Shape {
  const element = items.type?.match(/^list<(.+)>$/)?.[1];
  return element === undefined ? DYN : shapeOfCelType(element, items.names);
}

function shapeOfCelType(type: string, names: Map<string, Shape>): Shape {
  const declared = names.get(type);
  if (declared) return declared;
  const element = type.match(/^list<(.+)>$/)?.[1];
  if (element !== undefined) return { kind: 'list', of: shapeOfCelType(element, names) };
  if (type === 'string') return STRING;
  if (type === 'bool') return { kind: 'bool' };
  if (['int', 'uint', 'double', 'dyn<double>'].includes(type)) return NUMBER;
  return DYN;
}

const BOOL_LIKE = new Set(['bool', 'dyn', 'dyn<bool>']);
/** The checker's codes for an operand that must be a bool and is not (`!` on a string has no overload). */
const NOT_BOOL = new Set(['invalid_logical_operand', 'invalid_condition_type', 'no_such_overload']);

function resultProblem(checked: Typed, want: Want): string | undefined {
  const type = checked.type as string;
  if (want === 'any' || type === 'dyn') return undefined;
  if (want === 'bool' && BOOL_LIKE.has(type)) return undefined;
  if (want === 'list' && /^(dyn<)?list</.test(type)) return undefined;
  const read = checked.ast && readOf(checked.ast);
  if (read === undefined) return `must give a ${want}, but gives ${describe(type, checked.names)}`;
  const fix = want === 'bool' ? fixFor(read, type, checked.names) : undefined;
  return `must give a ${want}, but ${read} is ${describe(type, checked.names)}${origin(read)}${fix ? `; compare it: ${fix}` : ''}`;
}

/**
 * A declared read compared with a string its schema's `enum` (or `const`) does not list: `==` never holds, `!=`
 * always does. Most often a typo, so it is refused with the values it may be.
 */
function enumProblem(ast: ASTNode, roots: Roots): string | undefined {
  let found: string | undefined;
  const visit = (value: unknown): void => {
    if (found !== undefined) return;
    if (Array.isArray(value)) {
      for (const v of value) visit(v);
      return;
    }
    if (!isNode(value)) return;
    if (value.op === '==' || value.op === '!=' || value.op === 'in') {
      const [left, right] = value.args as [ASTNode, ASTNode];
      // `read == "x"`, `"x" == read`, `read in ["x", "y"]`.
      const pairs: [ASTNode, ASTNode][] =
        value.op !== 'in'
          ? [
              [left, right],
              [right, left],
            ]
          : right.op === 'list'
            ? (right.args as ASTNode[]).map((item) => [left, item])
            : [];
      for (const [read, literal] of pairs) {
        const shape = shapeAt(read, roots);
        if (shape?.kind !== 'string' || !shape.values || literal.op !== 'value') continue;
        const text = literal.args;
        if (typeof text !== 'string' || shape.values.includes(text)) continue;
        found = `${source(read)} is one of ${shape.values.map((v) => JSON.stringify(v)).join(', ')}${origin(source(read))}, never ${JSON.stringify(text)}${suggestion(text, shape.values)}`;
        return;
      }
    }
    visit(value.args);
  };
  visit(ast);
  return found;
}

/** What a selection chain from a variable reads, as the roots declare it; undefined for anything else. */
function shapeAt(node: ASTNode, roots: Roots): Shape | undefined {
  if (node.op === 'id') return roots[node.args as keyof Roots];
  if (node.op !== '.' && node.op !== '[]') return undefined;
  const [left, right] = node.args as [ASTNode, unknown];
  const key = typeof right === 'string' ? right : isNode(right) ? right.args : undefined;
  const owner = shapeAt(left, roots);
  if (typeof key !== 'string' || owner === undefined) return undefined;
  if (owner.kind === 'object') return owner.fields[key];
  return owner.kind === 'map' ? owner.of : undefined;
}

/** Turns the checker's error into one that names what was read and how to fix it. */
function explainError(error: CelTypeError, names: Map<string, Shape>): string {
  const node = error.node as ASTNode | undefined;
  const summary = error.summary ?? error.message.split('\n')[0];
  if (!node) return `${summary}${hintFor(summary)}`;
  const at = source(node);
  if (error.code === 'no_such_key' && (node.op === '.' || node.op === '[]')) return missingKey(node, names);
  if (error.code === 'cannot_index_type' && (node.op === '.' || node.op === '[]')) {
    const left = node.args[0] as ASTNode;
    const type = checkedTypeOf(left);
    const whose = readOf(left) ?? source(left);
    if (type !== undefined)
      return `reads ${at}, but ${whose} is ${describe(type, names)}${origin(whose)}, which has no keys`;
  }
  const never = nullComparison(node, names);
  if (never) return never;
  // A logical operator, a negation or a ternary given something that is not a bool: name the operand.
  const operands: unknown[] = NOT_BOOL.has(error.code)
    ? node.op === '&&' || node.op === '||'
      ? node.args
      : node.op === '!_'
        ? [node.args]
        : [node]
    : [];
  for (const operand of operands) {
    const type = checkedTypeOf(operand);
    if (type === undefined || BOOL_LIKE.has(type) || !isNode(operand)) continue;
    const read = readOf(operand);
    const what = read ?? source(operand);
    const fix = read === undefined ? undefined : fixFor(read, type, names);
    return `${what} is ${describe(type, names)}, not a bool${read ? origin(read) : ''}${fix ? `; compare it: ${fix}` : ''}`;
  }
  if (summary.includes('cannot be range of a comprehension')) {
    return `${at} is typed as an object, whose keys all, exists, map and filter do not iterate; iterate them as dyn(${at}).exists(…), or test a key with has(…) or "key" in …`;
  }
  // The evaluator's own name for a JSON number; the user wrote a number.
  return `${summary.replaceAll('dyn<double>', 'double')} in ${at}${hintFor(summary)}`;
}

/**
 * A declared string, bool or list compared with `null`: the checker has no such overload, and the value is never
 * null — when the key is absent, reading it fails the task. What was meant is a test that it is there.
 */
function nullComparison(node: ASTNode, names: Map<string, Shape>): string | undefined {
  if (node.op !== '==' && node.op !== '!=') return undefined;
  const [left, right] = node.args as [ASTNode, ASTNode];
  const isNull = (side: ASTNode) => side.op === 'value' && side.args === null;
  const read = isNull(right) ? left : isNull(left) ? right : undefined;
  const type = read && checkedTypeOf(read);
  const chain = read && readOf(read);
  if (read === undefined || type === undefined || chain === undefined || read.op === 'id') return undefined;
  const present = presenceTest(read, chain);
  const test = node.op === '==' ? `that it is absent: !${present}` : `that it is there: ${present}`;
  return `${chain} is ${describe(type, names)}, never null${origin(chain)}; to test ${test}`;
}

/** `has(a.b)`; cel-js takes no brackets in has(), so `a["b"].c` is tested as `a["b"].?c.hasValue()`. */
function presenceTest(read: ASTNode, chain: string): string {
  const [left, right] = read.args as [ASTNode, unknown];
  if (!chain.includes('[')) return `has(${chain})`;
  const key = typeof right === 'string' ? `.?${right}` : `[?${source(right as ASTNode)}]`;
  return `${source(left)}${key}.hasValue()`;
}

/** A key an object's schema does not declare, read from it. */
function missingKey(node: ASTNode, names: Map<string, Shape>): string {
  const [left, right] = node.args as [ASTNode, unknown];
  const key = typeof right === 'string' ? right : String((right as ASTNode).args);
  const owner = checkedTypeOf(left);
  const shape = owner === undefined ? undefined : names.get(owner);
  const keys = shape?.kind === 'object' ? Object.keys(shape.fields) : [];
  const whose = readOf(left) ?? source(left);
  const by = declarer(whose);
  const only = keys.length === 0 ? 'no keys at all' : `only ${keys.join(', ')}`;
  const has =
    by === undefined
      ? `${whose} has no "${key}" (${only})`
      : `${by} declares no "${key}" in ${whose} (${only}; additionalProperties: false)`;
  return `reads ${source(node)}, but ${has}${suggestion(key, keys)}`;
}

/** The source of a selection chain (`steps.plan.output.risky`, `steps["fix-b"].output`), or undefined. */
function readOf(node: ASTNode): string | undefined {
  let at: ASTNode = node;
  while (at.op === '.' || at.op === '[]') {
    const [left, right] = at.args as [ASTNode, unknown];
    if (at.op === '[]' && !(isNode(right) && typeof right.args === 'string')) return undefined;
    at = left;
  }
  return at.op === 'id' ? source(node) : undefined;
}

const source = (node: ASTNode) => node.input.slice(node.range.start, node.range.end);

/** Where a read's type comes from, for a message: `the output schema of step plan`. */
function declarer(read: string): string | undefined {
  const step = read.match(/^steps\s*(?:\.\s*([a-z0-9_]+)|\[\s*["']([^"']+)["']\s*\])\s*\.\s*output\b/);
  if (step) return `the output schema of step ${step[1] ?? step[2]}`;
  if (/^input\s*\.\s*(item|index)\b/.test(read)) return "its foreach step's items";
  if (/^input\b/.test(read)) return "the pipeline's input schema";
  return undefined;
}

/** ` (the output schema of step plan says so)`, or nothing. */
function origin(read: string): string {
  const by = declarer(read);
  return by === undefined ? '' : ` (${by} ${by.endsWith('items') ? 'say' : 'says'} so)`;
}

/** `a string`, `a number`, `an object`, … for a CEL type. */
function describe(type: string, names: Map<string, Shape>): string {
  if (type === 'dyn<double>' || type === 'double' || type === 'int' || type === 'uint') return 'a number';
  if (/^(dyn<)?list</.test(type)) return 'a list';
  if (type.startsWith('map<') || names.has(type)) return 'an object';
  if (type.startsWith('optional<')) return 'an optional value';
  if (type === 'null') return 'null';
  return /^[aeiou]/.test(type) ? `an ${type}` : `a ${type}`;
}

/** A bool made of `read`, for a message: how to compare a value of this type. */
function fixFor(read: string, type: string, names: Map<string, Shape>): string | undefined {
  if (type === 'string') return `${read} != ""`;
  if (describe(type, names) === 'a number') return `${read} > 0`;
  if (/^(dyn<)?list</.test(type)) return `size(${read}) > 0`;
  if (type.startsWith('optional<')) return `${read}.orValue(false)`;
  const shape = names.get(type);
  const first = shape?.kind === 'object' ? Object.keys(shape.fields)[0] : undefined;
  if (first !== undefined) return `has(${read}.${first})`;
  if (type.startsWith('map<') || shape) return `size(${read}) > 0`;
  return undefined;
}

/** A JSON number is a double: `n + 1` has no overload, `n + 1.0` or `int(n) + 1` has. */
function hintFor(summary: string): string {
  return /dyn<double>|double [-+*/%] int|int [-+*/%] double/.test(summary)
    ? ' (a JSON number is a double: write 1.0, not 1, or convert with int(…))'
    : '';
}
