// Writes docs/schema/pipeline.schema.json from the zod schema the loader uses, so editors and the loader agree.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pipelineJsonSchema } from '@troupe/coordinator';

const target = join(import.meta.dirname, '..', 'docs', 'schema', 'pipeline.schema.json');
writeFileSync(target, `${JSON.stringify(pipelineJsonSchema(), null, 2)}\n`);
console.log(`wrote ${target}`);
