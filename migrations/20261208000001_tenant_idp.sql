-- Each tenant may name its own primary identity provider, and the subject is the pair
-- (issuer, sub): a person signed in at one IdP never reaches the rows of another IdP's
-- subject of the same name.
--
-- `tenants.idp`: the name of the tenant's IdP in the configuration (`[idps.<name>]`); NULL
-- is the default `[idp]`.
-- `elicitations.issuer`, `connections.issuer`: the issuer of the subject the row was made
-- for. Rows written before this release (and by a binary of the release before, during a
-- rolling deploy) have NULL here; `serve` and `migrate` set them to the default `[idp]`'s
-- issuer, the only IdP those binaries knew. A NULL is never taken for a match.
--
-- Expand only: a binary of the release before ignores the three columns.
ALTER TABLE tenants ADD COLUMN idp text;
ALTER TABLE elicitations ADD COLUMN issuer text;
ALTER TABLE connections ADD COLUMN issuer text;

-- (The indexes the backfill reads are built in 20261208000003, concurrently: an index
-- built here would hold this transaction's locks for a scan of each whole table.)
SET LOCAL lock_timeout = '10s';

-- A tenant's IdP is part of what every instance must learn when it changes.
DROP TRIGGER tenants_notify ON tenants;
CREATE TRIGGER tenants_notify
    AFTER INSERT OR UPDATE OF active, display_name, allowed_providers, subject_token_audience, require_subject_token, idp
    OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION mcpc_notify_tenant();

DROP TRIGGER tenants_log ON tenants;
CREATE TRIGGER tenants_log
    AFTER INSERT OR UPDATE OF active, display_name, allowed_providers, subject_token_audience, require_subject_token, idp
    OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION mcpc_log_change('tenant');

-- So is a connection's issuer (the cached copy decides whether it may be handed out).
DROP TRIGGER connections_notify ON connections;
CREATE TRIGGER connections_notify
    AFTER INSERT OR DELETE OR UPDATE OF status, key_id, access_token_ct, refresh_token_ct, id_token_ct,
        token_type, access_expires_at, scopes, account_id, account_login, version, tenant_id, subject, provider, issuer
    ON connections
    FOR EACH ROW EXECUTE FUNCTION mcpc_notify_connection();

DROP TRIGGER connections_log ON connections;
CREATE TRIGGER connections_log
    AFTER INSERT OR DELETE OR UPDATE OF status, key_id, access_token_ct, refresh_token_ct, id_token_ct,
        token_type, access_expires_at, scopes, account_id, account_login, version, tenant_id, subject, provider, issuer
    ON connections
    FOR EACH ROW EXECUTE FUNCTION mcpc_log_change('connection');
