-- API-key change notifications name what changed (hardening): instances drop only the
-- verifications concerned instead of every cached key, and a key created anywhere clears
-- any instance's memory of its id being unknown (the negative cache). Payloads on the
-- channel mcpc_api_keys: 'new:<id>' (created), 'key:<id>' (revoked, changed, deleted) or 'tenant:<id>'
-- (created, renamed, activated, deactivated, deleted). Forward-only: replaces the statement-level triggers
-- of 20261129000004, whose empty payload meant "forget every key". A new key announces
-- itself as 'new:<id>', which only clears the negative cache (a verification cached a moment
-- after the insert stays).

DROP TRIGGER api_keys_notify ON api_keys;
DROP TRIGGER tenants_notify ON tenants;
DROP FUNCTION mcpc_notify_api_keys();

CREATE FUNCTION mcpc_notify_api_key() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    key_id text;
BEGIN
    IF TG_OP = 'DELETE' THEN key_id := OLD.id; ELSE key_id := NEW.id; END IF;
    PERFORM pg_notify('mcpc_api_keys', CASE TG_OP WHEN 'INSERT' THEN 'new:' ELSE 'key:' END || key_id);
    RETURN NULL;
END $$;

CREATE TRIGGER api_keys_notify
    AFTER INSERT OR UPDATE OF revoked_at, tenant_id, scope, hash OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION mcpc_notify_api_key();

CREATE FUNCTION mcpc_notify_tenant() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    tenant text;
BEGIN
    IF TG_OP = 'DELETE' THEN tenant := OLD.id; ELSE tenant := NEW.id; END IF;
    PERFORM pg_notify('mcpc_api_keys', 'tenant:' || tenant);
    RETURN NULL;
END $$;

-- Also on insert and on a new name or provider list: every instance serves every active
-- tenant in the table, not only those in its own file.
CREATE TRIGGER tenants_notify
    AFTER INSERT OR UPDATE OF active, display_name, allowed_providers OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION mcpc_notify_tenant();
