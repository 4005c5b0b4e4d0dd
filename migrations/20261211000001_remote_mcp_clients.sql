-- Clients mcp-connect registered at a remote MCP server's authorization server (RFC 7591),
-- one per provider, authorization server and redirect URI: every instance uses the one
-- the first registration stored (a second, concurrent registration is not kept). The
-- client secret, if the server issued one, is sealed by the vault, bound to the row's key.
-- A new table: the release before does not read it.
SET LOCAL lock_timeout = '10s';
CREATE TABLE remote_mcp_clients (
    provider_id text NOT NULL,
    issuer text NOT NULL,
    redirect_uri text NOT NULL,
    client_id text NOT NULL,
    key_id text,
    secret_ct bytea,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (provider_id, issuer, redirect_uri),
    CHECK ((key_id IS NULL) = (secret_ct IS NULL))
);

-- The authorization server each remote MCP server provider was first found to use (or the
-- one its configuration names): a later discovery naming another is refused, so that a
-- changed (or forged) metadata document never gets our client secret, a person's code or
-- a stored refresh token.
CREATE TABLE remote_mcp_issuers (
    provider_id text PRIMARY KEY,
    issuer text NOT NULL,
    pinned_at timestamptz NOT NULL DEFAULT now()
);
