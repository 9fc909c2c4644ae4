import { type StdioServerHandle, serveStdio } from '@modelcontextprotocol/server/stdio';
import type { NatsBus } from '@troupe/runtime';
import { GatewayActions } from '../actions.ts';
import type { Principal } from '../auth.ts';
import { troupeMcpOptions } from './mcpOptions.ts';
import { withoutRepeats } from './repeatedWarnings.ts';
import { troupeMcpServer } from './troupeMcpServer.ts';

/**
 * Serves Troupe as an MCP server on this process's stdin and stdout (`troupe mcp`), acting as `who` over `bus`:
 * stdout carries MCP messages only, so whatever else the process says must go to stderr.
 */
export function serveMcpStdio(
  bus: NatsBus,
  who: Principal,
  onerror: (error: Error) => void,
): StdioServerHandle {
  const options = {
    ...troupeMcpOptions(bus, new GatewayActions(bus)),
    warn: withoutRepeats((message) => onerror(new Error(message))),
  };
  return serveStdio(({ era }) => troupeMcpServer(options, who, { era }), { onerror });
}
