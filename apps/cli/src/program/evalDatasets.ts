import type { Command } from 'commander';

/** `troupe eval dataset …`: add (from files or recorded runs), list and show datasets. */
export function declareDatasetCommands(_evals: Command): void {}
