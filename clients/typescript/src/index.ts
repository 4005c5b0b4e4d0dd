// @mcp-connect/client: what a TypeScript MCP server needs to use mcp-connect. The SDK
// adapters are in '@mcp-connect/client/server' (@modelcontextprotocol/server 2.4) and
// '@mcp-connect/client/sdk' (@modelcontextprotocol/sdk 1.32).

export { AccessToken, ApiKey, Secret, SubjectToken } from './secret.js';
export {
  ApiError,
  ConnectClient,
  type ConnectClientOptions,
  ConnectError,
  DEFAULT_RETRY,
  InvalidResponseError,
  MAX_BODY,
  type RetryPolicy,
  TransportError,
  UnavailableError,
} from './client.js';
export * from './api.js';
export { CanonicalizationError, canonicalJson } from './jcs.js';
export {
  InvalidRequestStateKey,
  type RequestState,
  RequestStateError,
  RequestStateKey,
  type RequestStateRefusal,
  type ToolCall,
  argumentsDigest,
  openRequestState,
  sealRequestState,
  sealRequestStateWithNonce,
} from './requestState.js';
export * from './gate.js';
