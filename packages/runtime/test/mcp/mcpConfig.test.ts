// biome-ignore-all lint/suspicious/noTemplateCurlyInString: ${VAR} placeholders are the config syntax under test.
import { describe, expect, it } from 'vitest';
import { resolvePlaceholders } from '../../src/mcp/envPlaceholders.ts';
import { McpServerConfig, McpServers } from '../../src/mcp/mcpConfig.ts';
import { McpServerError } from '../../src/mcp/mcpServerError.ts';

describe('McpServerConfig', () => {
  it('accepts a stdio and an http server', () => {
    const stdio = {
      transport: 'stdio',
      command: 'npx',
      args: ['-y', 'mcp-files'],
      env: { TOKEN: '${GH_TOKEN}' },
      cwd: '/srv',
      timeout: 5,
      tools: ['read'],
    };
    const http = {
      transport: 'http',
      url: 'https://mcp.example.com/mcp',
      headers: { Authorization: 'Bearer ${T}' },
    };
    expect(McpServerConfig.parse(stdio)).toEqual(stdio);
    expect(McpServerConfig.parse(http)).toEqual(http);
  });

  it('refuses a config of the wrong shape for its transport, unknown keys and non-HTTP URLs', () => {
    expect(McpServerConfig.safeParse({ transport: 'stdio', url: 'https://x' }).success).toBe(false);
    expect(McpServerConfig.safeParse({ transport: 'http', url: 'https://x', command: 'x' }).success).toBe(
      false,
    );
    expect(McpServerConfig.safeParse({ transport: 'http', url: 'file:///etc/passwd' }).success).toBe(false);
    expect(McpServerConfig.safeParse({ transport: 'sse', url: 'https://x' }).success).toBe(false);
    expect(McpServerConfig.safeParse({ transport: 'http', url: 'https://x', timeout: 0 }).success).toBe(
      false,
    );
    expect(McpServerConfig.safeParse({ transport: 'stdio', command: 'x', env: { 'A-B': 'x' } }).success).toBe(
      false,
    );
  });

  it('names servers with lower-case letters, digits and "-" only', () => {
    const server = { transport: 'http', url: 'https://x' };
    expect(McpServers.safeParse({ 'git-hub2': server }).success).toBe(true);
    for (const name of ['GitHub', 'git_hub', 'git.hub', '']) {
      expect(McpServers.safeParse({ [name]: server }).success, name).toBe(false);
    }
  });
});

describe('resolvePlaceholders', () => {
  const where = { server: 'gh', what: 'header' };

  it('replaces every ${VAR} from the env and keeps other text', () => {
    const resolved = resolvePlaceholders(
      {
        Authorization: 'Bearer ${TOKEN}',
        X: '${A}-${B}',
        Plain: 'no $ {placeholders} or $NAME here',
        Empty: '${E}',
      },
      { TOKEN: 't0k', A: '1', B: '2', E: '' },
      where,
    );
    expect(resolved).toEqual({
      Authorization: 'Bearer t0k',
      X: '1-2',
      Plain: 'no $ {placeholders} or $NAME here',
      Empty: '',
    });
  });

  it('names every variable that is not set, and where it is used', () => {
    let caught: unknown;
    try {
      resolvePlaceholders({ Authorization: 'Bearer ${TOKEN}', 'X-Org': '${ORG}' }, {}, where);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(McpServerError);
    expect(caught).toMatchObject({
      code: 'missing_env',
      server: 'gh',
      message:
        "MCP server gh: header Authorization references ${TOKEN}, header X-Org references ${ORG}, but those variables are not set in the coordinator's environment",
    });
  });
});
