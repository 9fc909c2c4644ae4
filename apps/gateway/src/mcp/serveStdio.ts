import { type StdioServerHandle, serveStdio } from '@modelcontextprotocol/server/stdio';
import type { JetStreamBus } from '@troupe/runtime';
import { GatewayActions } from '../actions.ts';
import type { Principal } from '../auth.ts';
import { troupeMcpOptions } from './mcpOptions.ts';
import { withoutRepeats } from './repeatedWarnings.ts';
import { troupeMcpServer } from './troupeMcpServer.ts';

/**
 * Serves Troupe as an MCP server on this process's stdin and stdout (`troupe mcp`), acting as `who` over `bus`:
 * stdout carries MCP messages only, so whatever else the process says must go to stderr. Closing it (the host went,
 * a signal) ends the calls under way but leaves their tasks running, as a gateway that stops does: they are durable,
 * and `troupe status` or `troupe_get` reads them. A call the host cancels cancels its task.
 */
export function serveMcpStdio(
  bus: JetStreamBus,
  who: Principal,
  onerror: (error: Error) => void,
): StdioServerHandle {
  const closing = new AbortController();
  const options = {
    ...troupeMcpOptions(bus, new GatewayActions(bus)),
    closing: closing.signal,
    warn: withoutRepeats((message) => onerror(new Error(message))),
  };
  // Heard before the transport hears it (listeners run in the order they were added): the host closing its end ends
  // the calls under way, which must not read as the host cancelling them.
  const hostGone = () => closing.abort();
  process.stdin.once('end', hostGone).once('close', hostGone);
  const served = serveStdio(({ era }) => troupeMcpServer(options, who, { era }), { onerror });
  return {
    close: () => {
      closing.abort();
      process.stdin.off('end', hostGone).off('close', hostGone);
      return served.close();
    },
  };
}
