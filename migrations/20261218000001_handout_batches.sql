-- Issue 46: a hand-out row no longer pays for a unique index to be written once.
--
-- The writer names each batch of hand-out (and proxied-call) rows it writes with an id of
-- its own, kept across its retries, and records the id in `audit_handout_batches` in the
-- same transaction: a batch tried again after its commit went through (the reply was lost)
-- finds its id there and writes nothing. Its rows carry the id (`batch`) and are left out
-- of any unique index: `audit_events_handout`, the seven-column one that made such a retry
-- insert nothing twice, goes: at a million connections, nearly one row per hand-out, that index was a
-- quarter of the row's cost in Postgres (27 µs a row with it, 20 without, in batches of
-- 2,000 over a million connections). It also counted two distinct rows whose key fell on
-- the same microsecond once.
--
-- The index is dropped, not rebuilt partial: a rebuild over every month of the trail would
-- hold the table's lock for as long as it took, in the migration's transaction, while the
-- instances of the release before keep writing (docs/development.md, "Changing the
-- schema"); the drop holds it for a moment. The one cost: a binary of the release before,
-- still running during a rollout or after a rollback, writes a batch it retries after a
-- lost commit reply twice (its rows are counted twice, never lost). The clean-up deletes
-- batch ids after seven days (retries come within seconds, or when the database is back).
SET LOCAL lock_timeout = '10s';

CREATE TABLE audit_handout_batches (
    id         uuid PRIMARY KEY,
    written_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX audit_handout_batches_written_at ON audit_handout_batches (written_at);

ALTER TABLE audit_events ADD COLUMN batch uuid;

DROP INDEX audit_events_handout;
