-- After 20261208000001: the issuer a row gets when it is inserted without one, and a
-- tenant's IdP written out.
--
-- `default_idp`: the default `[idp]`'s issuer, written by `serve` and `migrate` at start.
-- A link or connection a binary of the release before inserts during a rolling deploy (it
-- writes no issuer) gets it at once, from the trigger below, so new instances hand it out
-- without waiting for the next start's backfill. (That binary knows only `[idp]`: do not
-- name other IdPs for a tenant until no instance of it runs.)
CREATE TABLE default_idp (
    one    boolean PRIMARY KEY DEFAULT true CHECK (one),
    issuer text NOT NULL
);

CREATE FUNCTION mcpc_default_issuer() RETURNS trigger
LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
    IF NEW.issuer IS NULL THEN
        NEW.issuer := (SELECT issuer FROM default_idp);
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER elicitations_default_issuer BEFORE INSERT ON elicitations
    FOR EACH ROW EXECUTE FUNCTION mcpc_default_issuer();
CREATE TRIGGER connections_default_issuer BEFORE INSERT ON connections
    FOR EACH ROW EXECUTE FUNCTION mcpc_default_issuer();

-- A tenant's IdP is always written out (`default` is `[idp]`): a file that leaves `idp`
-- out keeps the database's value, as for the subject-token settings, so an instance
-- started with an older or shorter file never moves a tenant to another IdP. A binary of
-- the release before inserts tenants without it: the default fills it.
UPDATE tenants SET idp = 'default' WHERE idp IS NULL;
ALTER TABLE tenants ALTER COLUMN idp SET DEFAULT 'default', ALTER COLUMN idp SET NOT NULL;
