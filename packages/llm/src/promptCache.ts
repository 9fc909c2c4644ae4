import type { CacheSetting, CacheTtl, ModelRequest } from './types.ts';

/**
 * The lifetime a request's cached prefix is asked for, or `undefined` when caching is off: a model entry's own
 * `{ ttl }` wins, else the runtime's hint on the request, else the provider's 5-minute default.
 *
 * @example
 * promptCacheTtl('auto', { cache: { ttl: '1h' } }); // '1h'
 * promptCacheTtl({ ttl: '5m' }, { cache: { ttl: '1h' } }); // '5m'
 * promptCacheTtl('off', { cache: { ttl: '1h' } }); // undefined
 */
export function promptCacheTtl(
  setting: CacheSetting,
  request: Pick<ModelRequest, 'cache'>,
): CacheTtl | undefined {
  if (setting === 'off') return undefined;
  if (setting !== 'auto') return setting.ttl;
  return request.cache?.ttl ?? '5m';
}
