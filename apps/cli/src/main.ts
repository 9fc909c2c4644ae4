import { redactSecrets, registerSecretsFromEnv } from '@troupe/runtime/secrets';
import { Command } from 'commander';
import cli from '../package.json' with { type: 'json' };
import { registerControlCommands } from './program/control.ts';
import { registerEvalCommands } from './program/evals.ts';
import { registerFamilyCommands } from './program/family.ts';
import { registerNatsConfigCommands } from './program/natsConfig.ts';
import { natsAccessOptions } from './program/options.ts';
import { registerPeopleCommands } from './program/people.ts';
import { registerProjectCommands } from './program/project.ts';
import { registerServeCommands } from './program/serve.ts';
import { registerTasksCommands } from './program/tasks.ts';

registerSecretsFromEnv();

const program = new Command('troupe')
  .description('Troupe: run LLM agent pipelines over NATS, durable and observable')
  .version(cli.version, '-V, --version', 'print the version')
  .configureHelp({ sortSubcommands: false });

// In the order `troupe --help` lists them.
registerServeCommands(program);
registerTasksCommands(program);
registerControlCommands(program);
registerFamilyCommands(program);
registerPeopleCommands(program);
registerProjectCommands(program);
registerEvalCommands(program);
registerNatsConfigCommands(program);

// Every command that talks to NATS logs in the same way, with the nats CLI's environment variables.
for (const command of program.commands) {
  if (command.options.some((option) => option.long === '--server')) {
    for (const option of natsAccessOptions()) command.addOption(option);
  }
}

/**
 * A usage error (an argument missing, an option's value refused, a command unknown) is one line, as every other
 * error is, and points to the command's help instead of filling the terminal with it.
 */
const pointToHelp = (command: Command, path: string) => {
  command.showHelpAfterError(false).configureOutput({
    outputError: (message, write) =>
      write(
        `troupe: ${redactSecrets(
          message
            .replace(/^error: /, '')
            .trim()
            .replace(/\s*\n\s*/g, ' '),
        )} (see ${path} --help)\n`,
      ),
  });
  for (const sub of command.commands) pointToHelp(sub, `${path} ${sub.name()}`);
};
pointToHelp(program, 'troupe');

await program.parseAsync(process.argv);
