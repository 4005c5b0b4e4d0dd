-- no-transaction
-- The index the start's issuer backfill reads (`WHERE issuer IS NULL`, in batches), built
-- without blocking writes: outside a transaction, concurrently (one statement a file: a
-- statement list would run as one implicit transaction), so that the release before keeps
-- serving meanwhile. It shrinks to nothing once the backfill ran.
CREATE INDEX CONCURRENTLY IF NOT EXISTS elicitations_issuer_unset ON elicitations (id) WHERE issuer IS NULL;
