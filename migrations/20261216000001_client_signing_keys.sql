-- Keys mcp-connect signs its client assertions with (RFC 7523 `private_key_jwt`, docs/keys.md):
-- ES256 key pairs made by the service, the private key sealed by the vault (under the
-- service's data key once data keys are on; bound to its kid), the public one served at
-- /.well-known/jwks.json for providers to register. Of the keys whose `sign_from` has come,
-- the one made last signs; a key is published until `unpublish_at` (NULL: until a rotation
-- sets it), so a new key is published before it signs and an old one stays published after
-- it stopped.
--
-- Expand-only: a binary of the release before ignores the table.
SET LOCAL lock_timeout = '10s';

CREATE TABLE client_signing_keys (
    kid            text PRIMARY KEY,                     -- RFC 7638 thumbprint of the public key
    alg            text NOT NULL CHECK (alg = 'ES256'),
    public_jwk     jsonb NOT NULL,
    key_id         text NOT NULL,                        -- the sealing key, as every sealed column names it
    private_sealed bytea NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    sign_from      timestamptz NOT NULL,
    unpublish_at   timestamptz,
    CHECK (unpublish_at IS NULL OR unpublish_at >= sign_from)
);

-- A key's identity never changes, and a key is never deleted (a kid is never reused).
CREATE FUNCTION client_signing_keys_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'client signing keys are never deleted (kid %)', OLD.kid USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.kid <> OLD.kid OR NEW.alg <> OLD.alg OR NEW.public_jwk <> OLD.public_jwk OR NEW.sign_from <> OLD.sign_from THEN
        RAISE EXCEPTION 'a client signing key''s identity never changes (kid %)', OLD.kid USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER client_signing_keys_guard BEFORE UPDATE OR DELETE ON client_signing_keys
    FOR EACH ROW EXECUTE FUNCTION client_signing_keys_guard();
