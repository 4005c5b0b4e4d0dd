-- Hardening round 3: a sign-in in progress is no longer a row. `/login` needs no sign-in,
-- so each request wrote one to `login_states`; the state now travels sealed in the browser's
-- login cookie (bound to the OAuth `state` as associated data), and only a sign-in the IdP
-- completed leaves a row here: its state, spent, until the state would have expired, so the
-- same answer cannot be used twice. Expand only: `login_states` stays for instances of the
-- previous release during a rolling update (a sign-in begun on one of them and finished on
-- a new one is asked to start again), and is emptied by the clean-up.
CREATE TABLE login_states_used (
    state_hash bytea PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX login_states_used_expiry ON login_states_used (expires_at);
