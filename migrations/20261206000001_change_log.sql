-- The change log behind the caches' confirmation (issue 26, DESIGN.md "Scaling out"): every
-- change that matters to a cached value also writes one row here, from the same
-- transaction, naming what changed. Each instance reads, a few times per maximum age, only
-- the rows committed since its last read (one index range scan from the previous
-- snapshot's xmin, rows already visible then left out), drops what they name, and then
-- counts every remaining entry as confirmed at that read. The database's work per
-- confirmation is in proportion to the changes, not to what is cached, and a change whose
-- notification is lost (or made while a listener reconnects) is still found by the next
-- read. The notifications stay: they make a change visible on every instance at once, the
-- log bounds it when they fail.
--
-- Rows are deleted by the confirmers once every transaction that was running ten minutes
-- ago has ended (see `cache::listener`), so the table holds about ten minutes of changes.
-- Forward-only.

CREATE TABLE cache_change_log (
    -- The writing transaction (assigned on first write): a reader that took snapshot S asks
    -- next time for xid >= xmin(S) and not visible in S, which is exactly what committed
    -- since, in whatever order the transactions began.
    xid   xid8 NOT NULL DEFAULT pg_current_xact_id(),
    -- connection (key: tenant␟subject␟provider, as in the notifications), kill_switch
    -- (key ''), api_key and api_key_new (key: its id), tenant (key: its id), all (a table
    -- was truncated; key: its name).
    scope text NOT NULL,
    key   text NOT NULL
);

CREATE INDEX cache_change_log_xid ON cache_change_log (xid);

-- One function for the four tables: TG_ARGV[0] names the scope. Each branch names only the
-- columns of its own table (PL/pgSQL resolves a record's fields when a statement first runs).
CREATE FUNCTION mcpc_log_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        -- A table emptied at once: every cache starts over.
        INSERT INTO cache_change_log (scope, key) VALUES ('all', TG_TABLE_NAME);
    ELSIF TG_ARGV[0] = 'kill_switch' THEN
        INSERT INTO cache_change_log (scope, key) VALUES ('kill_switch', '');
    ELSIF TG_ARGV[0] = 'connection' THEN
        IF TG_OP <> 'INSERT' THEN
            INSERT INTO cache_change_log (scope, key)
            VALUES ('connection', OLD.tenant_id || chr(31) || OLD.subject || chr(31) || OLD.provider);
        END IF;
        -- A row that keeps its key is logged once.
        IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND (OLD.tenant_id, OLD.subject, OLD.provider)
                IS DISTINCT FROM (NEW.tenant_id, NEW.subject, NEW.provider)) THEN
            INSERT INTO cache_change_log (scope, key)
            VALUES ('connection', NEW.tenant_id || chr(31) || NEW.subject || chr(31) || NEW.provider);
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO cache_change_log (scope, key) VALUES (TG_ARGV[0], OLD.id::text);
    ELSIF TG_OP = 'INSERT' AND TG_ARGV[0] = 'api_key' THEN
        -- A new key changes no verification: it only ends an instance's memory of its id
        -- being unknown.
        INSERT INTO cache_change_log (scope, key) VALUES ('api_key_new', NEW.id::text);
    ELSE
        INSERT INTO cache_change_log (scope, key) VALUES (TG_ARGV[0], NEW.id::text);
    END IF;
    RETURN NULL;
END $$;

-- The same columns as the notifications of 20261129000004 and 20261201000001 (recording use
-- is in other columns and tables, and logs nothing).
CREATE TRIGGER connections_log
    AFTER INSERT OR DELETE OR UPDATE OF status, key_id, access_token_ct, refresh_token_ct, id_token_ct,
        token_type, access_expires_at, scopes, account_id, account_login, version, tenant_id, subject, provider
    ON connections
    FOR EACH ROW EXECUTE FUNCTION mcpc_log_change('connection');

CREATE TRIGGER kill_switches_log
    AFTER INSERT OR UPDATE OR DELETE ON kill_switches
    FOR EACH STATEMENT EXECUTE FUNCTION mcpc_log_change('kill_switch');

CREATE TRIGGER api_keys_log
    AFTER INSERT OR UPDATE OF revoked_at, tenant_id, scope, hash OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION mcpc_log_change('api_key');

CREATE TRIGGER tenants_log
    AFTER INSERT OR UPDATE OF active, display_name, allowed_providers OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION mcpc_log_change('tenant');

-- TRUNCATE fires no row trigger (and sends no notification): logged as `all`.
CREATE TRIGGER connections_log_truncate AFTER TRUNCATE ON connections
    FOR EACH STATEMENT EXECUTE FUNCTION mcpc_log_change('connection');
CREATE TRIGGER kill_switches_log_truncate AFTER TRUNCATE ON kill_switches
    FOR EACH STATEMENT EXECUTE FUNCTION mcpc_log_change('kill_switch');
CREATE TRIGGER api_keys_log_truncate AFTER TRUNCATE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION mcpc_log_change('api_key');
CREATE TRIGGER tenants_log_truncate AFTER TRUNCATE ON tenants
    FOR EACH STATEMENT EXECUTE FUNCTION mcpc_log_change('tenant');
