import { readdir, readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { submitTask } from '@troupe/client';
import { createLogger, taskWorkspace } from '@troupe/runtime';
import { formatEvent } from '../format/formatEvent.ts';
import { natsUrlFromEnv, resolveHome } from '../home.ts';
import { newTaskId } from '../taskToSubmit.ts';
import { waitForFinal } from '../watch.ts';
import { start } from './up.ts';

export interface DemoOptions {
  home?: string;
  goal: string;
  timeout: number;
}

/**
 * `troupe demo`: `up` + `submit --wait` in one process. Starts NATS and the coordinator, submits one task,
 * prints the message flow live until the task ends, shows what the agents wrote, and stops everything.
 */
export async function demo(file: string, options: DemoOptions): Promise<number> {
  const home = resolveHome(options.home);
  const logFile = join(home, 'demo.log');
  const logger = createLogger({ level: 'info', destination: await openLog(logFile) });
  const service = await start([file], { home, agents: true, concurrency: 4 }, natsUrlFromEnv(), logger);
  const pipeline = service.pipelines[0]?.config.name ?? '';
  const color = process.stdout.isTTY;
  const say = (line: string) => process.stdout.write(`${line}\n`);
  try {
    say(
      `troupe: NATS on ${service.url}${service.embedded ? ' (embedded)' : ''}; pipeline ${pipeline}; log in ${relative(process.cwd(), logFile)}`,
    );
    const taskId = newTaskId();
    const watcher = waitForFinal(service.bus, { taskId, pipeline }, (event) =>
      say(formatEvent(event, { color })),
    );
    await service.bus.flush();
    say(`submitting task ${taskId}: ${options.goal}\n`);
    await submitTask(service.bus, pipeline, { id: taskId, goal: options.goal });
    const final = await Promise.race([
      watcher.final,
      new Promise<undefined>((r) => setTimeout(() => r(undefined), options.timeout * 1_000).unref()),
    ]);
    watcher.stop();
    if (final === undefined) {
      say(`\nthe task did not finish within ${options.timeout} s`);
      return 1;
    }
    const workspace = taskWorkspace(join(home, 'workspaces'), pipeline, taskId);
    say(
      `\n${final.kind === 'task.completed' ? 'done' : 'failed'}; the task's workspace is ${relative(process.cwd(), workspace)}`,
    );
    await showFiles(workspace, say);
    return final.kind === 'task.completed' ? 0 : 1;
  } finally {
    await service.stop();
  }
}

async function openLog(path: string) {
  const { mkdir } = await import('node:fs/promises');
  const { default: pino } = await import('pino');
  await mkdir(join(path, '..'), { recursive: true });
  return pino.destination({ dest: path, sync: true });
}

async function showFiles(workspace: string, say: (line: string) => void): Promise<void> {
  const entries = await readdir(workspace, { recursive: true, withFileTypes: true }).catch(() => []);
  for (const entry of entries.filter((e) => e.isFile())) {
    const path = join(entry.parentPath, entry.name);
    const text = await readFile(path, 'utf8');
    say(`\n--- ${relative(workspace, path)} ---\n${text.trimEnd()}`);
  }
}
