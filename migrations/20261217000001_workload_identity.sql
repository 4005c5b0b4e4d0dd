-- Workload identity (issue 44): the issuers a tenant trusts to sign its MCP servers'
-- tokens, and the rules that map a token's claims to a scope (a JSON array of
-- domain::workload::WorkloadIssuer; NULL: none, no workload token is taken).
--
-- Expand only: a binary of the release before ignores the column and takes API keys only.
ALTER TABLE tenants ADD COLUMN workload_issuers jsonb;

-- A change reaches every instance as a tenant change.
DROP TRIGGER tenants_notify ON tenants;
CREATE TRIGGER tenants_notify
    AFTER INSERT OR UPDATE OF active, display_name, allowed_providers, subject_token_audience, require_subject_token, idp,
        hand_out, workload_issuers
    OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION mcpc_notify_tenant();

DROP TRIGGER tenants_log ON tenants;
CREATE TRIGGER tenants_log
    AFTER INSERT OR UPDATE OF active, display_name, allowed_providers, subject_token_audience, require_subject_token, idp,
        hand_out, workload_issuers
    OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION mcpc_log_change('tenant');

-- The workloads that signed in: a caller id (16 hex digits, in API key ids' place in the
-- audit trail: audit_events.api_key_id) for each issuer, key source (its jwks_uri, or
-- `discovery`: two clusters may share an issuer URL) and subject, so the trail names the
-- workload as it names a key.
CREATE TABLE workload_callers (
    id         text PRIMARY KEY CHECK (id ~ '^[0-9a-f]{16}$'),
    issuer     text NOT NULL,
    key_source text NOT NULL,
    subject    text NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now(),
    last_seen  timestamptz NOT NULL DEFAULT now()
);

-- Each `jti` an issuer put in a token names that one token: another token with the same
-- issuer, key source and jti is a replay of the identifier, refused until the first one
-- expires. Only tokens a tenant's rule takes are recorded.
CREATE TABLE workload_jtis (
    issuer       text NOT NULL,
    key_source   text NOT NULL,
    jti          text NOT NULL,
    token_sha256 bytea NOT NULL CHECK (length(token_sha256) = 32),
    expires_at   timestamptz NOT NULL,
    PRIMARY KEY (issuer, key_source, jti)
);
CREATE INDEX workload_jtis_expiry ON workload_jtis (expires_at);
