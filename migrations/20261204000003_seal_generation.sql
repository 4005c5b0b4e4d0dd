-- Hardening round 3: rollback protection for sealed values. Each write of new ciphertexts
-- to a row raises its seal generation, and the vault binds it into the associated data, so
-- an older ciphertext of the same row (a refresh token rotated out, a webhook secret that
-- leaked and was rotated away) put back no longer opens. NULL: sealed before generations
-- (the first associated-data format); `mcp-connect rotate-key` re-seals such rows.
ALTER TABLE connections ADD COLUMN seal_version bigint;
ALTER TABLE webhooks ADD COLUMN secret_version bigint;

-- Whether rows without a generation may still be written: by instances of the previous
-- release during a rolling update, which know nothing of generations. `rotate-key` closes
-- it once it has re-sealed every such row; from then on every sealed value has one.
CREATE TABLE vault_state (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    legacy_open boolean NOT NULL
);
INSERT INTO vault_state (legacy_open) VALUES (true);

-- Once closed it stays closed, and the row stays (a missing row reads as closed too).
CREATE FUNCTION vault_state_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NOT OLD.legacy_open AND NEW.legacy_open THEN
        RAISE EXCEPTION 'vault_state: legacy writes, once closed, stay closed' USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP IN ('DELETE', 'TRUNCATE', 'INSERT') THEN
        RAISE EXCEPTION 'vault_state has its one row' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER vault_state_guard BEFORE INSERT OR UPDATE OR DELETE ON vault_state
    FOR EACH ROW EXECUTE FUNCTION vault_state_guard();
CREATE TRIGGER vault_state_no_truncate BEFORE TRUNCATE ON vault_state
    FOR EACH STATEMENT EXECUTE FUNCTION vault_state_guard();

-- The generation only grows, and once set it stays set; new ciphertexts come with a new
-- one (clearing them, a revocation, needs none); once legacy writes are closed, no row
-- holds a ciphertext without one. Whoever can write rows but not change the schema thus
-- cannot put an old (ciphertext, generation) pair back.
CREATE FUNCTION connections_seal_version_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
    sealed boolean := COALESCE(NEW.access_token_ct, NEW.refresh_token_ct, NEW.id_token_ct) IS NOT NULL;
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.seal_version IS NOT NULL THEN
        IF NEW.seal_version IS NULL OR NEW.seal_version < OLD.seal_version THEN
            RAISE EXCEPTION 'connections.seal_version may only grow (% to %)', OLD.seal_version, NEW.seal_version
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.seal_version = OLD.seal_version AND sealed
           AND (NEW.access_token_ct, NEW.refresh_token_ct, NEW.id_token_ct)
               IS DISTINCT FROM (OLD.access_token_ct, OLD.refresh_token_ct, OLD.id_token_ct) THEN
            RAISE EXCEPTION 'connections: new sealed values need a new seal_version'
                USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    IF TG_OP = 'INSERT' AND NEW.seal_version IS DISTINCT FROM 1 AND NEW.seal_version IS NOT NULL THEN
        RAISE EXCEPTION 'connections: a new row is sealed at generation 1' USING ERRCODE = 'check_violation';
    END IF;
    -- A value written without a generation (not one kept from before): refused once legacy
    -- writes are closed.
    IF NEW.seal_version IS NULL AND sealed
       AND (TG_OP = 'INSERT' OR (NEW.access_token_ct, NEW.refresh_token_ct, NEW.id_token_ct)
                                IS DISTINCT FROM (OLD.access_token_ct, OLD.refresh_token_ct, OLD.id_token_ct))
       AND NOT COALESCE((SELECT legacy_open FROM vault_state), false) THEN
        RAISE EXCEPTION 'connections: sealed values need a seal_version (rotate-key closed legacy writes)'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER connections_seal_version_guard BEFORE INSERT OR UPDATE ON connections
    FOR EACH ROW EXECUTE FUNCTION connections_seal_version_guard();

-- The service revokes connections and never deletes them: a row deleted and inserted again
-- would start its generations over.
CREATE FUNCTION connections_no_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    RAISE EXCEPTION 'connections are revoked, never deleted' USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER connections_no_delete BEFORE DELETE ON connections
    FOR EACH ROW EXECUTE FUNCTION connections_no_delete();
CREATE TRIGGER connections_no_truncate BEFORE TRUNCATE ON connections
    FOR EACH STATEMENT EXECUTE FUNCTION connections_no_delete();

CREATE FUNCTION webhooks_secret_version_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.secret_version IS NOT NULL THEN
        IF NEW.secret_version IS NULL OR NEW.secret_version < OLD.secret_version THEN
            RAISE EXCEPTION 'webhooks.secret_version may only grow (% to %)', OLD.secret_version, NEW.secret_version
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.secret_version = OLD.secret_version
           AND (NEW.secret_sealed IS DISTINCT FROM OLD.secret_sealed
                OR (NEW.previous_secret_sealed IS DISTINCT FROM OLD.previous_secret_sealed
                    AND NEW.previous_secret_sealed IS NOT NULL)) THEN
            RAISE EXCEPTION 'webhooks: new sealed secrets need a new secret_version'
                USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    IF TG_OP = 'INSERT' THEN
        IF NEW.secret_version IS DISTINCT FROM 1 AND NEW.secret_version IS NOT NULL THEN
            RAISE EXCEPTION 'webhooks: a new endpoint is sealed at generation 1' USING ERRCODE = 'check_violation';
        END IF;
        IF EXISTS (SELECT 1 FROM webhooks_deleted WHERE id = NEW.id) THEN
            RAISE EXCEPTION 'webhooks: a deleted endpoint does not come back' USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    IF NEW.secret_version IS NULL
       AND (TG_OP = 'INSERT' OR (NEW.secret_sealed, NEW.previous_secret_sealed)
                                IS DISTINCT FROM (OLD.secret_sealed, OLD.previous_secret_sealed))
       AND NOT COALESCE((SELECT legacy_open FROM vault_state), false) THEN
        RAISE EXCEPTION 'webhooks: sealed secrets need a secret_version (rotate-key closed legacy writes)'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

-- A deleted endpoint's id, so that its row (and its first secret) cannot be put back.
CREATE TABLE webhooks_deleted (id uuid PRIMARY KEY);
CREATE FUNCTION webhooks_remember_deleted() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    INSERT INTO webhooks_deleted (id) VALUES (OLD.id) ON CONFLICT DO NOTHING;
    RETURN OLD;
END $$;
CREATE TRIGGER webhooks_secret_version_guard BEFORE INSERT OR UPDATE ON webhooks
    FOR EACH ROW EXECUTE FUNCTION webhooks_secret_version_guard();
CREATE TRIGGER webhooks_remember_deleted AFTER DELETE ON webhooks
    FOR EACH ROW EXECUTE FUNCTION webhooks_remember_deleted();

-- A truncate would forget every id at once (and fires no row trigger); a tombstone is kept.
CREATE FUNCTION webhooks_keep_tombstones() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    RAISE EXCEPTION '% of % refused: deleted webhooks are remembered', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER webhooks_deleted_kept BEFORE UPDATE OR DELETE ON webhooks_deleted
    FOR EACH ROW EXECUTE FUNCTION webhooks_keep_tombstones();
CREATE TRIGGER webhooks_deleted_no_truncate BEFORE TRUNCATE ON webhooks_deleted
    FOR EACH STATEMENT EXECUTE FUNCTION webhooks_keep_tombstones();
CREATE TRIGGER webhooks_no_truncate BEFORE TRUNCATE ON webhooks
    FOR EACH STATEMENT EXECUTE FUNCTION webhooks_keep_tombstones();
