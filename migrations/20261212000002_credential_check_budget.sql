-- The typed-credential checks a person may still have sent to a provider: per tenant,
-- person (issuer, subject) and provider, a window and the checks taken in it. A check is
-- taken here, in one statement, before it is sent (so concurrent submits cannot all pass
-- a count read before any of them was written), and given back when the provider said the
-- value is valid. Not per link: a declined or expired link's successor has the same
-- budget. Rows of a window long past are deleted by the clean-up.
-- A new table: the release before does not read it.
SET LOCAL lock_timeout = '10s';
CREATE TABLE credential_check_budget (
    tenant_id text NOT NULL,
    issuer text NOT NULL,
    subject text NOT NULL,
    provider text NOT NULL,
    window_start timestamptz NOT NULL,
    used integer NOT NULL CHECK (used >= 0),
    PRIMARY KEY (tenant_id, issuer, subject, provider)
);
CREATE INDEX credential_check_budget_window ON credential_check_budget (window_start);
