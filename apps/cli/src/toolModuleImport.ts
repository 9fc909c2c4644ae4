import { execFile } from 'node:child_process';
import { pathToFileURL } from 'node:url';
import type { ImportModule } from '@troupe/coordinator';

const TYPESCRIPT = /\.(ts|mts|cts)$/;

/**
 * How `troupe` loads a pipeline's tool modules: JavaScript with Node's `import()`, TypeScript too once tsx's loader is
 * registered, which strips types without checking them (run `tsc` for that). tsx is loaded only when a TypeScript
 * module is named, so a start without one does not pay for it.
 */
export const importToolModule: ImportModule = async (file) => {
  const url = pathToFileURL(file).href;
  if (TYPESCRIPT.test(file)) await registerTsx();
  try {
    return await import(url);
  } catch (error) {
    if (error instanceof SyntaxError) await locateSyntaxError(error, file);
    throw error;
  }
};

let tsx: Promise<void> | undefined;

/**
 * Registers tsx's loaders for the rest of the process, once. Not `tsImport`: its private namespace loads every package
 * a module imports again through tsx (a module on @troupe/runtime took 1.9 s that way, 1.1 s this way). Both loaders:
 * a `.ts` file in a package that is not `"type": "module"` (what `npm init` writes, or no package.json at all) is
 * CommonJS to Node, which then requires it, and without tsx's require hook Node failed it as an ES module required
 * in a cycle.
 */
function registerTsx(): Promise<void> {
  tsx ??= Promise.all([import('tsx/esm/api'), import('tsx/cjs/api')]).then(([esm, cjs]) => {
    esm.register();
    cjs.register();
  });
  return tsx;
}

/**
 * Node's `import()` keeps where a JavaScript module fails to parse to itself (it prints it only for an uncaught
 * error), so `node --check` is asked, and the place is given as esbuild gives it for TypeScript: `errors[0].location`.
 */
async function locateSyntaxError(error: SyntaxError, file: string): Promise<void> {
  const report = await new Promise<string>((resolve) => {
    execFile(process.execPath, ['--check', file], { timeout: 10_000 }, (_failed, _stdout, stderr) =>
      resolve(stderr),
    );
  });
  // `file:///…/tool.mjs:2`, the line itself, then carets under the offending part.
  const [header = '', , carets = ''] = report.split('\n');
  const line = /:(\d+)$/.exec(header)?.[1];
  if (line === undefined) return;
  const column = Math.max(0, carets.indexOf('^'));
  Object.assign(error, { errors: [{ text: error.message, location: { line: Number(line), column } }] });
}
