import { isDeepStrictEqual } from 'node:util';
import type { ApprovalDecision, EventOf, TroupeEvent } from '@troupe/protocol';
import { type ApprovalAsk, type HumanGate, ToolError } from '@troupe/runtime';

/**
 * People as a `model` mode run meets them: nobody is asked. An approval of a call answers with the decision the
 * recording holds for a request of the same tool and arguments (each recorded request once, the earliest first), and
 * is denied, saying why, where it holds none; a question gets the answer the recording holds for the same question,
 * or fails.
 */
export function modelModePeople(events: readonly TroupeEvent[]): HumanGate {
  const requests = events.filter((e): e is EventOf<'approval.requested'> => e.kind === 'approval.requested');
  const questions = events.filter((e): e is EventOf<'human.asked'> => e.kind === 'human.asked');
  const take = <T>(list: T[], match: (item: T) => boolean): T | undefined => {
    const at = list.findIndex(match);
    return at < 0 ? undefined : list.splice(at, 1)[0];
  };
  return {
    approve: async (ask: ApprovalAsk): Promise<ApprovalDecision> => {
      const requested = take(
        requests,
        (e) => e.data.tool === ask.tool && sameJson(e.data.arguments, ask.arguments),
      );
      if (!requested)
        return {
          decision: 'deny',
          reason: `the recording holds no approval of ${ask.tool} with these arguments, and a model mode run asks nobody`,
          by: 'eval',
        };
      const decided = events.find(
        (e): e is EventOf<'approval.decided'> =>
          e.kind === 'approval.decided' && e.data.approvalId === requested.data.approvalId,
      );
      if (!decided)
        return {
          decision: 'deny',
          reason: `nobody decided approval ${requested.data.approvalId} in the recorded run`,
          by: 'eval',
        };
      const { decision, reason, by } = decided.data;
      return { decision, ...(reason === undefined ? {} : { reason }), ...(by === undefined ? {} : { by }) };
    },
    ask: async (question: string): Promise<string> => {
      const asked = take(questions, (e) => e.data.question === question);
      if (!asked)
        throw new ToolError(
          'not_found',
          'the recording holds no such question, and a model mode run asks nobody',
        );
      const answered = events.find(
        (e): e is EventOf<'human.answered'> =>
          e.kind === 'human.answered' && e.data.questionId === asked.data.questionId,
      );
      if (!answered)
        throw new ToolError(
          'timeout',
          `nobody answered question ${asked.data.questionId} in the recorded run`,
        );
      return answered.data.answer;
    },
  };
}

function sameJson(a: string, b: string): boolean {
  try {
    return isDeepStrictEqual(JSON.parse(a), JSON.parse(b));
  } catch {
    return a === b;
  }
}
