import { z } from 'zod';

/**
 * What `troupe up` leaves under its home directory (`server.json`) so other commands find the server it started:
 * written by one process, read by others (`troupe submit`, `troupe down`, the next `troupe up`).
 */
export const ServerRecord = z.object({
  url: z.string(),
  /** The `troupe up` process. */
  pid: z.number().int(),
  /** Its embedded nats-server, so the next `troupe up` can stop it if `troupe up` died without stopping it. */
  natsPid: z.number().int().optional(),
  startedAt: z.string(),
});
export type ServerRecord = z.infer<typeof ServerRecord>;

/** The content of a home's lock file (`up.lock`): the `troupe up` holding the home, and its nats-server once started. */
export const HomeLock = z.object({ pid: z.number().int(), natsPid: z.number().int().optional() });
export type HomeLock = z.infer<typeof HomeLock>;
