import type { Command } from 'commander';
import { commands } from '../commandModules.ts';
import { commandAction } from './commandAction.ts';
import { homeOption, positive } from './options.ts';

/** Pipeline files, offline: check them, draw them, start one, run the demo. */
export function registerProjectCommands(program: Command): void {
  declareValidate(program);
  declareGraph(program);
  declareInit(program);
  declareDemo(program);
}

function declareValidate(program: Command): void {
  program
    .command('validate')
    .description('check pipeline files; report every problem with file, line and path')
    .argument('<pipeline.yaml...>', 'pipeline files')
    .option('--print', 'print the resolved pipeline (defaults applied) as JSON', false)
    .option('--no-keys', 'do not require the API key variables to be set (for CI without secrets)')
    .option('--allow-mcp-commands', 'accept MCP servers that start a local command (stdio transport)', false)
    .action(
      commandAction(async (files: string[], options) => (await commands.validate()).validate(files, options)),
    );
}

function declareGraph(program: Command): void {
  program
    .command('graph')
    .description("print a pipeline's flow as a Mermaid flowchart (--json: as the graph the dashboard draws)")
    .argument('<pipeline.yaml>', 'the pipeline file')
    .option('--json', 'print the graph as JSON: its nodes and edges', false)
    .action(commandAction(async (file: string, options) => (await commands.graph()).graph(file, options)));
}

function declareInit(program: Command): void {
  program
    .command('init')
    .description('write a starter pipeline (runs offline), its script and a .gitignore entry for .troupe/')
    .argument('[dir]', 'where to write them', '.')
    .option('--name <name>', "the pipeline's name (default: the directory's name)")
    .action(commandAction(async (dir: string, options) => (await commands.init()).init(dir, options)));
}

function declareDemo(program: Command): void {
  program
    .command('demo')
    .description('start NATS and the coordinator, run one task and print its message flow, then stop')
    .argument('[pipeline.yaml]', 'pipeline file', 'examples/demo.yaml')
    .option('--goal <text>', 'the task goal', 'Write a short hello note in notes/hello.md')
    .option('--timeout <seconds>', 'how long to wait for the task', positive, 120)
    .addOption(homeOption())
    .action(commandAction(async (file: string, options) => (await commands.demo()).demo(file, options)));
}
