import type { Command } from 'commander';

/** `troupe eval run`, `compare`, `list` and `show`: experiments and what they say. */
export function declareExperimentCommands(_evals: Command): void {}
