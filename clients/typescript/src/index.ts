// @mcp-connect/client: what a TypeScript MCP server needs to use mcp-connect. The SDK
// adapters are in '@mcp-connect/client/server' (@modelcontextprotocol/server 2.4) and
// '@mcp-connect/client/sdk' (@modelcontextprotocol/sdk 1.32).
//
// Each name here is a promise kept across minor versions, so the list is explicit (no
// `export *`): the wire descriptions, parsers and limits stay inside the package, and
// test/exports.test.ts holds this list and api-report.md the shape of each name.

export { AccessToken, ApiKey, Secret, SubjectToken, WorkloadToken } from './secret.js';
export {
  ApiError,
  ConnectClient,
  type ConnectClientBaseOptions,
  type ConnectClientOptions,
  ConnectError,
  type ConnectErrorCode,
  ConnectRequiredError,
  InvalidResponseError,
  type ProxyFetch,
  type ProxyOptions,
  type RetryPolicy,
  TokenFile,
  type TokenFunction,
  type TokenSource,
  TransportError,
  UnavailableError,
  WorkloadTokenError,
} from './client.js';
export type {
  Account,
  CancelReason,
  CancelledInfo,
  CredentialType,
  ElicitationInfo,
  ElicitationStatus,
  ErrorCode,
  McpUrlElicitation,
  TokenOutcome,
  TokenRequest,
} from './api.js';
export { CanonicalizationError, canonicalJson } from './jcs.js';
export {
  // eslint-disable-next-line @typescript-eslint/no-deprecated -- kept for one release
  InvalidRequestStateKey,
  InvalidRequestStateKeyError,
  type RequestState,
  RequestStateError,
  RequestStateKey,
  type RequestStateRefusal,
  type ToolCall,
  argumentsDigest,
  openRequestState,
  sealRequestState,
} from './requestState.js';
export { type UrlElicitation, urlElicitation } from './gate.js';
export { type Environment, MissingSettingError, type SettingName } from './settings.js';
