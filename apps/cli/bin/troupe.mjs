#!/usr/bin/env node
// Runs the CLI from its TypeScript source: tsx compiles it on the fly, so no build step is needed.
import { register } from 'tsx/esm/api';

register();
await import('../src/main.ts');
