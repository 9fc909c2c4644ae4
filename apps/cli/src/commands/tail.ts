import { formatEvent, formatInvalid } from '../format/formatEvent.ts';
import { connectCli, type ServerOptions } from '../server.ts';
import { watchEvents } from '../watch.ts';

export interface TailOptions extends ServerOptions {
  task?: string;
  pipeline?: string;
  json: boolean;
}

/** `troupe tail`: prints the live message flow, one line per event, until interrupted. */
export async function tail(options: TailOptions): Promise<number> {
  const bus = await connectCli(options, 'troupe-tail');
  const color = process.stdout.isTTY && !options.json;
  const write = (line: string) => process.stdout.write(`${line}\n`);
  watchEvents(bus, {
    ...(options.task ? { taskId: options.task } : {}),
    ...(options.pipeline ? { pipeline: options.pipeline } : {}),
    invalid: options.task === undefined,
    onEvent: (event) => write(options.json ? JSON.stringify(event) : formatEvent(event, { color })),
    onInvalid: (event) => {
      if (options.pipeline && event.pipeline !== options.pipeline) return;
      write(options.json ? JSON.stringify(event) : formatInvalid(event, { color }));
    },
  });
  await bus.flush();
  process.stderr.write(`watching ${options.task ? `task ${options.task}` : 'all tasks'}; Ctrl-C to stop\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGINT', resolve);
    process.once('SIGTERM', resolve);
  });
  await bus.close();
  return 0;
}
