-- Providers made over the operator API (`/operator/v1/providers`), beside those of the
-- configuration files: every instance serves them, within the cache bound of a change.
-- `settings` holds what a file's `[providers.<id>]` would say (no secret); the client
-- secret is sealed by the vault, bound to the row's id and `secret_version` (as a
-- webhook's is), so a sealed secret put back from an earlier version no longer opens.
-- `revision` grows with every change (what is cached of the provider's discovery is
-- keyed by it).
SET LOCAL lock_timeout = '10s';
CREATE TABLE providers (
    id                   text PRIMARY KEY,
    settings             jsonb NOT NULL,
    client_secret_sealed bytea NOT NULL,
    key_id               text NOT NULL,
    secret_version       bigint NOT NULL,
    revision             bigint NOT NULL DEFAULT 1,
    active               boolean NOT NULL DEFAULT true,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION providers_secret_version_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    IF TG_OP = 'INSERT' AND NEW.secret_version <> 1 THEN
        RAISE EXCEPTION 'providers: a new provider is sealed at generation 1' USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP = 'UPDATE' THEN
        IF NEW.secret_version < OLD.secret_version THEN
            RAISE EXCEPTION 'providers.secret_version may only grow (% to %)', OLD.secret_version, NEW.secret_version
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.secret_version = OLD.secret_version
           AND NEW.client_secret_sealed IS DISTINCT FROM OLD.client_secret_sealed THEN
            RAISE EXCEPTION 'providers: a new sealed secret needs a new secret_version' USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER providers_secret_version_guard BEFORE INSERT OR UPDATE ON providers
    FOR EACH ROW EXECUTE FUNCTION providers_secret_version_guard();

-- A provider made over the API is never deleted (deactivated instead): its id, once
-- gone, could come back with an older sealed secret.
CREATE FUNCTION providers_no_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    RAISE EXCEPTION 'providers are deactivated, never deleted' USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER providers_no_delete BEFORE DELETE ON providers
    FOR EACH ROW EXECUTE FUNCTION providers_no_delete();
CREATE TRIGGER providers_no_truncate BEFORE TRUNCATE ON providers
    FOR EACH STATEMENT EXECUTE FUNCTION providers_no_delete();

-- Every instance hears of a change (`provider:<id>` on the key channel, which every
-- instance listens to) and finds it in the change log when it missed that.
CREATE FUNCTION mcpc_notify_provider() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mcpc_api_keys', 'provider:' || NEW.id);
    RETURN NULL;
END $$;
CREATE TRIGGER providers_notify AFTER INSERT OR UPDATE ON providers
    FOR EACH ROW EXECUTE FUNCTION mcpc_notify_provider();
CREATE TRIGGER providers_log AFTER INSERT OR UPDATE ON providers
    FOR EACH ROW EXECUTE FUNCTION mcpc_log_change('provider');
