import { readFile } from 'node:fs/promises';
import { parse } from 'yaml';
import { ModelError } from '../errors.ts';
import { Script } from './script.ts';

/** Reads a YAML or JSON script file; a bad file is a `config` error naming the file and what is wrong. */
export async function loadScript(path: string): Promise<Script> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new ModelError('config', `cannot read script ${path}: ${(error as Error).message}`, {
      cause: error,
    });
  }
  return parseScript(text, path);
}

export function parseScript(text: string, source = 'script'): Script {
  let raw: unknown;
  try {
    raw = parse(text);
  } catch (error) {
    throw new ModelError('config', `${source}: not valid YAML: ${(error as Error).message}`, {
      cause: error,
    });
  }
  const result = Script.safeParse(raw);
  if (result.success) return result.data;
  const problems = result.error.issues.map((i) => `${i.path.join('.') || '(root)'}: ${i.message}`).join('; ');
  throw new ModelError('config', `${source}: invalid script: ${problems}`);
}
