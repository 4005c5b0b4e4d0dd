-- How mcp-connect authenticates as a registered client of a remote MCP server's
-- authorization server (RFC 7591 `token_endpoint_auth_method`, as the registration answer
-- said): `client_secret_basic`, `client_secret_post` or `none`. NULL for a row of the
-- release before, which registered asking for `client_secret_basic` (`none` if the server
-- gave no secret). A nullable column: the release before neither reads nor needs it.
SET LOCAL lock_timeout = '10s';
ALTER TABLE remote_mcp_clients ADD COLUMN token_endpoint_auth_method text
    CHECK (token_endpoint_auth_method IN ('client_secret_basic', 'client_secret_post', 'none'));
