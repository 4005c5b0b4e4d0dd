-- The browser side of the connect flow. Forward-only.
--
-- Nothing here stores a usable secret: session ids and state values are stored as
-- SHA-256 hashes (the browser and the provider hold the values), and PKCE verifiers and
-- nonces are sealed by the vault under `key_id`.

-- A person logged in at the primary IdP. `subject` is the IdP's `sub`, the same value the
-- MCP access tokens carry; `issuer` is the IdP that said so.
CREATE TABLE browser_sessions (
    id_hash    bytea PRIMARY KEY,
    subject    text NOT NULL,
    issuer     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX browser_sessions_expiry ON browser_sessions (expires_at);

-- A login at the primary IdP in progress. Bound to the browser that started it by the
-- hash of a short-lived cookie, so a login response cannot be replayed into another
-- browser (login CSRF / session fixation).
CREATE TABLE login_states (
    state_hash   bytea PRIMARY KEY,
    binding_hash bytea NOT NULL,
    key_id       text NOT NULL,
    sealed       bytea NOT NULL,
    return_to    text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz
);
CREATE INDEX login_states_expiry ON login_states (expires_at);

-- A provider authorization in progress: one-time, bound to the elicitation (and through it
-- to tenant and subject), the browser session, the provider and the exact redirect URI.
CREATE TABLE oauth_states (
    state_hash     bytea PRIMARY KEY,
    elicitation_id uuid NOT NULL REFERENCES elicitations (id) ON DELETE CASCADE,
    session_hash   bytea NOT NULL,
    tenant_id      text NOT NULL REFERENCES tenants (id),
    subject        text NOT NULL,
    provider       text NOT NULL,
    redirect_uri   text NOT NULL,
    key_id         text NOT NULL,
    sealed         bytea NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    expires_at     timestamptz NOT NULL,
    used_at        timestamptz
);
CREATE INDEX oauth_states_expiry ON oauth_states (expires_at);
CREATE INDEX oauth_states_elicitation ON oauth_states (elicitation_id);
