import { createRequire } from 'node:module';
import { CLIENT_WAIT, OperationError, PipelineRegistry } from '@troupe/client';
import { errorMessage } from '@troupe/protocol';
import type { NatsBus } from '@troupe/runtime';
import type { GatewayActions } from '../actions.ts';
import { roundStateCodec } from './roundState.ts';
import type { TroupeMcpOptions } from './troupeMcpServer.ts';

/**
 * What the MCP servers of a gateway or a `troupe mcp` run over: its NATS connection and actions, the pipeline
 * registry, and the round-state signing key (derived from the gateway's id secret, which every gateway of a
 * deployment shares; random per process without one).
 */
export function troupeMcpOptions(
  bus: NatsBus,
  actions: GatewayActions,
  secret?: Uint8Array | string,
): TroupeMcpOptions {
  let registry: Promise<PipelineRegistry> | undefined;
  return {
    bus,
    actions,
    codec: roundStateCodec(secret),
    version: createRequire(import.meta.url)('@troupe/gateway/package.json').version,
    pipelines: async () => {
      registry ??= PipelineRegistry.open(bus, CLIENT_WAIT).catch((error: unknown) => {
        registry = undefined;
        throw new OperationError(
          'no_coordinator',
          `no Troupe coordinator has run on this server yet (${errorMessage(error)})`,
        );
      });
      return (await registry).all();
    },
  };
}
