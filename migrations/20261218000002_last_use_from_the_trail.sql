-- Issue 46: a connection's last use is marked at most once in ten minutes (it was once a
-- minute): at a million connections the marks were a write per hand-out, as many as the
-- audit rows. Between marks, the last use is read from the hand-out audit rows written
-- since the mark (the trail has every use, a minute or two after it).
--
-- Expand only: a binary of the release before marks every minute and reads the mark alone.
SET LOCAL lock_timeout = '10s';

-- The later of the mark and the last use the connection's audit rows since it record
-- (hand-outs, and calls through the proxy); NULL when never marked.
--
-- * Rows of the half hour from the mark are read, through the subject index: an instance
--   sends a connection in use to be marked again within twenty minutes of its last
--   mark (`store::handouts`, two generations of ten), so a use after that half hour has
--   a newer mark. A read then scans half an hour of one subject's rows at most.
-- * The rows' times are their instance's clock, the mark the database's: a use is never
--   shown later than the database's now, and the window opens two minutes before the
--   mark so that an instance whose clock is behind still finds the minute it marked.
-- * A row folded while the database was away spans minutes from the minute of its first
--   use, which may lie before the window: such a use shows as of the mark.
CREATE FUNCTION connection_last_used(connection uuid, tenant text, subj text, mark timestamptz)
RETURNS timestamptz
LANGUAGE sql STABLE PARALLEL SAFE
AS $$
    SELECT greatest(mark, least(now(), (
        SELECT max(a.last_at) FROM audit_events a
        WHERE a.tenant_id = tenant AND a.subject = subj
          AND a.at >= mark - interval '2 minutes' AND a.at < mark + interval '30 minutes'
          AND a.connection_id = connection AND a.kind IN ('token_handed_out', 'proxied_calls'))))
$$;
