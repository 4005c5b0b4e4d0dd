-- Hardening round 3: rollback protection for sealed values. Each write of new ciphertexts
-- to a row raises its seal generation, and the vault binds it into the associated data, so
-- an older ciphertext of the same row (a refresh token rotated out, a webhook secret that
-- leaked and was rotated away) put back no longer opens. NULL: sealed before generations
-- (the first associated-data format); `mcp-connect rotate-key` re-seals such rows.
ALTER TABLE connections ADD COLUMN seal_version bigint;
ALTER TABLE webhooks ADD COLUMN secret_version bigint;

-- The generation only grows, and once set it stays set: whoever can write rows but not
-- change the schema cannot put an old (ciphertext, generation) pair back. New ciphertexts
-- come with a new generation; clearing them (a revocation) needs none.
CREATE FUNCTION connections_seal_version_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    IF OLD.seal_version IS NOT NULL THEN
        IF NEW.seal_version IS NULL OR NEW.seal_version < OLD.seal_version THEN
            RAISE EXCEPTION 'connections.seal_version may only grow (% to %)', OLD.seal_version, NEW.seal_version
                USING ERRCODE = 'check_violation';
        END IF;
        IF NEW.seal_version = OLD.seal_version
           AND (NEW.access_token_ct, NEW.refresh_token_ct, NEW.id_token_ct)
               IS DISTINCT FROM (OLD.access_token_ct, OLD.refresh_token_ct, OLD.id_token_ct)
           AND COALESCE(NEW.access_token_ct, NEW.refresh_token_ct, NEW.id_token_ct) IS NOT NULL THEN
            RAISE EXCEPTION 'connections: new sealed values need a new seal_version'
                USING ERRCODE = 'check_violation';
        END IF;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER connections_seal_version_guard BEFORE UPDATE ON connections
    FOR EACH ROW EXECUTE FUNCTION connections_seal_version_guard();

CREATE FUNCTION webhooks_secret_version_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    IF OLD.secret_version IS NOT NULL THEN
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
    RETURN NEW;
END $$;
CREATE TRIGGER webhooks_secret_version_guard BEFORE UPDATE ON webhooks
    FOR EACH ROW EXECUTE FUNCTION webhooks_secret_version_guard();
