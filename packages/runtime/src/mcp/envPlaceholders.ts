import { registerSecret } from '../logging/secrets.ts';
import { McpServerError } from './mcpServerError.ts';

const placeholder = /\$\{([A-Za-z_][A-Za-z0-9_]*)\}/g;

/**
 * Replaces every `${VAR}` in the values with the variable from `env`; a variable that is not set is an error naming
 * it, the key that uses it and the server. `what` names the kind of key for that message (`env`, `header`).
 *
 * @example
 * resolvePlaceholders({ Authorization: 'Bearer ${TOKEN}' }, { TOKEN: 's3cret' }, { server: 'gh', what: 'header' });
 * // { Authorization: 'Bearer s3cret' }
 */
export function resolvePlaceholders(
  values: Readonly<Record<string, string>>,
  env: Readonly<Record<string, string | undefined>>,
  where: { server: string; what: string },
): Record<string, string> {
  const missing: string[] = [];
  const resolved: Record<string, string> = {};
  for (const [key, value] of Object.entries(values)) {
    resolved[key] = value.replace(placeholder, (match, name: string) => {
      const found = env[name];
      // What a server is given from the environment (a token, a key) is never logged or published.
      registerSecret(found);
      if (found !== undefined) return found;
      missing.push(`${where.what} ${key} references \${${name}}`);
      return match;
    });
  }
  if (missing.length > 0) {
    const vars = missing.length === 1 ? 'that variable is' : 'those variables are';
    throw new McpServerError(
      'missing_env',
      `MCP server ${where.server}: ${missing.join(', ')}, but ${vars} not set in the coordinator's environment`,
      { server: where.server },
    );
  }
  return resolved;
}
