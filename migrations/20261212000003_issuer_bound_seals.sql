-- The person's issuer bound into sealed tokens (the vault's third associated-data format):
-- a ciphertext sealed so begins with the 8 bytes 'mcpc:v3:' and opens only for the issuer
-- its row names. Rows sealed before (by this release's predecessors) open as they were
-- until `rotate-key` re-seals them; once none is left it closes unbound writes, and from
-- then on a row that names an issuer takes no new sealed value without the mark (a
-- database writer cannot write an unbound one, nor put an old one back).
SET LOCAL lock_timeout = '10s';
ALTER TABLE vault_state ADD COLUMN unbound_open boolean NOT NULL DEFAULT true;

-- Both switches, once closed, stay closed; the row stays.
CREATE OR REPLACE FUNCTION vault_state_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NOT OLD.legacy_open AND NEW.legacy_open THEN
        RAISE EXCEPTION 'vault_state: legacy writes, once closed, stay closed' USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP = 'UPDATE' AND NOT OLD.unbound_open AND NEW.unbound_open THEN
        RAISE EXCEPTION 'vault_state: unbound writes, once closed, stay closed' USING ERRCODE = 'check_violation';
    END IF;
    IF TG_OP IN ('DELETE', 'TRUNCATE', 'INSERT') THEN
        RAISE EXCEPTION 'vault_state has its one row' USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;

-- Whether any of a row's sealed values lacks the mark (each column on its own: one bound
-- value does not carry an unbound one beside it). The guard below, rotate-key's selection
-- and its closing check all ask this.
CREATE FUNCTION mcpc_unbound_seal(access bytea, refresh bytea, id bytea) RETURNS boolean
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog AS $$
    SELECT COALESCE(substring(access FROM 1 FOR 8) <> '\x6d6370633a76333a'::bytea, false)
        OR COALESCE(substring(refresh FROM 1 FOR 8) <> '\x6d6370633a76333a'::bytea, false)
        OR COALESCE(substring(id FROM 1 FOR 8) <> '\x6d6370633a76333a'::bytea, false)
$$;

CREATE FUNCTION connections_issuer_bound_guard() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    -- (A value without a generation is the seal_version guard's to refuse.)
    IF NEW.issuer IS NOT NULL AND NEW.seal_version IS NOT NULL
       AND (TG_OP = 'INSERT' OR (NEW.access_token_ct, NEW.refresh_token_ct, NEW.id_token_ct)
                                IS DISTINCT FROM (OLD.access_token_ct, OLD.refresh_token_ct, OLD.id_token_ct))
       AND mcpc_unbound_seal(NEW.access_token_ct, NEW.refresh_token_ct, NEW.id_token_ct)
       AND NOT COALESCE((SELECT unbound_open FROM vault_state), false) THEN
        RAISE EXCEPTION 'connections: sealed values must bind the issuer (rotate-key closed unbound writes)'
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER connections_issuer_bound_guard BEFORE INSERT OR UPDATE ON connections
    FOR EACH ROW EXECUTE FUNCTION connections_issuer_bound_guard();
