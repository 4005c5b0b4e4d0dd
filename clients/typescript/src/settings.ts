// The settings an MCP server reads from its environment, under the names the docs use and
// `mcp-connect dev` writes to its env file (.mcp-connect-dev.env). A missing one is an
// error that names the variable and where it usually comes from (the constructors name
// it too when handed `undefined` from an unset variable).

/** The variables, and what each holds. */
const WHAT = {
  MCP_CONNECT_URL: "mcp-connect's public base URL",
  MCP_CONNECT_API_KEY: 'a server-scope API key of your tenant (mcpc_…); or, to present a workload token instead of a key, set MCP_CONNECT_TOKEN_FILE to its file (docs/workload-identity.md)',
  MCP_CONNECT_TOKEN_FILE: 'the file of a workload token, e.g. a Kubernetes projected service-account token',
  MCP_STATE_KEY: '32 random bytes in standard base64 (`openssl rand -base64 32`), the same on every replica',
} as const;

/** A variable this package reads. */
export type SettingName = keyof typeof WHAT;

const WHERE =
  '`mcp-connect dev` writes it to .mcp-connect-dev.env (load it with `set -a; . ./.mcp-connect-dev.env; set +a`); ' +
  "in production it comes from your deployment's secrets (docs/mcp-servers.md#settings)";

/** A setting is not set (or empty); the message names the variable. */
export class MissingSettingError extends Error {
  override name = 'MissingSettingError';
  constructor(readonly variable: SettingName) {
    super(`${variable} is not set: ${WHAT[variable]}. ${WHERE}`);
  }
}

/** The environment a setting is read from (default: `process.env`). */
export type Environment = Readonly<Record<string, string | undefined>>;

/** The value of `name` in `env`, trimmed; `MissingSettingError` when unset or empty. */
export function setting(name: SettingName, env: Environment = process.env): string {
  const value = env[name]?.trim() ?? '';
  if (value === '') throw new MissingSettingError(name);
  return value;
}

/** Whether a value handed to a constructor is missing (an unset variable is `undefined`). */
export function isMissing(value: unknown): boolean {
  return value === undefined || value === null || (typeof value === 'string' && value.trim() === '');
}

/**
 * The credential settings: `MCP_CONNECT_API_KEY` when it is set, else
 * `MCP_CONNECT_TOKEN_FILE` (a workload token's file); with neither, `MissingSettingError`
 * for the key, whose message names both.
 */
export function keyOrTokenFile(env: Environment = process.env): { apiKey: string } | { tokenFile: string } {
  const apiKey = env.MCP_CONNECT_API_KEY?.trim() ?? '';
  if (apiKey !== '') return { apiKey };
  const tokenFile = env.MCP_CONNECT_TOKEN_FILE?.trim() ?? '';
  if (tokenFile !== '') return { tokenFile };
  throw new MissingSettingError('MCP_CONNECT_API_KEY');
}
