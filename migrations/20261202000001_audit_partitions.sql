-- The audit trail, range-partitioned by month (UTC), with hand-outs aggregated per minute.
--
-- * One partition per month, `audit_events_YYYY_MM`, made ahead by the clean-up task
--   (`audit_partition_ensure`); retention drops whole partitions
--   (`audit_partitions_drop_before`), never a big DELETE. A DEFAULT partition catches a row
--   whose month has no partition yet (a service down for months, a clock far off), so an
--   insert never fails; creating that month's partition moves such rows into it.
-- * `recorded` is the writing transaction's id. The admin API pages by (recorded, id) and
--   lists only rows whose transaction is older than every transaction still running, so a
--   row that commits late can never land behind a page already read (see store::audit).
-- * Token hand-outs are one row per instance, connection, API key and minute: `at` is the
--   minute, `count` the hand-outs in it, `first_at`/`last_at` the first and the last, and
--   `instance` the process that handed them out. Written once, never updated. Every other
--   event has count 1 and no instance, first_at or last_at.

ALTER TABLE audit_events RENAME TO audit_events_unpartitioned;
ALTER INDEX audit_events_pkey RENAME TO audit_events_unpartitioned_pkey;
DROP INDEX audit_events_at, audit_events_subject, audit_events_kind;
ALTER SEQUENCE audit_events_id_seq OWNED BY NONE;

CREATE TABLE audit_events (
    id             bigint NOT NULL DEFAULT nextval('audit_events_id_seq'),
    at             timestamptz NOT NULL DEFAULT now(),
    recorded       xid8 NOT NULL DEFAULT pg_current_xact_id(),
    tenant_id      text,
    subject        text,
    provider       text,
    kind           text NOT NULL,
    elicitation_id uuid,
    connection_id  uuid,
    api_key_id     text,
    detail         jsonb NOT NULL DEFAULT '{}'::jsonb,
    count          integer NOT NULL DEFAULT 1 CHECK (count > 0),
    first_at       timestamptz,
    last_at        timestamptz,
    instance       text,
    PRIMARY KEY (id, at)
) PARTITION BY RANGE (at);
ALTER SEQUENCE audit_events_id_seq OWNED BY audit_events.id;

CREATE INDEX audit_events_recorded ON audit_events (tenant_id, recorded, id);
CREATE INDEX audit_events_subject ON audit_events (tenant_id, subject, at);
CREATE INDEX audit_events_kind ON audit_events (tenant_id, kind, at);
-- A hand-out row's own key: a batch written again (its commit went through but the reply
-- was lost, so the writer retried) inserts nothing twice (`ON CONFLICT DO NOTHING`). Other
-- events have no instance (NULLs never conflict).
CREATE UNIQUE INDEX audit_events_handout ON audit_events (at, instance, connection_id, api_key_id, first_at);

CREATE TABLE audit_events_default PARTITION OF audit_events DEFAULT;

-- Makes the partition of the month (UTC) holding `month_of`, unless it is attached; true
-- when it made one. Every instance may call it at once: the lock lets one make it and the
-- others find it made. It is the lock ATTACH takes on the parent anyway (writers and readers
-- go on); being a table lock, it also makes this session see the catalog as the one before
-- it left it. The default partition is locked against inserts from the move to the attach
-- (ATTACH locks it fully anyway), so no row of the month can slip in between. Each lock is
-- waited for at most 5 s (the function's `lock_timeout`): rather fail, and be retried by
-- the next clean-up, than hold up the writers queued behind.
CREATE FUNCTION audit_partition_ensure(month_of timestamptz) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    lo_utc timestamp := date_trunc('month', month_of AT TIME ZONE 'UTC');
    lo timestamptz := lo_utc AT TIME ZONE 'UTC';
    hi timestamptz := (lo_utc + interval '1 month') AT TIME ZONE 'UTC';
    part text := 'audit_events_' || to_char(lo_utc, 'YYYY_MM');
BEGIN
    IF EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               WHERE i.inhparent = 'audit_events'::regclass AND c.relname = part) THEN
        RETURN false;
    END IF;
    LOCK TABLE audit_events IN SHARE UPDATE EXCLUSIVE MODE;
    IF EXISTS (SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
               WHERE i.inhparent = 'audit_events'::regclass AND c.relname = part) THEN
        RETURN false;
    END IF;
    LOCK TABLE audit_events_default IN EXCLUSIVE MODE;
    EXECUTE format('CREATE TABLE %I (LIKE audit_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
    -- Rows of this month that the default partition caught move in before it is attached
    -- (attaching checks that the default partition holds none of its range).
    EXECUTE format(
        'WITH moved AS (DELETE FROM audit_events_default WHERE at >= $1 AND at < $2 RETURNING *)
         INSERT INTO %I SELECT * FROM moved', part) USING lo, hi;
    EXECUTE format('ALTER TABLE audit_events ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
    RETURN true;
END
$$ SET search_path = public, pg_catalog SET lock_timeout = '5s';

-- Drops every month partition whose month ended at or before `cutoff`, and deletes the
-- default partition's rows older than `cutoff`. Returns the partitions dropped. Safe when
-- every instance runs it: the lock serialises them (and `audit_partition_ensure`), and a
-- dropped partition is gone for the next one. Rows live at least the retention and at most
-- a month longer. A drop briefly locks the whole table, waited for at most 5 s.
CREATE FUNCTION audit_partitions_drop_before(cutoff timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    part text;
    dropped integer := 0;
    due boolean;
BEGIN
    -- Nothing due (nearly every run): no table lock at all.
    SELECT EXISTS (
        SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'audit_events'::regclass AND c.relname ~ '^audit_events_[0-9]{4}_[0-9]{2}$'
          AND (to_date(substr(c.relname, 14), 'YYYY_MM')::timestamp + interval '1 month') AT TIME ZONE 'UTC' <= cutoff
    ) INTO due;
    IF NOT due THEN
        DELETE FROM audit_events_default WHERE at < cutoff;
        RETURN 0;
    END IF;
    LOCK TABLE audit_events IN SHARE UPDATE EXCLUSIVE MODE;
    FOR part IN
        SELECT c.relname
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'audit_events'::regclass AND c.relname ~ '^audit_events_[0-9]{4}_[0-9]{2}$'
        ORDER BY c.relname
    LOOP
        IF (to_date(substr(part, 14), 'YYYY_MM')::timestamp + interval '1 month') AT TIME ZONE 'UTC' <= cutoff THEN
            EXECUTE format('DROP TABLE %I', part);
            dropped := dropped + 1;
        END IF;
    END LOOP;
    DELETE FROM audit_events_default WHERE at < cutoff;
    RETURN dropped;
END
$$ SET search_path = public, pg_catalog SET lock_timeout = '5s';

REVOKE EXECUTE ON FUNCTION audit_partition_ensure(timestamptz), audit_partitions_drop_before(timestamptz) FROM PUBLIC;

-- Partitions for every month the old table holds, this month and the next two; then the
-- rows move (their `recorded` is this migration's transaction: older than any later row).
SELECT audit_partition_ensure(m)
FROM (SELECT DISTINCT date_trunc('month', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS m FROM audit_events_unpartitioned
      UNION SELECT now() + make_interval(months => n) FROM generate_series(0, 2) AS n) AS months;

INSERT INTO audit_events (id, at, tenant_id, subject, provider, kind, elicitation_id, connection_id, api_key_id, detail)
SELECT id, at, tenant_id, subject, provider, kind, elicitation_id, connection_id, api_key_id, detail
FROM audit_events_unpartitioned;

DROP TABLE audit_events_unpartitioned;
