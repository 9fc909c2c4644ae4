import { access, mkdir, readFile, writeFile } from 'node:fs/promises';
import { basename, join, relative, resolve } from 'node:path';
import { CliError } from '../cliError.ts';
import { troupeCommand } from '../invocation.ts';

export interface InitOptions {
  /** The pipeline's name; by default the directory's, made a valid name. */
  name?: string;
}

const PIPELINE = 'pipeline.yaml';
const SCRIPT = 'pipeline.script.yaml';

/**
 * `troupe init [dir]`: writes a starter pipeline (a writer and a reviewer, on the offline `scripted` model), its
 * script, and a `.gitignore` entry for `.troupe/`, so `troupe up pipeline.yaml` runs at once; then says what to
 * change to use a real model.
 */
export async function init(dir: string, options: InitOptions): Promise<number> {
  const target = resolve(dir);
  const name = options.name ?? nameFrom(basename(target));
  if (!/^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/.test(name)) {
    throw new CliError(`"${name}" is not a pipeline name: use a-z, 0-9 and "-" (pass --name)`, 2);
  }
  await mkdir(target, { recursive: true });
  for (const file of [PIPELINE, SCRIPT]) {
    if (await exists(join(target, file))) {
      throw new CliError(`${join(shown(target), file)} already exists; nothing was written`);
    }
  }
  await writeFile(join(target, PIPELINE), pipelineYaml(name));
  await writeFile(join(target, SCRIPT), SCRIPT_YAML);
  const ignored = await ignoreHome(target);
  const at = shown(target);
  const cd = at === '.' ? '' : `cd ${at} && `;
  const troupe = troupeCommand();
  process.stdout.write(
    `wrote ${join(at, PIPELINE)} (pipeline ${name}) and ${join(at, SCRIPT)}${ignored ? `; .troupe/ added to ${join(at, '.gitignore')}` : ''}\n\n` +
      `  run it:          ${cd}${troupe} up ${PIPELINE}\n` +
      `  give it a task:  ${troupe} submit ${name} "Write a haiku about NATS" --wait\n` +
      `  or all at once:  ${cd}${troupe} demo ${PIPELINE}\n\n` +
      `It runs offline on scripted replies (${SCRIPT}); to use a real model, see the comments at the top of ${PIPELINE}.\n`,
  );
  return 0;
}

/** A path as a person would type it from here: relative below the current directory, else absolute. */
function shown(path: string): string {
  const from = relative(process.cwd(), path);
  return from === '' ? '.' : from.startsWith('..') ? path : from;
}

/** A directory name as a pipeline name: lower case, other characters as `-`. */
function nameFrom(directory: string): string {
  const name = directory
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 63);
  return name === '' ? 'starter' : name;
}

/** Adds `.troupe/` to the directory's .gitignore unless it is there; false when it already was. */
async function ignoreHome(target: string): Promise<boolean> {
  const file = join(target, '.gitignore');
  const current = await readFile(file, 'utf8').catch(() => '');
  if (
    current.split('\n').some((line) => ['.troupe', '.troupe/', '/.troupe', '/.troupe/'].includes(line.trim()))
  ) {
    return false;
  }
  const separator = current === '' || current.endsWith('\n') ? '' : '\n';
  await writeFile(
    file,
    `${current}${separator}# Troupe's local data: the embedded NATS store, workspaces, logs\n.troupe/\n`,
  );
  return true;
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}

const pipelineYaml = (
  name: string,
) => `# A starter pipeline written by \`troupe init\`: a writer drafts a short text into the task's workspace and a
# reviewer approves it or sends it back with feedback. The whole reference: docs/config.md.
#
# It runs offline on the \`scripted\` model, whose replies are in ${SCRIPT}. To use a real model, add one under
# \`models\` and make it the default, e.g. (with OPENAI_API_KEY set in the environment):
#
#   models:
#     gpt: { provider: openai, model: gpt-5-mini }
#   defaults: { model: gpt }
#
# or \`{ provider: anthropic, model: claude-sonnet-4-6 }\` with ANTHROPIC_API_KEY.
#
# Tools of your own: export them from a module of yours (TypeScript or JavaScript), name it here and list the tool
# under an agent's \`tools\`; \`troupe up\` and \`troupe worker\` load it (docs/tools.md, "Writing your own tool"):
#
#   tools:
#     modules: [./tools/wordCount.ts]
version: 1
name: ${name}
description: Draft a short text and review it.

models:
  scripted: { provider: scripted, script: ./${SCRIPT} }

defaults:
  model: scripted
  maxTurns: 8

agents:
  writer:
    instructions: |
      You are the writer. Do what the task asks, writing the result to draft.md with write_file, then reply with
      a one-line summary. When the reviewer sends feedback, address it.
    tools: [write_file, read_file]
    permissions:
      - { tool: write_file, decision: allow, paths: ["*.md"] }
  reviewer:
    instructions: |
      You are the reviewer. Read draft.md and judge it against the task: approve it, or reject it with concrete
      feedback.
    tools: [read_file]

flow:
  - { id: write, kind: agent, agent: writer }
  - { id: review, kind: review, agent: reviewer, onReject: write, maxRounds: 2, onMaxRounds: fail }
`;

const SCRIPT_YAML = `# Scripted replies for pipeline.yaml, in order, for every task: the writer writes and reports, the reviewer reads
# and approves. Replace the model in pipeline.yaml to have a real one answer instead.
agents:
  writer:
    - toolCalls:
        - name: write_file
          arguments:
            path: draft.md
            content: |
              Subjects fan out wide,
              one message, many listeners;
              the stream keeps the rest.
    - content: Wrote draft.md.
  reviewer:
    - toolCalls:
        - name: read_file
          arguments: { path: draft.md }
    - content: '{"decision": "approve", "feedback": "Short, on topic, and complete."}'
`;
