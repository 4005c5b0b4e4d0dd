-- Change notifications for the in-process caches (DESIGN.md "Scaling out"): every change
-- that matters to a cached row is announced with pg_notify from the same transaction, so
-- every instance drops its copy when the change commits, whichever code path (service,
-- CLI, or an operator's SQL) made it. Forward-only.

-- A connection's grant or status changed. Payload: tenant, subject, provider separated by
-- the unit separator (subjects cannot contain control characters). last_used_at is not in
-- the column list on purpose: recording use must not flush the cache.
CREATE FUNCTION mcpc_notify_connection() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    r connections%ROWTYPE;
BEGIN
    IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
    PERFORM pg_notify('mcpc_connections', r.tenant_id || chr(31) || r.subject || chr(31) || r.provider);
    RETURN NULL;
END $$;

CREATE TRIGGER connections_notify
    AFTER INSERT OR DELETE OR UPDATE OF status, key_id, access_token_ct, refresh_token_ct, id_token_ct,
        token_type, access_expires_at, scopes, account_id, account_login, version, tenant_id, subject, provider
    ON connections
    FOR EACH ROW EXECUTE FUNCTION mcpc_notify_connection();

-- Kill switches: any change flushes every instance's kill-switch cache.
CREATE FUNCTION mcpc_notify_kill_switches() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mcpc_kill_switches', '');
    RETURN NULL;
END $$;

CREATE TRIGGER kill_switches_notify
    AFTER INSERT OR UPDATE OR DELETE ON kill_switches
    FOR EACH STATEMENT EXECUTE FUNCTION mcpc_notify_kill_switches();

-- API keys revoked, or tenants deactivated: drop cached key verifications at once instead
-- of waiting for the periodic re-check.
CREATE FUNCTION mcpc_notify_api_keys() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mcpc_api_keys', '');
    RETURN NULL;
END $$;

CREATE TRIGGER api_keys_notify
    AFTER UPDATE OF revoked_at OR DELETE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION mcpc_notify_api_keys();

CREATE TRIGGER tenants_notify
    AFTER UPDATE OF active OR DELETE ON tenants
    FOR EACH STATEMENT EXECUTE FUNCTION mcpc_notify_api_keys();
