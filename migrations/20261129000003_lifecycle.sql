-- Token lifecycle and operator control. Forward-only.

-- Kill switches, per provider: for one tenant (set through the tenant's admin API) or for
-- every tenant (tenant_id NULL, set with the CLI). Stored here so every instance obeys at
-- once. No row: the provider works normally.
--   no_new_elicitations: no new connect links; stored tokens are still handed out.
--   no_token_handouts:   nothing at all: no links, no tokens (a provider compromise).
CREATE TABLE kill_switches (
    id         bigserial PRIMARY KEY,
    tenant_id  text REFERENCES tenants (id),
    provider   text NOT NULL,
    mode       text NOT NULL CHECK (mode IN ('no_new_elicitations', 'no_token_handouts')),
    reason     text,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX kill_switches_scope ON kill_switches (coalesce(tenant_id, ''), provider);

-- Listing connections for operators and finding rows to re-seal after a key rotation.
CREATE INDEX connections_tenant_subject ON connections (tenant_id, subject);
CREATE INDEX connections_key_id ON connections (key_id) WHERE key_id IS NOT NULL;
CREATE INDEX audit_events_kind ON audit_events (tenant_id, kind, at);
