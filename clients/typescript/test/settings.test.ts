// Settings from the environment (issue 41): a missing one names its variable and where it
// comes from. Before, `new ConnectClient({ apiKey: process.env.MCP_CONNECT_API_KEY })`
// with the variable unset said only "ApiKey needs a non-empty string".

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConnectClient, type ConnectClientOptions, MissingSettingError, RequestStateKey } from '@mcp-connect/client';

const KEY = `mcpc_0123456789abcdef_${'x'.repeat(43)}`;
const STATE = Buffer.alloc(32, 7).toString('base64');
const ALL = { MCP_CONNECT_URL: 'http://127.0.0.1:8080', MCP_CONNECT_API_KEY: KEY, MCP_STATE_KEY: STATE };

function names(variable: string): (e: unknown) => boolean {
  return (e) => {
    assert.ok(e instanceof MissingSettingError, String(e));
    assert.equal(e.variable, variable);
    assert.match(e.message, new RegExp(`^${variable} is not set: `));
    assert.match(e.message, /\.mcp-connect-dev\.env/);
    assert.ok(!e.message.includes(KEY));
    return true;
  };
}

test('a client from the environment names the variable it misses, unset or empty', () => {
  for (const missing of ['MCP_CONNECT_URL', 'MCP_CONNECT_API_KEY'] as const) {
    for (const value of [undefined, '', '  ']) {
      const env: Record<string, string | undefined> = { ...ALL, [missing]: value };
      assert.throws(() => ConnectClient.fromEnv(env), names(missing));
    }
  }
});

test('the constructor handed an unset variable names it too', () => {
  const unset = undefined as unknown as string;
  const cases: [ConnectClientOptions, string][] = [
    [{ baseUrl: ALL.MCP_CONNECT_URL, apiKey: unset }, 'MCP_CONNECT_API_KEY'],
    [{ baseUrl: unset, apiKey: KEY }, 'MCP_CONNECT_URL'],
  ];
  for (const [options, variable] of cases) assert.throws(() => new ConnectClient(options), names(variable));
});

test('the request-state key from the environment names MCP_STATE_KEY when it is missing', () => {
  assert.throws(() => RequestStateKey.fromEnv({ ...ALL, MCP_STATE_KEY: undefined }), names('MCP_STATE_KEY'));
  assert.throws(() => RequestStateKey.fromBase64(undefined as unknown as string), names('MCP_STATE_KEY'));
  assert.ok(RequestStateKey.fromEnv(ALL) instanceof RequestStateKey);
});

test('the names the dev env file writes make a client', () => {
  const client = ConnectClient.fromEnv(ALL);
  assert.ok(client instanceof ConnectClient);
});
