import type { AgentCard, AgentInterface, AgentSkill, SecurityRequirement, SecurityScheme } from '@a2a-js/sdk';
import type { PipelineRegistration } from '@troupe/protocol';

/** The A2A version this gateway speaks; a request that asks for another is refused (VersionNotSupported). */
export const A2A_VERSION = '1.0';

/** Where the gateway serves A2A: each pipeline under `/a2a/<pipeline>`, every pipeline (by `tenant`) under `/a2a`. */
export const a2aPaths = {
  card: (pipeline: string) => `/a2a/${pipeline}/.well-known/agent-card.json`,
  jsonRpc: (pipeline?: string) => (pipeline ? `/a2a/${pipeline}/jsonrpc` : '/a2a/jsonrpc'),
  rest: (pipeline?: string) => (pipeline ? `/a2a/${pipeline}/rest` : '/a2a/rest'),
};

/** The card extension that carries a pipeline's input and output JSON Schemas (A2A skills have no field for them). */
export const PIPELINE_SCHEMA_EXTENSION = 'https://troupe.dev/a2a/extensions/pipeline-schemas/v1';

export interface CardOptions {
  /** The gateway's URL as clients reach it (`https://troupe.example.com`), with no trailing slash. */
  baseUrl: string;
  /** Whether the gateway asks for bearer tokens (it does unless run with `auth: none`). */
  bearer: boolean;
  /** Whether push notifications are offered. */
  push: boolean;
}

/** A pipeline as an A2A agent: its two bindings, what it can do, one skill (the pipeline itself), its auth. */
export function pipelineCard(pipeline: PipelineRegistration, options: CardOptions): AgentCard {
  const base = common(options);
  const schemas = {
    ...(pipeline.input ? { input: pipeline.input } : {}),
    ...(pipeline.output ? { output: pipeline.output } : {}),
  };
  return {
    ...base,
    capabilities: base.capabilities && {
      ...base.capabilities,
      extensions:
        Object.keys(schemas).length === 0
          ? []
          : [
              {
                uri: PIPELINE_SCHEMA_EXTENSION,
                description:
                  'The JSON Schemas of the pipeline: `input`, which a message’s data part must match, and `output`, ' +
                  'which the data part of its artifact matches.',
                required: false,
                params: schemas,
              },
            ],
    },
    name: pipeline.name,
    description: describe(pipeline),
    supportedInterfaces: interfaces(options.baseUrl, pipeline.name),
    // The pipeline version the gateway knows as newest: a card changes when the pipeline does.
    version: pipeline.version?.slice(0, 12) ?? '0',
    skills: [skillOf(pipeline)],
  };
}

/**
 * The gateway's own card, at the domain's well-known place: every pipeline the caller may use as a skill, each
 * naming its own card; its endpoints serve every pipeline, the request's `tenant` naming which.
 */
export function gatewayCard(pipelines: readonly PipelineRegistration[], options: CardOptions): AgentCard {
  const list = pipelines.map((p) => `${p.name} (${options.baseUrl}${a2aPaths.card(p.name)})`).join(', ');
  return {
    ...common(options),
    name: 'Troupe',
    description:
      'A Troupe runtime: each pipeline is an A2A agent with a card of its own. Here, a request names its pipeline ' +
      `in tenant. Pipelines: ${list || 'none yet'}.`,
    supportedInterfaces: interfaces(options.baseUrl),
    version: '1',
    skills: pipelines.map(skillOf),
  };
}

function common(
  options: CardOptions,
): Omit<AgentCard, 'name' | 'description' | 'supportedInterfaces' | 'version' | 'skills'> {
  const bearer: SecurityScheme = {
    scheme: {
      $case: 'httpAuthSecurityScheme',
      value: {
        description:
          'a Troupe gateway token (troupe gateway token); its scopes and pipelines apply to every method',
        scheme: 'Bearer',
        bearerFormat: 'opaque',
      },
    },
  };
  const required: SecurityRequirement = { schemes: { bearer: { list: [] } } };
  return {
    provider: undefined,
    capabilities: {
      streaming: true,
      pushNotifications: options.push,
      extensions: [],
      extendedAgentCard: false,
    },
    securitySchemes: options.bearer ? { bearer } : {},
    securityRequirements: options.bearer ? [required] : [],
    defaultInputModes: ['text/plain', 'application/json'],
    defaultOutputModes: ['text/plain', 'application/json'],
    signatures: [],
  };
}

function interfaces(baseUrl: string, pipeline?: string): AgentInterface[] {
  return [
    {
      url: `${baseUrl}${a2aPaths.jsonRpc(pipeline)}`,
      protocolBinding: 'JSONRPC',
      tenant: '',
      protocolVersion: A2A_VERSION,
    },
    {
      url: `${baseUrl}${a2aPaths.rest(pipeline)}`,
      protocolBinding: 'HTTP+JSON',
      tenant: '',
      protocolVersion: A2A_VERSION,
    },
  ];
}

function skillOf(pipeline: PipelineRegistration): AgentSkill {
  return {
    id: pipeline.name,
    name: pipeline.name,
    description:
      `${describe(pipeline)} Send the goal as text and the pipeline's input as a data part (a JSON object` +
      `${pipeline.input ? ' matching the input schema in the card’s pipeline-schemas extension' : ''}); ` +
      'the output comes back as an artifact.',
    tags: ['troupe', 'pipeline', ...pipeline.agents],
    examples: [],
    inputModes: ['text/plain', 'application/json'],
    outputModes: ['text/plain', 'application/json'],
    securityRequirements: [],
  };
}

const describe = (pipeline: PipelineRegistration): string =>
  pipeline.description?.trim() ||
  `The Troupe pipeline ${pipeline.name}: agents ${pipeline.agents.join(', ')} through steps ${pipeline.steps.join(', ')}.`;
