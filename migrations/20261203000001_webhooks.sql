-- Signed webhooks (issue 17): a tenant's endpoints, and an outbox of deliveries written in
-- the same transaction as the change each one reports. Forward-only.

-- An endpoint. Its signing secret is sealed by the vault (purpose `webhook_secret`, bound to
-- the endpoint's id); after a rotation the secret before it stays sealed beside it, and is
-- signed with too, until `previous_until`.
CREATE TABLE webhooks (
    id uuid PRIMARY KEY,
    tenant_id text NOT NULL REFERENCES tenants (id),
    url text NOT NULL,
    events text[] NOT NULL,
    description text NOT NULL DEFAULT '',
    key_id text NOT NULL,
    secret_sealed bytea NOT NULL,
    previous_key_id text,
    previous_secret_sealed bytea,
    previous_until timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    -- Attempts that failed in a row; while one has, the endpoint rests until
    -- `paused_until` (a dead endpoint takes one attempt per backoff, not one per event).
    consecutive_failures integer NOT NULL DEFAULT 0,
    paused_until timestamptz,
    CHECK ((previous_secret_sealed IS NULL) = (previous_until IS NULL)
           AND (previous_secret_sealed IS NULL) = (previous_key_id IS NULL))
);
CREATE INDEX webhooks_tenant ON webhooks (tenant_id, created_at);

-- The order of the events of one stream (one subject's connection to one provider, or one
-- kill switch): `seq` is taken with a row lock held to the commit, so a later transaction of
-- the same stream gets a greater number and becomes visible after the earlier one.
CREATE TABLE webhook_streams (
    stream text PRIMARY KEY,
    seq bigint NOT NULL
);

-- One event for one endpoint. `payload` is the exact body sent on every attempt.
CREATE TABLE webhook_deliveries (
    id bigserial PRIMARY KEY,
    webhook_id uuid NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event_id uuid NOT NULL,
    event_type text NOT NULL,
    stream text NOT NULL,
    seq bigint NOT NULL,
    payload text NOT NULL,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts integer NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now(),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    -- A worker that claimed the delivery owns it until then (a crashed one's claim lapses).
    claimed_until timestamptz,
    last_attempt_at timestamptz,
    last_status integer,
    last_error text,
    -- At most 1 KB of the receiver's answer.
    last_response text,
    finished_at timestamptz,
    UNIQUE (webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_stream ON webhook_deliveries (webhook_id, stream, seq) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (finished_at) WHERE status <> 'pending';
CREATE INDEX webhook_deliveries_list ON webhook_deliveries (webhook_id, id);
