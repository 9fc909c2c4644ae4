import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { CliError } from './cliError.ts';

/**
 * The pipeline file of pipeline `name` in `dir`, for a command given a task but no file (`troupe replay`): the one
 * YAML file there that declares `name: <name>` and a `flow`, as the file `troupe up` was started with in that
 * directory. None, or more than one, is refused with what was found, so the wrong file is never guessed.
 */
export async function findPipelineFile(name: string, dir = process.cwd()): Promise<string> {
  const entries = await readdir(dir, { withFileTypes: true }).catch(() => []);
  const found: string[] = [];
  for (const entry of entries) {
    if (!entry.isFile() || !/\.ya?ml$/.test(entry.name)) continue;
    const file = join(dir, entry.name);
    if (declares(await readFile(file, 'utf8').catch(() => ''), name)) found.push(file);
  }
  const shown = (files: string[]) => files.map((file) => relative(process.cwd(), file) || file).join(', ');
  if (found.length === 1) return found[0] as string;
  if (found.length === 0) {
    throw new CliError(
      `no pipeline file in ${dir} declares pipeline ${name}; give the file with --pipeline <file>`,
      2,
    );
  }
  throw new CliError(
    `${found.length} files in ${dir} declare pipeline ${name} (${shown(found)}); say which with --pipeline <file>`,
    2,
  );
}

/** Whether YAML `text` is a pipeline named `name`; a file that does not parse is not one. */
function declares(text: string, name: string): boolean {
  try {
    const parsed = parseYaml(text) as { name?: unknown; flow?: unknown } | null;
    return parsed?.name === name && parsed.flow !== undefined;
  } catch {
    return false;
  }
}
