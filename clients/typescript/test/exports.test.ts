// The public surface: what each entry point exports at run time, imported the way a user
// imports it (through package.json "exports", by the package's own name), against the
// lists below; and the types, against api-report.md. Adding, removing or renaming a
// public name fails here until the list (and `npm run api-report`) says so on purpose.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import * as root from '@mcp-connect/client';
import * as sdk from '@mcp-connect/client/sdk';
import * as server from '@mcp-connect/client/server';
import { REPORT_FILE, apiReport } from './apiReport.js';

const RUNTIME: Record<string, string[]> = {
  '@mcp-connect/client': [
    'AccessToken',
    'ApiError',
    'ApiKey',
    'CanonicalizationError',
    'ConnectClient',
    'ConnectError',
    'ConnectRequiredError',
    'InvalidRequestStateKey',
    'InvalidRequestStateKeyError',
    'InvalidResponseError',
    'MissingSettingError',
    'RequestStateError',
    'RequestStateKey',
    'Secret',
    'SubjectToken',
    'TokenFile',
    'TransportError',
    'UnavailableError',
    'WorkloadToken',
    'WorkloadTokenError',
    'argumentsDigest',
    'canonicalJson',
    'openRequestState',
    'sealRequestState',
    'urlElicitation',
  ],
  '@mcp-connect/client/server': ['JwtVerifier', 'McpConnect', 'bearerAuth', 'createConnectHandler'],
  '@mcp-connect/client/sdk': ['McpConnect'],
};

const MODULES: Record<string, object> = {
  '@mcp-connect/client': root,
  '@mcp-connect/client/server': server,
  '@mcp-connect/client/sdk': sdk,
};

const sorted = (names: Iterable<string>) => [...names].sort();

test('each entry point exports exactly its documented names at run time', () => {
  assert.deepEqual(Object.keys(MODULES).sort(), Object.keys(RUNTIME).sort());
  for (const [specifier, names] of Object.entries(RUNTIME)) {
    assert.deepEqual(sorted(Object.keys(MODULES[specifier] ?? {})), sorted(names), specifier);
  }
});

test('the deprecated InvalidRequestStateKey is InvalidRequestStateKeyError', () => {
  // eslint-disable-next-line @typescript-eslint/no-deprecated -- the alias itself is under test
  assert.equal(root.InvalidRequestStateKey, root.InvalidRequestStateKeyError);
});

test('the type declarations export the same values, and api-report.md is current', () => {
  const report = apiReport();
  assert.deepEqual(
    report.entryPoints.map((e) => e.specifier),
    Object.keys(RUNTIME),
    'the entry points of package.json "exports"',
  );
  for (const e of report.entryPoints) assert.deepEqual(sorted(e.values), sorted(RUNTIME[e.specifier] ?? []), `${e.specifier}: values in the .d.ts`);
  const saved = readFileSync(REPORT_FILE, 'utf8');
  assert.ok(saved === report.text, 'api-report.md is stale: run `npm run api-report` and review the diff (it is the public API)');
});
