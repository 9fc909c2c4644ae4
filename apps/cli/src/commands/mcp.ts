import { hostname, userInfo } from 'node:os';
import { serveMcpStdio } from '@troupe/gateway';
import { createLogger } from '@troupe/runtime';
import { logUnhandledRejections } from '../lastResort.ts';
import { connectCli, type ServerOptions } from '../server.ts';

export interface McpCommandOptions extends ServerOptions {
  /** Only these pipelines are tools; every one the NATS user reaches when absent. */
  pipeline: string[];
  by?: string;
}

/**
 * `troupe mcp`: Troupe as an MCP server on stdin and stdout, for hosts that start a command (Claude Desktop, VS Code,
 * …). It acts with the NATS user it connects as; stdout carries MCP messages only, everything else goes to stderr.
 * Runs until the host closes stdin, or a signal stops it.
 */
export async function mcp(options: McpCommandOptions): Promise<number> {
  const bus = await connectCli(options, 'troupe-mcp');
  // A host's server must not die of one stray rejection: it is logged (on stderr, like every line but MCP's).
  logUnhandledRejections(
    createLogger({ level: 'warn', destination: process.stderr as never, pretty: process.stderr.isTTY }),
  );
  const who = {
    name: options.by ?? `${userInfo().username}@${hostname()}`,
    scopes: ['admin' as const],
    ...(options.pipeline.length > 0 ? { pipelines: options.pipeline } : {}),
  };
  const served = serveMcpStdio(bus, who, (error) => process.stderr.write(`troupe mcp: ${error.message}\n`));
  process.stderr.write(`troupe mcp: serving MCP on stdio as ${who.name}\n`);
  await new Promise<void>((resolve) => {
    process.stdin.once('close', resolve);
    process.stdin.once('end', resolve);
    for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.once(signal, resolve);
  });
  await served.close().catch(() => undefined);
  await bus.close();
  return 0;
}
