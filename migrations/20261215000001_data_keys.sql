-- Envelope encryption (docs/keys.md): rows are sealed under data keys, one per tenant and
-- generation (and one scope for the service's own secrets: providers' client secrets, remote
-- MCP registrations, login cookies), and the data keys are stored only wrapped by the
-- key-encryption key of a key store. Ending a tenant destroys its data keys: `wrapped`
-- becomes NULL, and every value sealed under them opens nowhere, before any row is deleted.
--
-- Expand-only: a binary of the release before ignores the table. Writes use data keys once
-- `vault_state.data_keys_on` is set (at start on a database with nothing sealed yet, else by
-- `rotate-key`), which also raises `schema_compat.oldest_binary_level` to 2 so that a binary
-- that cannot open `dk:` rows refuses to start instead of failing on them.
SET LOCAL lock_timeout = '10s';

CREATE TABLE data_keys (
    id           uuid PRIMARY KEY,
    tenant_id    text REFERENCES tenants (id),         -- NULL: the service scope
    generation   integer NOT NULL CHECK (generation >= 1),
    state        text NOT NULL CHECK (state IN ('active', 'retired', 'destroyed')),
    kek_store    text NOT NULL CHECK (kek_store IN ('local', 'pkcs11', 'aws-kms')),
    kek_id       text NOT NULL,
    wrapped      bytea,
    wrap_version bigint NOT NULL DEFAULT 1,
    created_at   timestamptz NOT NULL DEFAULT now(),
    retired_at   timestamptz,
    destroyed_at timestamptz,
    CHECK ((state = 'destroyed') = (wrapped IS NULL)),
    CHECK ((state = 'destroyed') = (destroyed_at IS NOT NULL))
);
CREATE UNIQUE INDEX data_keys_tenant_generation ON data_keys (tenant_id, generation) WHERE tenant_id IS NOT NULL;
CREATE UNIQUE INDEX data_keys_service_generation ON data_keys (generation) WHERE tenant_id IS NULL;
CREATE UNIQUE INDEX data_keys_one_active ON data_keys (COALESCE(tenant_id, '')) WHERE state = 'active';
CREATE INDEX data_keys_by_kek ON data_keys (kek_store, kek_id) WHERE state <> 'destroyed';

-- A data key is never deleted (its id is never reused), its identity never changes, a
-- destroyed one stays destroyed, and its wrapping changes only with the next wrap_version
-- (a re-wrap that lost a race to another does not overwrite it).
CREATE FUNCTION data_keys_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'TRUNCATE') THEN
        RAISE EXCEPTION 'data_keys are never deleted: destroy one instead' USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF (NEW.id, NEW.tenant_id, NEW.generation, NEW.created_at)
           IS DISTINCT FROM (OLD.id, OLD.tenant_id, OLD.generation, OLD.created_at) THEN
            RAISE EXCEPTION 'data_keys: a data key''s identity does not change' USING ERRCODE = 'check_violation';
        END IF;
        IF OLD.state = 'destroyed' THEN
            RAISE EXCEPTION 'data_keys: a destroyed data key stays destroyed' USING ERRCODE = 'check_violation';
        END IF;
        IF OLD.state = 'retired' AND NEW.state = 'active' THEN
            RAISE EXCEPTION 'data_keys: a retired data key is not made active again' USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.wrapped IS NOT NULL AND NEW.wrapped IS DISTINCT FROM OLD.wrapped
           AND NEW.wrap_version <> OLD.wrap_version + 1 THEN
            RAISE EXCEPTION 'data_keys: a re-wrap takes the next wrap_version' USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER data_keys_guard BEFORE UPDATE OR DELETE ON data_keys
    FOR EACH ROW EXECUTE FUNCTION data_keys_guard();
CREATE TRIGGER data_keys_no_truncate BEFORE TRUNCATE ON data_keys
    FOR EACH STATEMENT EXECUTE FUNCTION data_keys_guard();

ALTER TABLE vault_state ADD COLUMN data_keys_on boolean NOT NULL DEFAULT false;

-- The switches, once closed (data keys: once on), stay so; the row stays.
CREATE OR REPLACE FUNCTION vault_state_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NOT OLD.legacy_open AND NEW.legacy_open THEN
        RAISE EXCEPTION 'vault_state: legacy writes, once closed, stay closed' USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP = 'UPDATE' AND NOT OLD.unbound_open AND NEW.unbound_open THEN
        RAISE EXCEPTION 'vault_state: unbound writes, once closed, stay closed' USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.data_keys_on AND NOT NEW.data_keys_on THEN
        RAISE EXCEPTION 'vault_state: data keys, once on, stay on' USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP IN ('DELETE', 'TRUNCATE', 'INSERT') THEN
        RAISE EXCEPTION 'vault_state has its one row' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

-- The key id a scope's values are sealed under now (`dk:` and the active data key's 32 hex
-- digits; NULL while the scope has none): what `rotate-key` re-seals toward. `tenant` NULL:
-- the service's own scope.
CREATE FUNCTION mcpc_active_key_id(tenant text) RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT 'dk:' || replace(id::text, '-', '') FROM data_keys
     WHERE state = 'active' AND COALESCE(tenant_id, '') = COALESCE(tenant, '')
$$;

-- Ending a tenant (crypto-shredding, docs/keys.md): its data keys are destroyed and it
-- stays off for good. No new data key is made for an ended tenant (the check waits for a
-- concurrent end to commit, and then sees it).
ALTER TABLE tenants ADD COLUMN ended_at timestamptz;
ALTER TABLE tenants ADD CONSTRAINT tenants_ended_stay_inactive CHECK (ended_at IS NULL OR NOT active);

CREATE FUNCTION tenants_ended_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    IF OLD.ended_at IS NOT NULL AND NEW.ended_at IS DISTINCT FROM OLD.ended_at THEN
        RAISE EXCEPTION 'tenants: an ended tenant stays ended' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER tenants_ended_guard BEFORE UPDATE ON tenants
    FOR EACH ROW EXECUTE FUNCTION tenants_ended_guard();

CREATE FUNCTION data_keys_of_live_tenants() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    IF NEW.tenant_id IS NOT NULL
       AND (SELECT ended_at FROM tenants WHERE id = NEW.tenant_id FOR SHARE) IS NOT NULL THEN
        RAISE EXCEPTION 'data_keys: tenant % was ended', NEW.tenant_id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER data_keys_of_live_tenants BEFORE INSERT ON data_keys
    FOR EACH ROW EXECUTE FUNCTION data_keys_of_live_tenants();

-- Whether the tenant was ended: its rows are ciphertext without a key, and rotate-key
-- leaves them be.
CREATE FUNCTION mcpc_tenant_ended(tenant text) RETURNS boolean
LANGUAGE sql STABLE SET search_path = pg_catalog, public AS $$
    SELECT COALESCE((SELECT ended_at IS NOT NULL FROM tenants WHERE id = tenant), false)
$$;

-- An ended tenant takes no value sealed under the keyring (one its destroyed data keys do
-- not cover). The check waits for a concurrent end to commit, and an end waits for a write
-- that checked first, so ending counts every such value or none is written after it.
-- Values under data keys need no check: an ended tenant's are unreadable and it gets no new one.
CREATE FUNCTION mcpc_no_keyring_seal_for_ended_tenants() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    IF NEW.key_id IS NOT NULL AND NEW.key_id NOT LIKE 'dk:%'
       AND (SELECT ended_at FROM tenants WHERE id = NEW.tenant_id FOR SHARE) IS NOT NULL THEN
        RAISE EXCEPTION '%: tenant % was ended', TG_TABLE_NAME, NEW.tenant_id USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER connections_no_keyring_seal_for_ended_tenants BEFORE INSERT OR UPDATE OF key_id ON connections
    FOR EACH ROW EXECUTE FUNCTION mcpc_no_keyring_seal_for_ended_tenants();
CREATE TRIGGER webhooks_no_keyring_seal_for_ended_tenants BEFORE INSERT OR UPDATE OF key_id ON webhooks
    FOR EACH ROW EXECUTE FUNCTION mcpc_no_keyring_seal_for_ended_tenants();
CREATE TRIGGER oauth_states_no_keyring_seal_for_ended_tenants BEFORE INSERT OR UPDATE OF key_id ON oauth_states
    FOR EACH ROW EXECUTE FUNCTION mcpc_no_keyring_seal_for_ended_tenants();
