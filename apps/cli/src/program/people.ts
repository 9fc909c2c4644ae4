import type { Command } from 'commander';
import { CliError } from '../cliError.ts';
import { commands } from '../commandModules.ts';
import { commandAction } from './commandAction.ts';
import { homeOption, pipelinesOption, serverOption } from './options.ts';

/**
 * A decision's reason, given after the id as `answer` takes its text (`troupe deny ap-1 "not on a Friday"`) or, as
 * before, with `--reason`; both at once is a mistake to point out, not to choose between.
 */
const reasonOf = (positional: string | undefined, options: { reason?: string }): string | undefined => {
  if (positional !== undefined && options.reason !== undefined && positional !== options.reason)
    throw new CliError('give the reason once: after the id, or with --reason', 2);
  return positional ?? options.reason;
};

/** What agents wait on a person for: approvals of `ask` calls and questions, listed and decided. */
export function registerPeopleCommands(program: Command): void {
  declareApprovals(program);
  declareDecision(program, 'allow', {
    name: 'approve',
    description: 'allow a pending call; the agent runs it',
    reason: 'why, passed to the agent',
  });
  declareDecision(program, 'deny', {
    name: 'deny',
    description: 'refuse a pending call; the agent is told the reason',
    reason: 'why, passed to the agent (required, here or as --reason)',
  });
  declareAnswer(program);
}

function declareApprovals(program: Command): void {
  program
    .command('approvals')
    .description('list what agents are waiting on a person for: approvals of `ask` calls and questions')
    .option('-a, --all', 'include decided, answered and expired ones', false)
    .option('--json', 'one JSON record per line', false)
    .addOption(homeOption())
    .addOption(serverOption())
    .addOption(pipelinesOption())
    .action(commandAction(async (options) => (await commands.approvals()).listApprovals(options)));
}

/** `approve` and `deny`: a person's decision on a pending call, its reason after the id or as `--reason`. */
function declareDecision(
  program: Command,
  decision: 'allow' | 'deny',
  how: { name: string; description: string; reason: string },
): void {
  program
    .command(how.name)
    .description(how.description)
    .argument('<approval-id>', 'as listed by troupe approvals')
    .argument('[reason]', how.reason)
    .option('--reason <text>', 'the reason, as an option')
    .option('--by <name>', 'who decides (default: user@host)')
    .addOption(homeOption())
    .addOption(serverOption())
    .addOption(pipelinesOption())
    .action(
      commandAction(async (id: string, reason: string | undefined, options) =>
        (await commands.approvals()).decide(id, decision, { ...options, reason: reasonOf(reason, options) }),
      ),
    );
}

function declareAnswer(program: Command): void {
  program
    .command('answer')
    .description("answer an agent's question (from its ask_human tool)")
    .argument('<question-id>', 'as listed by troupe approvals')
    .argument('<answer>', 'the answer')
    .option('--by <name>', 'who answers (default: user@host)')
    .addOption(homeOption())
    .addOption(serverOption())
    .addOption(pipelinesOption())
    .action(
      commandAction(async (id: string, text: string, options) =>
        (await commands.approvals()).answer(id, text, options),
      ),
    );
}
