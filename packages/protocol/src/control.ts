import { z } from 'zod';

/** A person's decision on a pending approval, on `troupe.approvals.<taskId>.<approvalId>`. */
export const ApprovalDecision = z.strictObject({
  decision: z.enum(['allow', 'deny']),
  reason: z.string().max(10_000).optional(),
  by: z.string().max(200).optional(),
});
export type ApprovalDecision = z.infer<typeof ApprovalDecision>;

/** A control message for a running task, on `troupe.control.<taskId>`. */
export const ControlMessage = z.strictObject({
  action: z.literal('cancel'),
  reason: z.string().max(10_000).optional(),
});
export type ControlMessage = z.infer<typeof ControlMessage>;

/** The reply sent when a request fails validation or cannot be served. */
export const ErrorReply = z.object({
  ok: z.literal(false),
  error: z.object({ code: z.string(), message: z.string() }),
});
export type ErrorReply = z.infer<typeof ErrorReply>;
