import { createRequire } from 'node:module';
import { CLIENT_WAIT, OperationError, PipelineRegistry } from '@troupe/client';
import { errorMessage, type PipelineRegistration } from '@troupe/protocol';
import type { JetStreamBus } from '@troupe/runtime';
import type { GatewayActions } from '../actions.ts';
import { roundStateCodec } from './roundState.ts';
import type { TroupeMcpOptions } from './troupeMcpServer.ts';

/**
 * What the MCP servers of a gateway or a `troupe mcp` run over: its NATS connection and actions, the pipeline
 * registry, and the round-state signing key (derived from the gateway's id secret, which every gateway of a
 * deployment shares; random per process without one).
 */
export function troupeMcpOptions(
  bus: JetStreamBus,
  actions: GatewayActions,
  secret?: Uint8Array | string,
): TroupeMcpOptions {
  let registry: Promise<PipelineRegistry> | undefined;
  // Every 2026-07-28 request and every 2025 session's refresh reads the pipelines: callers within a second share a
  // read.
  let recent: { at: number; read: Promise<PipelineRegistration[]> } | undefined;
  const read = async () => {
    registry ??= PipelineRegistry.open(bus, CLIENT_WAIT).catch((error: unknown) => {
      registry = undefined;
      throw new OperationError(
        'no_coordinator',
        `no Troupe coordinator has run on this server yet (${errorMessage(error)})`,
      );
    });
    return (await registry).all();
  };
  return {
    bus,
    actions,
    codec: roundStateCodec(secret),
    version: createRequire(import.meta.url)('@troupe/gateway/package.json').version,
    pipelines: () => {
      if (recent && Date.now() - recent.at < 1_000) return recent.read;
      const current = { at: Date.now(), read: read() };
      recent = current;
      // A failed read is not kept: the next caller tries again.
      current.read.catch(() => {
        if (recent === current) recent = undefined;
      });
      return current.read;
    },
  };
}
