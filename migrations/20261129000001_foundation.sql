-- Foundation schema. Forward-only: never edit a migration that has shipped; add a new one.
--
-- Every row that holds or leads to a credential names the tenant (the MCP server
-- registration) and the subject (the IdP `sub` of the MCP user) it belongs to, and every
-- query that reads it filters by both: that binding is what DESIGN.md's invariant 3 rests on.

-- Tenants are configured in the TOML file and mirrored here at start-up (upsert), so that
-- foreign keys hold and operators can query by tenant. A tenant removed from the file is
-- marked inactive, which stops its API keys at once.
CREATE TABLE tenants (
    id                text PRIMARY KEY,
    display_name      text NOT NULL,
    allowed_providers text[] NOT NULL,
    active            boolean NOT NULL DEFAULT true,
    updated_at        timestamptz NOT NULL DEFAULT now()
);

-- API keys: `mcpc_<id>_<secret>`. Only the public id part and an argon2id hash of the
-- whole key are stored; the key itself is printed once at creation.
CREATE TABLE api_keys (
    id           text PRIMARY KEY,
    tenant_id    text NOT NULL REFERENCES tenants (id),
    scope        text NOT NULL CHECK (scope IN ('server', 'admin')),
    hash         text NOT NULL,
    label        text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);

-- Connections: one downstream grant per (tenant, subject, provider). Tokens are sealed by
-- the vault (XChaCha20-Poly1305, nonce stored in front of each ciphertext) under `key_id`,
-- with (tenant, subject, provider, connection id, field) as associated data, so a
-- ciphertext copied into another row does not open. `version` is bumped on every write
-- of the sealed fields (refresh uses it as a compare-and-swap generation counter).
CREATE TABLE connections (
    id                uuid PRIMARY KEY,
    tenant_id         text NOT NULL REFERENCES tenants (id),
    subject           text NOT NULL,
    provider          text NOT NULL,
    account_id        text,
    account_login     text,
    scopes            text[] NOT NULL,
    status            text NOT NULL CHECK (status IN ('active', 'needs_reauth', 'revoked')),
    key_id            text,
    access_token_ct   bytea,
    refresh_token_ct  bytea,
    id_token_ct       bytea,
    token_type        text NOT NULL DEFAULT 'Bearer',
    access_expires_at timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    refreshed_at      timestamptz,
    last_used_at      timestamptz,
    version           bigint NOT NULL DEFAULT 0,
    UNIQUE (tenant_id, subject, provider),
    -- An active connection always has a sealed access token under a known key.
    CHECK (status <> 'active' OR (key_id IS NOT NULL AND access_token_ct IS NOT NULL)),
    -- A revoked connection is a tombstone: no ciphertext survives revocation.
    CHECK (status <> 'revoked'
           OR (access_token_ct IS NULL AND refresh_token_ct IS NULL AND id_token_ct IS NULL))
);

-- Elicitations: the record a connect URL points to. The id is 128 random bits and is the
-- only thing the URL carries. Bound to tenant, subject, provider and scopes.
CREATE TABLE elicitations (
    id            uuid PRIMARY KEY,
    tenant_id     text NOT NULL REFERENCES tenants (id),
    subject       text NOT NULL,
    provider      text NOT NULL,
    scopes        text[] NOT NULL,
    mcp_context   jsonb NOT NULL DEFAULT '{}'::jsonb,
    status        text NOT NULL
                  CHECK (status IN ('pending', 'completed', 'declined', 'expired', 'cancelled')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    completed_at  timestamptz,
    connection_id uuid REFERENCES connections (id),
    CHECK (status <> 'completed' OR connection_id IS NOT NULL)
);

-- At most one pending elicitation per (tenant, subject, provider, scopes): a retried
-- tool call gets the same link back instead of a second one. Scopes are stored sorted.
CREATE UNIQUE INDEX elicitations_one_pending
    ON elicitations (tenant_id, subject, provider, scopes)
    WHERE status = 'pending';
CREATE INDEX elicitations_expiry ON elicitations (expires_at) WHERE status = 'pending';

-- Audit trail. `detail` never holds a secret: ids, reason codes and outcomes only.
CREATE TABLE audit_events (
    id             bigserial PRIMARY KEY,
    at             timestamptz NOT NULL DEFAULT now(),
    tenant_id      text,
    subject        text,
    provider       text,
    kind           text NOT NULL,
    elicitation_id uuid,
    connection_id  uuid,
    api_key_id     text,
    detail         jsonb NOT NULL DEFAULT '{}'::jsonb
);
CREATE INDEX audit_events_at ON audit_events (at);
CREATE INDEX audit_events_subject ON audit_events (tenant_id, subject, at);
