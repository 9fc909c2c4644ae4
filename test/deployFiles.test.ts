import { execFile } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { cp, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join, posix, relative, resolve } from 'node:path';
import { promisify } from 'node:util';
import { serveMetrics, TroupeMetrics } from '@troupe/runtime';
import { DockerfileParser } from 'dockerfile-ast';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { startAdminGateway } from './support/adminGateway.ts';
import { troupe } from './support/cli.ts';
import { examplePath, type Harness, repoRoot, startHarness } from './support/harness.ts';

// The deployment files (deploy/, docs/deploy.md) are checked here by parsing them, never by running them: this
// machine has no container engine and no systemd. What can be checked without one is: the Dockerfile against the
// repository (its COPY sources, stages, user and entrypoint), the compose file against the keys Compose knows and against
// troupe's own commands and files, the NATS configurations with nats-server -t, and the systemd units with
// systemd-analyze verify and against troupe's commands and stop.

const execFileAsync = promisify(execFile);
const deployDir = join(repoRoot, 'deploy');
const dockerfilePath = join(deployDir, 'Dockerfile');
const composePath = join(deployDir, 'compose.yaml');
const unitsDir = join(deployDir, 'systemd');
/**
 * The keys Compose knows at the top level and in a service (the Compose specification), with `x-` extensions
 * allowed: a misspelt key (`depend_on`, `healthcheck:` under the wrong parent), which Compose refuses at `up`, is
 * found here, where no engine runs.
 */
const COMPOSE_TOP_KEYS = new Set([
  'name',
  'version',
  'services',
  'volumes',
  'networks',
  'configs',
  'secrets',
  'include',
]);
const COMPOSE_SERVICE_KEYS = new Set(
  (
    'annotations attach build blkio_config cap_add cap_drop cgroup cgroup_parent command configs container_name ' +
    'cpu_count cpu_percent cpu_period cpu_quota cpu_rt_period cpu_rt_runtime cpu_shares cpus cpuset credential_spec ' +
    'depends_on deploy develop device_cgroup_rules devices dns dns_opt dns_search domainname entrypoint env_file ' +
    'environment expose extends external_links extra_hosts gpus group_add healthcheck hostname image init ipc isolation ' +
    'labels links logging mac_address mem_limit mem_reservation mem_swappiness memswap_limit network_mode networks ' +
    'oom_kill_disable oom_score_adj pid pids_limit platform ports post_start pre_stop privileged profiles pull_policy ' +
    'read_only restart runtime scale secrets security_opt shm_size stdin_open stop_grace_period stop_signal storage_opt ' +
    'sysctls tmpfs tty ulimits user userns_mode uts volumes volumes_from working_dir'
  ).split(' '),
);
/** The keys of the maps inside a service that this file uses, as the Compose specification defines them. */
const COMPOSE_NESTED_KEYS: Record<string, Set<string>> = {
  healthcheck: new Set('disable interval retries start_interval start_period test timeout'.split(' ')),
  build: new Set(
    (
      'additional_contexts args cache_from cache_to context dockerfile dockerfile_inline entitlements extra_hosts ' +
      'isolation labels network no_cache platforms privileged pull secrets shm_size ssh tags target ulimits'
    ).split(' '),
  ),
};
/** The keys of one `depends_on` entry in its long form, and the conditions it may wait for. */
const COMPOSE_DEPENDS_ON_KEYS = new Set(['condition', 'restart', 'required']);
const COMPOSE_CONDITIONS = new Set(['service_started', 'service_healthy', 'service_completed_successfully']);
const isExtension = (key: string) => key.startsWith('x-');

const read = (file: string) => readFileSync(file, 'utf8');
const mapValues = <T>(record: Record<string, T>) => Object.entries(record);
const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

// ---------------------------------------------------------------------------------------------------------------
// troupe's commands, as their --help describes them

interface OptionSpec {
  takesValue: boolean;
  /** The environment variable commander reads it from, and its default, as the help says. */
  env?: string;
  defaultValue?: string;
}

interface CommandSpec {
  name: string;
  /** Long and short flags. */
  options: Map<string, OptionSpec>;
  args: { name: string; required: boolean; variadic: boolean }[];
}

const specs = new Map<string, Promise<CommandSpec | undefined>>();

/** Reads `troupe <name> --help`: the options and arguments the real CLI takes (undefined: no such command). */
function commandSpec(name: string): Promise<CommandSpec | undefined> {
  let spec = specs.get(name);
  if (!spec) {
    spec = troupe([...name.split(' '), '--help']).then((result) =>
      // An unknown command's --help is the program's own help: its usage names no command.
      result.code === 0 && result.stdout.startsWith(`Usage: troupe ${name} `)
        ? parseHelp(name, result.stdout)
        : undefined,
    );
    specs.set(name, spec);
  }
  return spec;
}

function parseHelp(name: string, help: string): CommandSpec {
  const options = new Map<string, OptionSpec>();
  // An option's line is indented by two spaces; its description wraps onto lines indented further.
  const optionLine = /^ {2}(?:(-\w), )?(--[a-z][\w-]*)( <[^>]+>| \[[^\]]+\])?/;
  const lines = help.split('\n');
  lines.forEach((line, index) => {
    const match = optionLine.exec(line);
    if (!match?.[2]) return;
    const next = lines.findIndex(
      (other, i) => i > index && (optionLine.test(other) || !other.startsWith('    ')),
    );
    const block = lines
      .slice(index, next === -1 ? undefined : next)
      .join(' ')
      .replace(/\s+/g, ' ');
    const env = /env: ([A-Z_]+)\)/.exec(block)?.[1];
    const defaultValue = /\(default: ([^,)]+)/.exec(block)?.[1];
    const entry: OptionSpec = {
      takesValue: match[3] !== undefined,
      ...(env === undefined ? {} : { env }),
      ...(defaultValue === undefined ? {} : { defaultValue }),
    };
    options.set(match[2], entry);
    if (match[1]) options.set(match[1], entry);
  });
  const usage = /^Usage: troupe (.*)$/m.exec(help)?.[1] ?? '';
  const args = usage
    .slice(name.length)
    .split(/\s+/)
    .filter((token) => token !== '' && token !== '[options]')
    .map((token) => ({
      name: token.replace(/[<>[\].]/g, ''),
      required: token.startsWith('<'),
      variadic: token.includes('...'),
    }));
  return { name, options, args };
}

interface ParsedCommand {
  command: string;
  spec: CommandSpec | undefined;
  flags: Map<string, string | true>;
  positionals: string[];
  problems: string[];
}

/** Checks `argv` (without `troupe`) against the real command's help, as commander would parse it. */
async function parseTroupeArgv(argv: string[], where: string): Promise<ParsedCommand> {
  const problems: string[] = [];
  const flags = new Map<string, string | true>();
  const positionals: string[] = [];
  const [first, ...rest] = argv;
  // `versions use` is the one command of two words.
  const command = first === 'versions' && rest[0] !== undefined ? `versions ${rest.shift()}` : (first ?? '');
  const spec = command === '' ? undefined : await commandSpec(command);
  if (!spec)
    return { command, spec, flags, positionals, problems: [`${where}: "troupe ${command}" is no command`] };
  for (let i = 0; i < rest.length; i++) {
    const token = rest[i] ?? '';
    if (!token.startsWith('-') || token === '-') {
      positionals.push(token);
      continue;
    }
    const [flag = '', inline] = token.split(/=(.*)/s, 2);
    const option = spec.options.get(flag);
    if (!option) {
      problems.push(`${where}: troupe ${command} has no option ${flag}`);
      continue;
    }
    if (!option.takesValue) {
      if (inline !== undefined) problems.push(`${where}: ${flag} of troupe ${command} takes no value`);
      flags.set(flag, true);
      continue;
    }
    const value = inline ?? rest[++i];
    if (value === undefined) problems.push(`${where}: ${flag} of troupe ${command} needs a value`);
    else flags.set(flag, value);
  }
  const required = spec.args.filter((arg) => arg.required).length;
  const variadic = spec.args.some((arg) => arg.variadic);
  if (positionals.length < required)
    problems.push(`${where}: troupe ${command} needs ${spec.args.map((a) => a.name).join(' ')}`);
  if (!variadic && positionals.length > spec.args.length)
    problems.push(
      `${where}: troupe ${command} takes ${spec.args.length} arguments, given ${positionals.length}`,
    );
  return { command, spec, flags, positionals, problems };
}

/** The stop timeout a process runs with: its --stop-timeout, else its variable, else the default its help gives. */
function stopTimeoutOf(parsed: ParsedCommand, env: Record<string, string>): number {
  const option = parsed.spec?.options.get('--stop-timeout');
  const flag = parsed.flags.get('--stop-timeout');
  const value = typeof flag === 'string' ? flag : (env[option?.env ?? ''] ?? option?.defaultValue);
  return Number(value);
}

/** Whether the process hosts agents, and so runs commands in bubblewrap. */
const hostsAgents = (parsed: ParsedCommand) =>
  parsed.command === 'worker' || (parsed.command === 'up' && !parsed.flags.has('--no-agents'));

/** `[host:]port` of --metrics or --listen. */
const portOf = (listen: string | true | undefined) =>
  typeof listen === 'string' ? Number(/(\d+)$/.exec(listen)?.[1]) : undefined;

// ---------------------------------------------------------------------------------------------------------------
// the Dockerfile and its build context

/** A .dockerignore pattern as Docker applies it: to a path and to everything under it. */
function ignoreMatcher(patterns: string[]): (path: string) => boolean {
  const rules = patterns
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const negate = line.startsWith('!');
      const body = posix.normalize(line.replace(/^!/, '').replace(/^\/+/, ''));
      const source = body
        .split('/')
        .map((part) =>
          part === '**'
            ? '.*'
            : part
                .replace(/[.+^${}()|[\]\\]/g, '\\$&')
                .replace(/\*/g, '[^/]*')
                .replace(/\?/g, '[^/]'),
        )
        .join('/')
        .replace(/^\.\*\//, '(?:.*/)?');
      return { negate, regex: new RegExp(`^${source}(?:/.*)?$`) };
    });
  return (path) => {
    let ignored = false;
    for (const rule of rules) if (rule.regex.test(path)) ignored = !rule.negate;
    return ignored;
  };
}

interface DockerfileFacts {
  problems: string[];
  /** ENV of the runtime stage. */
  env: Record<string, string>;
  /** Directories the runtime stage creates owned by its user (where named volumes take their owner from). */
  ownedDirs: string[];
}

/** The files a build from the sources reads, beside the COPY sources: every workspace, the scripts npm ci runs. */
function filesTheBuildNeeds(rootPackage: {
  workspaces?: string[];
  scripts?: Record<string, string>;
}): string[] {
  const files = ['package.json', 'package-lock.json'];
  for (const pattern of rootPackage.workspaces ?? []) {
    const dir = pattern.replace(/\/\*$/, '');
    const members = pattern.endsWith('/*')
      ? readdirSync(join(repoRoot, dir), { withFileTypes: true })
          .filter(
            (entry) => entry.isDirectory() && existsSync(join(repoRoot, dir, entry.name, 'package.json')),
          )
          .map((entry) => `${dir}/${entry.name}`)
      : [dir];
    for (const member of members) {
      files.push(`${member}/package.json`);
      // What the CLI's bundle and pack's tsc compile, and the README pack puts in each package.
      for (const part of ['src', 'README.md'])
        if (existsSync(join(repoRoot, member, part))) files.push(`${member}/${part}`);
    }
  }
  // What scripts/pack.mjs reads besides: the compiler settings, the licence and the pipeline schema it ships.
  files.push('tsconfig.base.json', 'LICENSE', 'docs/schema/pipeline.schema.json');
  for (const script of ['prepare', 'postinstall', 'pack']) {
    const text = rootPackage.scripts?.[script] ?? '';
    for (const match of text.matchAll(/(?:node|bash|sh|tsx)\s+((?:scripts|patches)\/[\w./-]+)/g))
      if (match[1]) files.push(match[1]);
    if (text.includes('patch-package')) files.push('patches');
  }
  return files;
}

/** How `npm pack` names the CLI's tarball, without its version: @troupe/cli gives troupe-cli. */
const cliTarballPrefix = (
  JSON.parse(readFileSync(join(repoRoot, 'apps', 'cli', 'package.json'), 'utf8')) as { name: string }
).name
  .replace(/^@/, '')
  .replace('/', '-');

function dockerfileProblems(
  text: string,
  dockerignore: string,
  rootPackage: Record<string, unknown>,
): DockerfileFacts {
  const problems: string[] = [];
  const dockerfile = DockerfileParser.parse(text);
  const ignored = ignoreMatcher(dockerignore.split('\n'));
  const scripts = (rootPackage.scripts ?? {}) as Record<string, string>;
  const stages: string[] = [];
  let stage = -1;
  let user: string | undefined;
  let entrypoint: string[] | undefined;
  const env: Record<string, string> = {};
  const ownedDirs: string[] = [];
  const copiedFromBuild: string[] = [];
  const instructions = dockerfile.getInstructions();
  const froms = dockerfile.getFROMs();
  const lastFrom = froms.at(-1);
  for (const instruction of instructions) {
    const keyword = instruction.getKeyword();
    const args = instruction.getArguments().map((arg) => arg.getValue());
    const line = `Dockerfile:${instruction.getRange().start.line + 1}`;
    const inRuntime =
      lastFrom !== undefined && instruction.getRange().start.line >= lastFrom.getRange().start.line;
    if (keyword === 'FROM') {
      stage++;
      const from = froms[stage];
      stages.push(from?.getBuildStage() ?? String(stage));
      const image = `${from?.getImageName()}:${from?.getImageTag()}`;
      // Troupe runs on Node 20 (engines >=20.11): an image of another major is not what is tested.
      if (!/^node:20(?:[.-]|$)/.test(image))
        problems.push(`${line}: stage ${stage} is built on ${image}, not node:20`);
      user = undefined;
      continue;
    }
    if (keyword === 'COPY' || keyword === 'ADD') {
      const flags = (
        instruction as unknown as { getFlags(): { getName(): string; getValue(): string | null }[] }
      ).getFlags();
      const from = flags.find((flag) => flag.getName() === 'from')?.getValue();
      const sources = args.slice(0, -1);
      if (from !== undefined && from !== null) {
        if (!stages.slice(0, -1).includes(from))
          problems.push(`${line}: COPY --from=${from} names no earlier stage`);
        else copiedFromBuild.push(args.at(-1) ?? '');
        continue;
      }
      for (const source of sources) {
        const path = posix.normalize(source).replace(/\/$/, '');
        if (!existsSync(join(repoRoot, path)))
          problems.push(`${line}: COPY source ${source} is not in the repository`);
        else if (path !== '.' && ignored(path))
          problems.push(`${line}: COPY source ${source} is in .dockerignore`);
      }
      // A context copied whole must still hold what npm ci and the build read.
      if (sources.some((source) => posix.normalize(source) === '.'))
        for (const needed of filesTheBuildNeeds(rootPackage as { workspaces?: string[] }))
          if (ignored(needed)) problems.push(`.dockerignore leaves out ${needed}, which the build needs`);
      continue;
    }
    if (keyword === 'RUN') {
      const body = instruction.getArgumentsContent() ?? '';
      // npm names a scoped package's tarball <scope>-<name>-<version>.tgz: the glob must be the CLI's.
      for (const match of body.matchAll(/dist\/pack\/([\w.-]+)-\*\.tgz/g))
        if (match[1] !== cliTarballPrefix)
          problems.push(
            `${line}: dist/pack/${match[1]}-*.tgz is not the CLI's tarball (${cliTarballPrefix}-<version>.tgz)`,
          );
      for (const match of body.matchAll(/npm run ([\w:-]+)/g))
        if (match[1] && !(match[1] in scripts))
          problems.push(`${line}: npm run ${match[1]}: package.json has no script ${match[1]}`);
      if (inRuntime) {
        for (const match of body.matchAll(/npm install -g (\S+)/g))
          if (match[1] && !copiedFromBuild.includes(match[1]))
            problems.push(`${line}: npm install -g ${match[1]} installs nothing copied from the build stage`);
        for (const match of body.matchAll(/install -d -o (\S+) -g \S+(?: -m \S+)? ((?:\/\S+\s*)+)/g))
          ownedDirs.push(...(match[2] ?? '').trim().split(/\s+/));
      }
      continue;
    }
    if (keyword === 'USER') user = args[0];
    if (keyword === 'ENV' && inRuntime)
      for (const property of (
        instruction as unknown as { getProperties(): { getName(): string; getValue(): string | null }[] }
      ).getProperties())
        env[property.getName()] = property.getValue() ?? '';
    if (keyword === 'ENTRYPOINT' && inRuntime) {
      const json = (
        instruction as unknown as { getJSONStrings?(): { getJSONValue(): string }[] }
      ).getJSONStrings?.();
      entrypoint = json && json.length > 0 ? json.map((s) => s.getJSONValue()) : undefined;
      if (!entrypoint)
        problems.push(`${line}: ENTRYPOINT is not in exec form, so a shell would get SIGTERM, not troupe`);
    }
  }
  if (!user) problems.push('the runtime stage sets no USER: the processes would run as root');
  else if (/^(root|0)(:|$)/.test(user)) problems.push(`the runtime stage runs as ${user}`);
  // An init (tini) may come first; the program it runs must be troupe itself.
  const program = entrypoint?.[0]?.endsWith('tini')
    ? entrypoint[entrypoint.indexOf('--') + 1]
    : entrypoint?.[0];
  if (program !== 'troupe')
    problems.push(`the runtime stage's ENTRYPOINT runs ${program ?? 'nothing'}, not troupe`);
  return { problems, env, ownedDirs };
}

// ---------------------------------------------------------------------------------------------------------------
// the compose file

/** Compose's own interpolation, before anything else reads the file: ${VAR}, ${VAR:-default}, $$. */
function interpolate(value: unknown, env: Record<string, string | undefined> = {}): unknown {
  if (typeof value === 'string')
    return value.replace(
      /\$\$|\$\{([A-Za-z_]\w*)(?::?-([^}]*))?\}/g,
      (whole, name?: string, fallback?: string) =>
        whole === '$$' ? '$' : (env[name ?? ''] ?? fallback ?? ''),
    );
  if (Array.isArray(value)) return value.map((item) => interpolate(item, env));
  if (isRecord(value)) return Object.fromEntries(mapValues(value).map(([k, v]) => [k, interpolate(v, env)]));
  return value;
}

interface Mount {
  kind: 'bind' | 'volume';
  source: string;
  target: string;
  readOnly: boolean;
}

function mountsOf(service: Record<string, unknown>): Mount[] {
  return ((service.volumes ?? []) as unknown[]).map((entry) => {
    if (typeof entry === 'string') {
      const [source = '', target = '', mode = ''] = entry.split(':');
      const bind = source.startsWith('.') || source.startsWith('/');
      return { kind: bind ? 'bind' : 'volume', source, target, readOnly: mode.split(',').includes('ro') };
    }
    const long = entry as { type: string; source: string; target: string; read_only?: boolean };
    return {
      kind: long.type === 'bind' ? 'bind' : 'volume',
      source: long.source,
      target: long.target,
      readOnly: long.read_only === true,
    };
  });
}

/** The mount that holds `path` inside the service's container (the longest target that contains it). */
function mountOf(mounts: Mount[], path: string): Mount | undefined {
  return mounts
    .filter((mount) => path === mount.target || path.startsWith(`${mount.target}/`))
    .sort((a, b) => b.target.length - a.target.length)[0];
}

/** Where a path inside the container is on this machine, through a bind mount (undefined: not bound). */
function hostPathOf(mounts: Mount[], path: string, composeDir: string): string | undefined {
  const mount = mountOf(mounts, path);
  if (mount?.kind !== 'bind') return undefined;
  return join(resolve(composeDir, mount.source), posix.relative(mount.target, path));
}

const durationSeconds = (text: unknown): number | undefined => {
  if (typeof text !== 'string') return undefined;
  const parts = [...text.matchAll(/(\d+(?:\.\d+)?)(h|m|s|ms)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== text) return undefined;
  const unit = { h: 3600, m: 60, s: 1, ms: 0.001 } as const;
  return parts.reduce((sum, [, n, u]) => sum + Number(n) * unit[u as keyof typeof unit], 0);
};

/** What `troupe nats-config` wrote for one user: its role, seed file and inbox. */
interface NatsRole {
  name: string;
  /** What the role is for, as nats-config describes it (`troupe up --no-agents`, `worker for …`, `troupe gateway`). */
  description: string;
  nkey: string;
  inbox: string;
}

interface NatsNode {
  service: string;
  serverName: string;
  clusterName: string;
  clientPort: number;
  clusterPort: number;
  monitorPort: number;
  storeDir: string;
  routes: string[];
  includes: string[];
}

function parseNatsConf(text: string, service: string): NatsNode {
  const value = (pattern: RegExp) => pattern.exec(text)?.[1] ?? '';
  const cluster = /cluster\s*\{([\s\S]*?)\n\}/.exec(text)?.[1] ?? '';
  return {
    service,
    serverName: value(/^server_name:\s*(\S+)/m),
    clusterName: /name:\s*(\S+)/.exec(cluster)?.[1] ?? '',
    clientPort: Number(value(/^listen:\s*\S*:(\d+)/m)),
    clusterPort: Number(/listen:\s*\S*:(\d+)/.exec(cluster)?.[1]),
    monitorPort: Number(value(/^http:\s*\S*:(\d+)/m)),
    storeDir: value(/store_dir:\s*"?([^"\s}]+)"?/),
    routes: [...cluster.matchAll(/nats-route:\/\/([\w.-]+:\d+)/g)].map((m) => m[1] ?? ''),
    includes: [...text.matchAll(/^include\s+"([^"]+)"/gm)].map((m) => m[1] ?? ''),
  };
}

const validations = new Map<string, ReturnType<typeof troupe>>();

/** `troupe validate` of these files, run once whatever number of checks asks (the files do not change meanwhile). */
function validateOnce(files: string[]): ReturnType<typeof troupe> {
  const key = files.join('\n');
  let validated = validations.get(key);
  if (!validated) {
    validated = troupe(['validate', '--no-keys', ...files]);
    validations.set(key, validated);
  }
  return validated;
}

/** `<pipeline>.<agent>` of each agent a worker of these files serves (`only`: its --agents). */
async function agentsServed(files: string[], only: string[] | undefined): Promise<string[]> {
  const served: string[] = [];
  for (const file of files) {
    const printed = await troupe(['validate', '--print', '--no-keys', file]);
    // A file troupe validate refuses is reported as such; it serves no agents.
    if (printed.code !== 0) continue;
    const pipeline = JSON.parse(printed.stdout) as { name: string; agents: Record<string, unknown> };
    for (const agent of Object.keys(pipeline.agents))
      if (!only || only.includes(agent)) served.push(`${pipeline.name}.${agent}`);
  }
  return served;
}

interface ComposeContext {
  composeDir: string;
  dockerfile: DockerfileFacts;
  /** The users the compose file's nats-config service makes, run here into `authDir`. */
  roles: NatsRole[];
  authDir: string;
  /** nats-config's own argv in the compose file. */
  natsConfig: ParsedCommand | undefined;
}

const isTroupeService = (service: Record<string, unknown>) =>
  isRecord(service.build) && String(service.build.dockerfile ?? '').endsWith('deploy/Dockerfile');

/** The troupe argv a service runs: its command, through the image's ENTRYPOINT or a shell that execs troupe. */
function troupeArgvOf(
  name: string,
  service: Record<string, unknown>,
): { argv: string[]; problems: string[] } {
  const command = service.command;
  if (!Array.isArray(command)) return { argv: [], problems: [`${name}: command must be a list (exec form)`] };
  const entrypoint = service.entrypoint;
  if (entrypoint === undefined) return { argv: command.map(String), problems: [] };
  // `sh -c '… exec troupe "$@"' <$0>` with the command as its arguments.
  const script = Array.isArray(entrypoint) ? String(entrypoint[2] ?? '') : '';
  if (!Array.isArray(entrypoint) || entrypoint[1] !== '-c' || !script.includes('exec troupe "$@"'))
    return { argv: [], problems: [`${name}: its entrypoint does not exec troupe with the command`] };
  return { argv: command.map(String), problems: [] };
}

async function composeProblems(raw: unknown, ctx: ComposeContext): Promise<string[]> {
  const problems: string[] = [];
  const doc = interpolate(raw) as {
    services?: Record<string, Record<string, unknown>>;
    volumes?: Record<string, unknown>;
  };
  for (const key of Object.keys(doc))
    if (!COMPOSE_TOP_KEYS.has(key) && !isExtension(key))
      problems.push(`compose: unknown top-level key ${key}`);
  for (const [name, service] of Object.entries(doc.services ?? {})) {
    for (const key of Object.keys(service ?? {}))
      if (!COMPOSE_SERVICE_KEYS.has(key) && !isExtension(key))
        problems.push(`compose: ${name}: unknown key ${key}`);
    for (const [parent, known] of Object.entries(COMPOSE_NESTED_KEYS)) {
      const inner = service?.[parent];
      if (!isRecord(inner)) continue;
      for (const key of Object.keys(inner))
        if (!known.has(key) && !isExtension(key))
          problems.push(`compose: ${name}: unknown key ${parent}.${key}`);
    }
    const dependsOn = service?.depends_on;
    for (const [on, entry] of isRecord(dependsOn) ? Object.entries(dependsOn) : []) {
      if (!isRecord(entry)) continue;
      for (const key of Object.keys(entry))
        if (!COMPOSE_DEPENDS_ON_KEYS.has(key))
          problems.push(`compose: ${name}: unknown key depends_on.${on}.${key}`);
      if (entry.condition !== undefined && !COMPOSE_CONDITIONS.has(String(entry.condition)))
        problems.push(
          `compose: ${name}: depends_on.${on}.condition ${String(entry.condition)} is no condition`,
        );
    }
  }
  const services = doc.services ?? {};
  const declaredVolumes = new Set(Object.keys(doc.volumes ?? {}));
  const usedVolumes = new Set<string>();

  // The NATS nodes: their configuration files, checked by nats-server itself, and what the others need of them.
  const nodes: NatsNode[] = [];
  for (const [name, service] of mapValues(services)) {
    if (!String(service.image ?? '').startsWith('nats:')) continue;
    const command = (service.command ?? []) as string[];
    const configPath = command[command.indexOf('--config') + 1] ?? command[command.indexOf('-c') + 1];
    const mounts = mountsOf(service);
    const hostConfig = configPath ? hostPathOf(mounts, configPath, ctx.composeDir) : undefined;
    if (!configPath || !hostConfig || !existsSync(hostConfig)) {
      problems.push(`${name}: its --config ${configPath} is no file mounted from deploy/`);
      continue;
    }
    const node = parseNatsConf(read(hostConfig), name);
    nodes.push(node);
    if (mountOf(mounts, node.storeDir)?.kind !== 'volume')
      problems.push(
        `${name}: its JetStream store ${node.storeDir} is on no volume: a new container would lose it`,
      );
    const health = JSON.stringify(service.healthcheck ?? '');
    if (!health.includes(`127.0.0.1:${node.monitorPort}/healthz`))
      problems.push(
        `${name}: its health check does not ask /healthz on its monitoring port ${node.monitorPort}`,
      );
    // nats-server -t with the includes where the container has them: the auth block nats-config wrote.
    const root = await mkdtemp(join(tmpdir(), 'troupe-natsconf-'));
    try {
      const confInRoot = join(root, configPath);
      await mkdir(dirname(confInRoot), { recursive: true });
      await cp(hostConfig, confInRoot);
      for (const include of node.includes) {
        const inContainer = posix.join(posix.dirname(configPath), include);
        const mount = mountOf(mounts, inContainer);
        if (mount?.kind !== 'volume' || !ctx.natsConfig) continue;
        const out = String(ctx.natsConfig.flags.get('--out') ?? '');
        const natsConfigMounts = mountsOf(services['nats-config'] ?? {});
        if (mountOf(natsConfigMounts, out)?.source !== mount.source)
          problems.push(
            `${name}: include ${include} is on volume ${mount.source}, which nats-config does not write`,
          );
        await mkdir(join(root, mount.target), { recursive: true });
        await cp(ctx.authDir, join(root, mount.target), { recursive: true });
      }
      const checked = await execFileAsync('nats-server', ['-t', '-c', confInRoot]).catch(
        (error: { stderr?: string; stdout?: string }) => ({
          stdout: '',
          stderr: `${error.stderr ?? ''}${error.stdout ?? ''}`,
        }),
      );
      if (!/is valid/.test(`${checked.stdout}${checked.stderr}`))
        problems.push(`${name}: nats-server -t -c ${configPath}: ${checked.stderr.trim()}`);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  }
  const serverNames = nodes.map((node) => node.serverName);
  if (new Set(serverNames).size !== serverNames.length)
    problems.push(`NATS server names repeat: ${serverNames}`);
  if (new Set(nodes.map((node) => node.clusterName)).size > 1)
    problems.push('the NATS nodes name different clusters');
  const wantedRoutes = nodes.map((node) => `${node.service}:${node.clusterPort}`).sort();
  for (const node of nodes)
    if ([...node.routes].sort().join() !== wantedRoutes.join())
      problems.push(`${node.service}: its routes ${node.routes} are not the cluster's nodes ${wantedRoutes}`);
  const natsUrls = nodes.map((node) => `nats://${node.service}:${node.clientPort}`).sort();

  for (const [name, service] of mapValues(services)) {
    const mounts = mountsOf(service);
    for (const mount of mounts) {
      if (mount.kind === 'bind' && !existsSync(resolve(ctx.composeDir, mount.source)))
        problems.push(`${name}: bind mount ${mount.source} does not exist next to compose.yaml`);
      if (mount.kind === 'volume') {
        usedVolumes.add(mount.source);
        if (!declaredVolumes.has(mount.source))
          problems.push(`${name}: volume ${mount.source} is not declared`);
      }
    }
    const dependsOn = service.depends_on;
    const dependencies: [string, { condition?: string }][] = Array.isArray(dependsOn)
      ? dependsOn.map((target) => [String(target), {}])
      : mapValues((dependsOn ?? {}) as Record<string, { condition?: string }>);
    for (const [target, how] of dependencies) {
      const other = services[target];
      if (!other) {
        problems.push(`${name}: depends_on ${target}, which is no service`);
        continue;
      }
      const condition = how.condition;
      if (condition === 'service_healthy' && !other.healthcheck)
        problems.push(`${name}: waits for ${target} to be healthy, which has no health check`);
      if (condition === 'service_completed_successfully' && other.restart !== 'no')
        problems.push(`${name}: waits for ${target} to complete, which restarts`);
    }
    if (!isTroupeService(service)) continue;

    // A named volume takes its owner from the image's directory: one the image does not make is root's.
    for (const mount of mounts)
      if (mount.kind === 'volume' && !mount.readOnly && !ctx.dockerfile.ownedDirs.includes(mount.target))
        problems.push(
          `${name}: volume ${mount.source} is mounted on ${mount.target}, which the image does not own`,
        );
    const build = service.build as { context?: string; dockerfile?: string };
    if (resolve(ctx.composeDir, build.context ?? '.') !== repoRoot)
      problems.push(`${name}: its build context is not the repository's root`);
    const { argv, problems: argvProblems } = troupeArgvOf(name, service);
    problems.push(...argvProblems);
    if (argv.length === 0) continue;
    const parsed = await parseTroupeArgv(argv, name);
    problems.push(...parsed.problems);
    const env = (service.environment ?? {}) as Record<string, string>;

    // The pipeline files, where the container reads them: bound from this repository, and valid.
    let pipelineFiles: string[] = [];
    if (['up', 'worker', 'nats-config'].includes(parsed.command)) {
      const files = parsed.positionals.map((file) =>
        hostPathOf(mounts, posix.resolve('/pipelines', file), ctx.composeDir),
      );
      const missing = parsed.positionals.filter((_, i) => !files[i] || !existsSync(files[i] ?? ''));
      if (missing.length > 0)
        problems.push(`${name}: pipeline files ${missing} are not mounted from the repository`);
      else {
        pipelineFiles = files as string[];
        const validated = await validateOnce(pipelineFiles);
        if (validated.code !== 0) problems.push(`${name}: troupe validate: ${validated.stderr.trim()}`);
      }
    }

    if (parsed.command === 'nats-config') {
      const out = String(parsed.flags.get('--out') ?? '');
      if (mountOf(mounts, out)?.kind !== 'volume' || mountOf(mounts, out)?.readOnly)
        problems.push(`${name}: --out ${out} is on no writable volume`);
      if (Number(parsed.flags.get('--replicas') ?? 1) !== nodes.length)
        problems.push(
          `${name}: --replicas ${parsed.flags.get('--replicas') ?? 1} for ${nodes.length} NATS servers`,
        );
      continue;
    }

    // A long-running process: NATS, its user, its stop, its health.
    const urls = String(env.NATS_URL ?? '')
      .split(',')
      .sort();
    if (urls.join() !== natsUrls.join())
      problems.push(`${name}: NATS_URL ${env.NATS_URL} is not the servers ${natsUrls}`);
    const role = ctx.roles.find((r) => r.inbox === env.TROUPE_INBOX);
    if (!role) problems.push(`${name}: TROUPE_INBOX ${env.TROUPE_INBOX} is no user nats-config makes`);
    else {
      const wanted =
        parsed.command === 'up'
          ? 'troupe up --no-agents'
          : parsed.command === 'worker'
            ? 'worker for'
            : `troupe ${parsed.command}`;
      if (!role.description.includes(wanted))
        problems.push(
          `${name}: runs troupe ${parsed.command} as ${role.name}, a user for ${role.description}`,
        );
      const seed = String(env.NATS_NKEY ?? '');
      const seedMount = mountOf(mounts, seed);
      const out = String(ctx.natsConfig?.flags.get('--out') ?? '');
      const writtenOn = mountOf(mountsOf(services['nats-config'] ?? {}), out)?.source;
      if (basename(seed) !== basename(role.nkey) || seedMount?.source !== writtenOn)
        problems.push(
          `${name}: NATS_NKEY ${seed} is not ${role.name}'s seed on the volume nats-config writes`,
        );
    }
    // A worker's NATS user may serve only the agents it was made for: one more, and its subscription is refused.
    const workerRole =
      parsed.command === 'worker'
        ? /worker for (.+) of pipeline ([a-z0-9-]+)/.exec(role?.description ?? '')
        : null;
    if (workerRole) {
      const allowed = (workerRole[1] ?? '').split(', ').map((agent) => `${workerRole[2]}.${agent}`);
      const only = parsed.flags.get('--agents');
      for (const served of await agentsServed(
        pipelineFiles,
        typeof only === 'string' ? only.split(',') : undefined,
      ))
        if (!allowed.includes(served))
          problems.push(
            `${name}: serves agent ${served}, which its NATS user ${role?.name} was not made for`,
          );
    }
    if (parsed.command === 'up' && ctx.natsConfig) {
      const replicas = Number(parsed.flags.get('--replicas') ?? env.TROUPE_REPLICAS ?? 1);
      if (replicas !== nodes.length)
        problems.push(`${name}: --replicas ${replicas} on ${nodes.length} NATS servers`);
      if (Number(ctx.natsConfig.flags.get('--replicas') ?? 1) !== replicas)
        problems.push(`${name}: --replicas ${replicas}, but nats-config made its users for another count`);
    }
    if (!service.restart || service.restart === 'no') problems.push(`${name}: is not restarted`);
    const stop = stopTimeoutOf(parsed, env);
    const grace = durationSeconds(service.stop_grace_period);
    if (grace === undefined || grace <= stop)
      problems.push(
        `${name}: stop_grace_period ${service.stop_grace_period} is not above its stop timeout ${stop} s`,
      );
    const health = service.healthcheck as { test?: unknown } | undefined;
    const script = Array.isArray(health?.test) ? String(health.test.at(-1)) : '';
    const url = /https?:\/\/127\.0\.0\.1:(\d+)(\/[\w/?=]*)/.exec(script);
    const port =
      parsed.command === 'gateway'
        ? portOf(parsed.flags.get('--listen'))
        : portOf(parsed.flags.get('--metrics'));
    const paths = parsed.command === 'gateway' ? ['/healthz', '/readyz'] : ['/metrics'];
    if (!url || Number(url[1]) !== port || !paths.includes(url[2]?.split('?')[0] ?? ''))
      problems.push(
        `${name}: its health check asks ${url?.[0] ?? 'nothing'}, not ${paths.join(' or ')} on port ${port}`,
      );
    if (hostsAgents(parsed)) {
      const opts = ((service.security_opt ?? []) as string[]).map(String);
      for (const needed of ['seccomp=unconfined', 'apparmor=unconfined', 'systempaths=unconfined'])
        if (!opts.includes(needed))
          problems.push(`${name}: hosts agents without security_opt ${needed}: no bubblewrap`);
      const home = ctx.dockerfile.env.TROUPE_HOME ?? '';
      if (mountOf(mounts, home)?.kind !== 'volume')
        problems.push(`${name}: its home ${home} (workspaces) is on no volume`);
    }
    if (parsed.command === 'gateway') {
      const tokens = String(parsed.flags.get('--tokens') ?? '');
      const mount = mountOf(mounts, tokens);
      if (mount?.kind !== 'volume' || mount.readOnly)
        problems.push(
          `${name}: --tokens ${tokens} is on no writable volume (troupe token and the id secret write there)`,
        );
      // The files it serves (GET /v1/tasks/{id}/files) are where a worker keeps them: <worker's home>/workspaces.
      const home = ctx.dockerfile.env.TROUPE_HOME ?? '';
      const flag = parsed.flags.get('--workspaces');
      const served = typeof flag === 'string' ? flag : `${home}/workspaces`;
      const servedOn = mountOf(mounts, served);
      const workerWorkspaces = mapValues(services)
        .filter(([, other]) => JSON.stringify(other.command ?? '').startsWith('["worker"'))
        .map(([, other]) => {
          const workerHome = mountOf(mountsOf(other), home);
          return `${workerHome?.source}:${posix.relative(workerHome?.target ?? '/', `${home}/workspaces`)}`;
        });
      const here = `${servedOn?.source}:${posix.relative(servedOn?.target ?? '/', served)}`;
      if (
        parsed.flags.has('--no-workspaces') ||
        servedOn?.kind !== 'volume' ||
        !workerWorkspaces.includes(here)
      )
        problems.push(
          `${name}: serves workspaces from ${served}, which is no worker's: it cannot serve task files`,
        );
    }
  }
  for (const volume of declaredVolumes)
    if (!usedVolumes.has(volume)) problems.push(`volume ${volume} is never used`);
  return problems;
}

// ---------------------------------------------------------------------------------------------------------------
// the systemd units

type Unit = Map<string, { section: string; value: string }[]>;

function parseUnit(text: string): Unit {
  const unit: Unit = new Map();
  let section = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) continue;
    const header = /^\[(.+)\]$/.exec(line);
    if (header) {
      section = header[1] ?? '';
      continue;
    }
    const [key = '', ...rest] = line.split('=');
    const entries = unit.get(key) ?? [];
    entries.push({ section, value: rest.join('=') });
    unit.set(key, entries);
  }
  return unit;
}

const unitValue = (unit: Unit, key: string) => unit.get(key)?.at(-1)?.value;

/** Options that stop bubblewrap from making its namespaces or mounting its /proc (docs/deploy.md). */
const BREAKS_BUBBLEWRAP: [string, (value: string) => boolean][] = [
  ['RestrictNamespaces', (v) => v !== 'no' && v !== 'false'],
  ['ProtectKernelTunables', (v) => v === 'yes' || v === 'true'],
  ['ProtectKernelLogs', (v) => v === 'yes' || v === 'true'],
  ['ProcSubset', (v) => v === 'pid'],
  ['PrivateUsers', (v) => v !== 'no' && v !== 'false'],
  ['SystemCallFilter', () => true],
  ['RestrictAddressFamilies', (v) => !v.split(/\s+/).includes('AF_NETLINK')],
];

async function unitProblems(file: string, text: string, stubDir: string): Promise<string[]> {
  const problems: string[] = [];
  const name = basename(file);
  const unit = parseUnit(text);
  const execStart = unitValue(unit, 'ExecStart') ?? '';
  const [program = '', ...argv] = execStart.split(/\s+/);
  if (basename(program) !== 'troupe' || !program.startsWith('/'))
    problems.push(`${name}: ExecStart runs ${program}, not troupe by its absolute path`);
  // systemd-analyze verify checks the unit's syntax and settings; the ExecStart program must exist for it.
  const stub = join(stubDir, 'troupe');
  const copy = join(stubDir, name);
  await writeFile(copy, text.replaceAll(program, stub));
  const verified = await execFileAsync('systemd-analyze', ['verify', '--man=no', copy]).catch(
    (error: { stderr?: string; code?: number }) => ({
      stdout: '',
      stderr: error.stderr ?? `exit ${error.code}`,
    }),
  );
  const complaints = verified.stderr
    .split('\n')
    .filter((line) => line.trim() !== '' && !/sysinit\.target|Failed to create .*\/start/.test(line));
  for (const complaint of complaints)
    problems.push(`${name}: systemd-analyze verify: ${complaint.replace(stubDir, '')}`);

  const parsed = await parseTroupeArgv(argv, name);
  problems.push(...parsed.problems);
  const environment: Record<string, string> = {};
  for (const entry of unit.get('Environment') ?? [])
    for (const pair of entry.value.split(/\s+/)) {
      const [key = '', ...value] = pair.split('=');
      environment[key] = value.join('=');
    }
  const killSignal = unitValue(unit, 'KillSignal') ?? 'SIGTERM';
  if (!['SIGTERM', 'SIGINT', 'SIGHUP'].includes(killSignal))
    problems.push(`${name}: KillSignal=${killSignal} is no signal troupe stops on (SIGTERM, SIGINT, SIGHUP)`);
  if (unitValue(unit, 'KillMode') !== 'mixed')
    problems.push(
      `${name}: KillMode=${unitValue(unit, 'KillMode') ?? 'control-group'}: the signal reaches the commands troupe stops itself`,
    );
  const stop = stopTimeoutOf(parsed, environment);
  const timeout = Number(unitValue(unit, 'TimeoutStopSec') ?? 90);
  if (!(timeout > stop))
    problems.push(`${name}: TimeoutStopSec=${timeout} is not above troupe's stop timeout ${stop} s`);
  const restart = unitValue(unit, 'Restart') ?? 'no';
  if (restart === 'no') problems.push(`${name}: Restart=no`);
  if (!(unitValue(unit, 'RestartPreventExitStatus') ?? '').split(/\s+/).includes('2'))
    problems.push(`${name}: restarts after exit code 2, a configuration error that a restart repeats`);
  const user = unitValue(unit, 'User');
  if (!user || user === 'root' || user === '0') problems.push(`${name}: runs as ${user ?? 'root'}`);
  if (!(unit.get('EnvironmentFile') ?? []).some((entry) => /\/nats\/[\w-]+\.env$/.test(entry.value)))
    problems.push(`${name}: has no EnvironmentFile of a nats-config user`);
  if ((unitValue(unit, 'MemoryDenyWriteExecute') ?? 'no') === 'yes')
    problems.push(`${name}: MemoryDenyWriteExecute=yes stops Node's JIT`);
  if (hostsAgents(parsed))
    for (const [key, breaks] of BREAKS_BUBBLEWRAP) {
      const value = unitValue(unit, key);
      if (value !== undefined && breaks(value)) problems.push(`${name}: ${key}=${value} stops bubblewrap`);
    }
  return problems;
}

// ---------------------------------------------------------------------------------------------------------------

const rootPackage = JSON.parse(read(join(repoRoot, 'package.json'))) as Record<string, unknown>;
let authDir: string;
let scratch: string;
let roles: NatsRole[];
let natsConfig: ParsedCommand | undefined;

/** Runs the compose file's nats-config command here, into a temporary directory, as its service would. */
async function runNatsConfig(compose: Record<string, unknown>, out: string) {
  const doc = interpolate(compose) as { services: Record<string, Record<string, unknown>> };
  const service = doc.services['nats-config'];
  if (!service) throw new Error('compose.yaml has no nats-config service');
  const { argv } = troupeArgvOf('nats-config', service);
  const parsed = await parseTroupeArgv(argv, 'nats-config');
  const mounts = mountsOf(service);
  const local = argv.map((arg, i) =>
    argv[i - 1] === '--out'
      ? out
      : parsed.positionals.includes(arg)
        ? (hostPathOf(mounts, posix.resolve('/pipelines', arg), deployDir) ?? arg)
        : arg,
  );
  const result = await troupe(local);
  if (result.code !== 0) throw new Error(`troupe ${local.join(' ')}: ${result.stderr}`);
  const written = [...result.stdout.matchAll(/^ {2}([\w-]+): (.*) \(\1\.nk, \1\.env\)$/gm)].map((match) => {
    const envFile = read(join(out, `${match[1]}.env`));
    return {
      name: match[1] ?? '',
      description: match[2] ?? '',
      nkey: /^NATS_NKEY=(.*)$/m.exec(envFile)?.[1] ?? '',
      inbox: /^TROUPE_INBOX=(.*)$/m.exec(envFile)?.[1] ?? '',
    };
  });
  return { parsed, roles: written };
}

const composeText = () => read(composePath);
const parseCompose = (text: string) => parseYaml(text, { merge: true }) as Record<string, unknown>;
const dockerFacts = () =>
  dockerfileProblems(read(dockerfilePath), read(join(repoRoot, '.dockerignore')), rootPackage);
const composeContext = (): ComposeContext => ({
  composeDir: deployDir,
  dockerfile: dockerFacts(),
  roles,
  authDir,
  natsConfig,
});
const units = () => readdirSync(unitsDir).filter((file) => file.endsWith('.service'));

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), 'troupe-deploy-'));
  authDir = join(scratch, 'auth');
  ({ parsed: natsConfig, roles } = await runNatsConfig(parseCompose(composeText()), authDir));
});

afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
});

describe('deploy/Dockerfile', () => {
  it('builds from the repository on node 20, installs the packed CLI and runs troupe as a user of its own', () => {
    expect(dockerFacts().problems).toEqual([]);
  });

  it.each([
    [
      'a COPY source the repository lacks',
      (t: string) => t.replace('COPY . .', 'COPY ./nowhere .'),
      'is not in the repository',
    ],
    [
      'a stage that does not exist',
      (t: string) => t.replace('--from=build', '--from=builder'),
      'names no earlier stage',
    ],
    ['no USER', (t: string) => t.replace(/^USER .*$/m, ''), 'sets no USER'],
    ['USER root', (t: string) => t.replace(/^USER .*$/m, 'USER root'), 'runs as root'],
    ['an entrypoint other than troupe', (t: string) => t.replace('"troupe"]', '"node"]'), 'not troupe'],
    [
      'a shell-form entrypoint',
      (t: string) => t.replace(/^ENTRYPOINT .*$/m, 'ENTRYPOINT troupe'),
      'not in exec form',
    ],
    [
      'an npm script package.json lacks',
      (t: string) => t.replace('npm ci && npm run pack', 'npm ci && npm run pak'),
      'no script pak',
    ],
    [
      'another Node',
      (t: string) => t.replace('node:20-bookworm-slim', 'node:22-bookworm-slim'),
      'not node:20',
    ],
    [
      "a tarball that is not the CLI's",
      (t: string) => t.replaceAll('dist/pack/troupe-cli-*.tgz', 'dist/pack/troupe-client-*.tgz'),
      "not the CLI's tarball",
    ],
    [
      'a COPY of what .dockerignore leaves out',
      (t: string) => t.replace('COPY . .', 'COPY .git .'),
      'is in .dockerignore',
    ],
    [
      'installing what was not copied',
      (t: string) => t.replace('npm install -g /tmp/troupe-cli.tgz', 'npm install -g /tmp/x.tgz'),
      'installs nothing copied',
    ],
  ])('finds %s', (_, breakIt, problem) => {
    const text = breakIt(read(dockerfilePath));
    const { problems } = dockerfileProblems(text, read(join(repoRoot, '.dockerignore')), rootPackage);
    expect(problems.join('\n')).toContain(problem);
  });

  it('finds a .dockerignore that leaves out what the build needs, and keeps secrets and local state out', () => {
    const broken = `${read(join(repoRoot, '.dockerignore'))}\nscripts\n`;
    const { problems } = dockerfileProblems(read(dockerfilePath), broken, rootPackage);
    expect(problems.join('\n')).toContain('leaves out scripts/buildCli.mjs');
    // A context without docs or READMEs is usual elsewhere; here pack ships the pipeline schema and a README each.
    for (const [line, left] of [
      ['docs', 'docs/schema/pipeline.schema.json'],
      ['**/*.md', 'packages/client/README.md'],
      ['apps/gateway/src', 'apps/gateway/src'],
    ]) {
      const without = `${read(join(repoRoot, '.dockerignore'))}\n${line}\n`;
      expect(
        dockerfileProblems(read(dockerfilePath), without, rootPackage).problems.join('\n'),
        line,
      ).toContain(`leaves out ${left}`);
    }
    const ignored = ignoreMatcher(read(join(repoRoot, '.dockerignore')).split('\n'));
    for (const path of [
      'node_modules',
      'apps/cli/node_modules/x',
      'apps/cli/dist/troupe/main.js',
      '.troupe/nats',
      'nats-users/ci.nk',
      '.git',
    ])
      expect(ignored(path), path).toBe(true);
    for (const path of ['apps/cli/src/main.ts', 'package-lock.json', 'patches', 'test/package.json'])
      expect(ignored(path), path).toBe(false);
  });
});

type Edit = (services: Record<string, Record<string, unknown>>) => void;

/** Follows `path` from a service to the object or list whose `last` entry an edit changes. */
function at(services: Record<string, Record<string, unknown>>, path: (string | number)[]) {
  const parent = path
    .slice(0, -1)
    .reduce<unknown>((node, key) => (node as Record<string, unknown>)[key], services);
  return { parent: parent as Record<string | number, unknown>, last: path.at(-1) as string | number };
}
const set =
  (path: (string | number)[], value: unknown): Edit =>
  (services) => {
    const { parent, last } = at(services, path);
    parent[last] = value;
  };
const drop =
  (path: (string | number)[]): Edit =>
  (services) => {
    const { parent, last } = at(services, path);
    delete parent[last];
  };
const push =
  (path: (string | number)[], ...values: unknown[]): Edit =>
  (services) => {
    const { parent, last } = at(services, path);
    (parent[last] as unknown[]).push(...values);
  };
const volumes =
  (service: string, change: (volumes: string[]) => string[]): Edit =>
  (services) => {
    const target = services[service] as { volumes: string[] };
    target.volumes = change(target.volumes);
  };

describe('deploy/compose.yaml', () => {
  it('is a valid Compose file whose services run real troupe commands on real files, in the right order', async () => {
    expect(await composeProblems(parseCompose(composeText()), composeContext())).toEqual([]);
    // The checks of a Troupe process apply to a service built from deploy/Dockerfile: each of Troupe's must be one,
    // or dropping its build would drop its checks with it.
    const services = parseCompose(composeText()).services as Record<string, Record<string, unknown>>;
    expect(
      Object.keys(services)
        .filter((name) => isTroupeService(services[name] ?? {}))
        .sort(),
    ).toEqual(['coordinator', 'gateway', 'nats-config', 'worker']);
  });

  const edited = (edit: Edit) => {
    const doc = parseCompose(composeText());
    edit(doc.services as Record<string, Record<string, unknown>>);
    return doc;
  };

  it.each<[string, Edit, string]>([
    [
      'a key Compose does not know',
      set(['worker', 'restart_policy'], 'always'),
      'unknown key restart_policy',
    ],
    [
      'a key a health check does not know',
      set(['gateway', 'healthcheck', 'intervall'], '15s'),
      'unknown key healthcheck.intervall',
    ],
    [
      'a key a depends_on entry does not know',
      set(['worker', 'depends_on', 'coordinator', 'conditon'], 'service_healthy'),
      'unknown key depends_on.coordinator.conditon',
    ],
    [
      'a condition Compose does not know',
      set(['worker', 'depends_on', 'coordinator', 'condition'], 'service_ready'),
      'service_ready is no condition',
    ],
    ['an unknown troupe command', set(['worker', 'command', 0], 'workers'), 'is no command'],
    ['an option the command lacks', push(['coordinator', 'command'], '--agents'), 'has no option --agents'],
    ['an option without its value', push(['gateway', 'command'], '--max-streams'), 'needs a value'],
    ['a pipeline file not mounted', set(['worker', 'command', 1], '/pipelines/nope.yaml'), 'not mounted'],
    [
      'a flag given a value',
      set(['worker', 'command', 4], '--json=yes'),
      '--json of troupe worker takes no value',
    ],
    [
      'a command without its arguments',
      set(['worker', 'command'], ['worker', '--json']),
      'troupe worker needs',
    ],
    [
      'a pipeline file troupe validate refuses',
      set(['worker', 'command', 1], '/pipelines/demo.script.yaml'),
      'troupe validate:',
    ],
    [
      'an inbox of no user',
      set(['gateway', 'environment', 'TROUPE_INBOX'], 'troupe._inbox.nobody'),
      'TROUPE_INBOX troupe._inbox.nobody is no user nats-config makes',
    ],
    [
      "users made for another cluster's replicas",
      set(['nats-config', 'command', 11], '1'),
      'nats-config: --replicas 1 for 3 NATS servers',
    ],
    [
      'waiting for a service that restarts to complete',
      set(['nats-config', 'restart'], 'always'),
      'which restarts',
    ],
    [
      'a build from another context',
      set(['coordinator', 'build'], { context: '.', dockerfile: 'deploy/Dockerfile' }),
      "build context is not the repository's root",
    ],
    [
      'a NATS config that is not mounted',
      set(['nats-1', 'command'], ['nats-server', '--config', '/etc/nats/other.conf']),
      'is no file mounted from deploy/',
    ],
    [
      'a declared volume no service mounts',
      volumes('nats-3', (v) => v.filter((volume) => !volume.startsWith('nats-3-data'))),
      'volume nats-3-data is never used',
    ],
    ['a depends_on on no service', set(['worker', 'depends_on'], { coordinater: {} }), 'which is no service'],
    ['waiting for health that is never checked', drop(['coordinator', 'healthcheck']), 'has no health check'],
    [
      'an undeclared volume',
      push(['worker', 'volumes'], 'cache:/var/cache/troupe'),
      'volume cache is not declared',
    ],
    [
      'a bind mount of nothing',
      push(['nats-1', 'volumes'], './nats/extra.conf:/etc/nats/extra.conf:ro'),
      'does not exist',
    ],
    [
      'a NATS config nats-server refuses',
      set(['nats-2', 'volumes', 0], '../README.md:/etc/nats/nats.conf:ro'),
      'nats-server -t',
    ],
    [
      'a stop grace period within the stop timeout',
      set(['worker', 'stop_grace_period'], '20s'),
      'stop_grace_period 20s',
    ],
    [
      'a --stop-timeout above the grace period',
      push(['gateway', 'command'], '--stop-timeout', '45'),
      'stop timeout 45',
    ],
    ['a health check on another port', set(['gateway', 'command', 2], '0.0.0.0:8081'), 'health check asks'],
    [
      'a health check on no endpoint of troupe',
      set(['worker', 'healthcheck', 'test', 3], "fetch('http://127.0.0.1:9464/health')"),
      'health check asks',
    ],
    [
      'a NATS_URL missing a server',
      set(['coordinator', 'environment', 'NATS_URL'], 'nats://nats-1:4222'),
      'is not the servers',
    ],
    [
      "a process under another role's user",
      (services) => {
        set(['worker', 'environment', 'NATS_NKEY'], '/etc/troupe/nats/gateway.nk')(services);
        set(['worker', 'environment', 'TROUPE_INBOX'], 'troupe._inbox.gateway')(services);
      },
      'a user for gateway',
    ],
    [
      'a seed nowhere nats-config wrote',
      set(['gateway', 'environment', 'NATS_NKEY'], '/run/gateway.nk'),
      'NATS_NKEY /run/gateway.nk',
    ],
    ["replicas that are not the cluster's", set(['coordinator', 'command', 4], '1'), 'on 3 NATS servers'],
    ['a worker without what bubblewrap needs', drop(['worker', 'security_opt']), 'no bubblewrap'],
    [
      "a gateway whose home is not the worker's",
      volumes('gateway', (v) => v.filter((volume) => !volume.startsWith('workspaces'))),
      'cannot serve task files',
    ],
    [
      'a gateway serving workspaces from elsewhere',
      push(['gateway', 'command'], '--workspaces', '/tmp/workspaces'),
      'cannot serve task files',
    ],
    [
      'a gateway serving no workspaces',
      push(['gateway', 'command'], '--no-workspaces'),
      'cannot serve task files',
    ],
    [
      'a tokens file on a read-only mount',
      volumes('gateway', (v) =>
        v.map((volume) => (volume.startsWith('gateway-config') ? `${volume}:ro` : volume)),
      ),
      'no writable volume',
    ],
    [
      'a volume on a directory the image does not own',
      volumes('worker', (v) =>
        v.map((volume) => volume.replace('workspaces:/var/lib/troupe', 'workspaces:/srv/troupe')),
      ),
      'which the image does not own',
    ],
    [
      'a NATS store on no volume',
      volumes('nats-3', (v) => v.slice(0, 2)),
      'JetStream store /data is on no volume',
    ],
    ['a long-running process that is not restarted', set(['gateway', 'restart'], 'no'), 'is not restarted'],
  ])('finds %s', async (_, edit, problem) => {
    const problems = await composeProblems(edited(edit), composeContext());
    expect(problems.join('\n')).toContain(problem);
  });

  it('finds a worker serving an agent its NATS user was not made for', async () => {
    const narrower = roles.map((role) =>
      role.name === 'agents' ? { ...role, description: role.description.replace(', reviewer', '') } : role,
    );
    const problems = await composeProblems(parseCompose(composeText()), {
      ...composeContext(),
      roles: narrower,
    });
    expect(problems).toEqual([
      'worker: serves agent demo.reviewer, which its NATS user agents was not made for',
    ]);
  });

  it('finds NATS nodes that do not form one cluster', async () => {
    const conf = join(scratch, 'nats-lonely.conf');
    const text = read(join(deployDir, 'nats', 'nats-3.conf'))
      .replace(/^server_name: nats-3/m, 'server_name: nats-1')
      .replace(/nats-route:\/\/nats-2:6222\n/, '');
    await writeFile(conf, text);
    const doc = edited(set(['nats-3', 'volumes', 0], `${relative(deployDir, conf)}:/etc/nats/nats.conf:ro`));
    const problems = (await composeProblems(doc, composeContext())).join('\n');
    expect(problems).toContain('NATS server names repeat');
    expect(problems).toContain('are not the cluster');
  });
});

describe('deploy/systemd', () => {
  let stubDir: string;
  beforeAll(async () => {
    stubDir = await mkdtemp(join(tmpdir(), 'troupe-units-'));
    await writeFile(join(stubDir, 'troupe'), '#!/bin/sh\n', { mode: 0o755 });
  });
  afterAll(() => rm(stubDir, { recursive: true, force: true }));

  it('has a unit for the coordinator, the worker and the gateway', () => {
    expect(units().sort()).toEqual([
      'troupe-coordinator.service',
      'troupe-gateway.service',
      'troupe-worker.service',
    ]);
  });

  it.each(units())('%s runs a real troupe command and stops as troupe stops', async (file) => {
    expect(await unitProblems(file, read(join(unitsDir, file)), stubDir)).toEqual([]);
  });

  it.each<[string, string, (text: string) => string, string]>([
    [
      'a key systemd does not know',
      'troupe-worker.service',
      (t) => t.replace('KillMode=mixed', 'KillMode=mixed\nKilMode=mixed'),
      "Unknown key 'KilMode'",
    ],
    [
      'an unknown troupe command',
      'troupe-worker.service',
      (t) => t.replace('bin/troupe worker ', 'bin/troupe workers '),
      'is no command',
    ],
    [
      'an option the command lacks',
      'troupe-gateway.service',
      (t) => t.replace('--json', '--jsonl'),
      'has no option --jsonl',
    ],
    [
      'a kill signal troupe does not stop on',
      'troupe-coordinator.service',
      (t) => t.replace('KillSignal=SIGTERM', 'KillSignal=SIGQUIT'),
      'KillSignal=SIGQUIT',
    ],
    [
      "a stop timeout within troupe's",
      'troupe-worker.service',
      (t) => t.replace('TimeoutStopSec=30', 'TimeoutStopSec=20'),
      'TimeoutStopSec=20',
    ],
    [
      'a --stop-timeout above TimeoutStopSec',
      'troupe-gateway.service',
      (t) => t.replace('--json', '--json --stop-timeout 40'),
      'stop timeout 40',
    ],
    [
      'TROUPE_STOP_TIMEOUT above TimeoutStopSec',
      'troupe-worker.service',
      (t) => t.replace('Environment=TROUPE_HOME', 'Environment=TROUPE_STOP_TIMEOUT=60 TROUPE_HOME'),
      'stop timeout 60',
    ],
    [
      'the signal sent to every process',
      'troupe-worker.service',
      (t) => t.replace('KillMode=mixed', 'KillMode=control-group'),
      'KillMode=control-group',
    ],
    [
      'no restart',
      'troupe-gateway.service',
      (t) => t.replace('Restart=on-failure', 'Restart=no'),
      'Restart=no',
    ],
    ['root', 'troupe-coordinator.service', (t) => t.replace('User=troupe', 'User=root'), 'runs as root'],
    [
      'troupe found on PATH',
      'troupe-worker.service',
      (t) => t.replace('ExecStart=/usr/local/bin/troupe ', 'ExecStart=troupe '),
      'not troupe by its absolute path',
    ],
    [
      'a restart after a configuration error',
      'troupe-gateway.service',
      (t) => t.replace('RestartPreventExitStatus=2', ''),
      'restarts after exit code 2',
    ],
    [
      'no NATS user',
      'troupe-worker.service',
      (t) => t.replace(/^EnvironmentFile=\/etc\/troupe\/nats.*$/m, ''),
      'EnvironmentFile of a nats-config user',
    ],
    [
      'RestrictNamespaces on an agent host',
      'troupe-worker.service',
      (t) => t.replace('ProtectHome=yes', 'ProtectHome=yes\nRestrictNamespaces=yes'),
      'RestrictNamespaces=yes stops bubblewrap',
    ],
    [
      'ProtectKernelTunables on an agent host',
      'troupe-coordinator.service',
      (t) =>
        t
          .replace(' --no-agents', '')
          .replace('ProtectHome=yes', 'ProtectHome=yes\nProtectKernelTunables=yes'),
      'ProtectKernelTunables=yes stops bubblewrap',
    ],
    [
      "no netlink for bubblewrap's loopback",
      'troupe-worker.service',
      (t) => t.replace(' AF_NETLINK', ''),
      'RestrictAddressFamilies',
    ],
    [
      'MemoryDenyWriteExecute',
      'troupe-gateway.service',
      (t) => t.replace('ProtectHome=yes', 'ProtectHome=yes\nMemoryDenyWriteExecute=yes'),
      "stops Node's JIT",
    ],
  ])('finds %s', async (_, file, breakIt, problem) => {
    const problems = await unitProblems(file, breakIt(read(join(unitsDir, file))), stubDir);
    expect(problems.join('\n')).toContain(problem);
  });
});

describe('the health checks of deploy/compose.yaml', () => {
  let h: Harness;
  let metrics: Awaited<ReturnType<typeof serveMetrics>>;
  let gatewayUrl: string;
  let closeGateway: () => Promise<void>;
  let failing: Server;

  beforeAll(async () => {
    h = await startHarness([examplePath('demo.yaml')]);
    const gateway = await startAdminGateway(h.bus, 'trp_health');
    gatewayUrl = gateway.url;
    closeGateway = () => gateway.close();
    metrics = await serveMetrics(new TroupeMetrics(), { host: '127.0.0.1', port: 0 });
    failing = createServer((_, response) => response.writeHead(503).end());
    await new Promise<void>((done) => failing.listen(0, '127.0.0.1', done));
  });

  afterAll(async () => {
    await closeGateway?.();
    await metrics?.close();
    failing?.close();
    await h?.stop();
  });

  /** Runs a service's health check command with its URL pointed at `base` (the port here is a free one). */
  async function runHealthCheck(service: string, base: string): Promise<number> {
    const doc = interpolate(parseCompose(composeText())) as {
      services: Record<string, { healthcheck: { test: string[] } }>;
    };
    const [kind, program, ...args] = doc.services[service]?.healthcheck.test ?? [];
    expect(kind).toBe('CMD');
    expect(program).toBe('node');
    const pointed = args.map((arg) => arg.replace(/http:\/\/127\.0\.0\.1:\d+/, base));
    return execFileAsync(process.execPath, pointed, { timeout: 10_000 }).then(
      () => 0,
      (error: { code?: number }) => error.code ?? 1,
    );
  }

  it("passes for the coordinator and the worker on troupe's metrics server, and fails when it answers otherwise", async () => {
    const base = metrics.url.replace(/\/metrics$/, '');
    expect(await runHealthCheck('coordinator', base)).toBe(0);
    expect(await runHealthCheck('worker', base)).toBe(0);
    expect(
      await runHealthCheck('worker', `http://127.0.0.1:${(failing.address() as AddressInfo).port}`),
    ).toBe(1);
  });

  it("passes for the gateway on a gateway's /healthz with NATS up, and fails with nothing listening", async () => {
    expect(await runHealthCheck('gateway', gatewayUrl)).toBe(0);
    const closed = createServer();
    await new Promise<void>((done) => closed.listen(0, '127.0.0.1', done));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((done) => closed.close(() => done()));
    expect(await runHealthCheck('gateway', `http://127.0.0.1:${port}`)).toBe(1);
  });
});
