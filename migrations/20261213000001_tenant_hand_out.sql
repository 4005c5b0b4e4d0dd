-- What POST /v1/token hands out for a tenant's connections (issue 42): NULL or
-- {"default": "credentials"} the credential itself; {"default": "none"} nothing but the
-- account and scopes, so the grant is used only through the proxy (/v1/proxy); per
-- provider overrides under "providers" ({"github": "credentials"}).
--
-- Expand only: a binary of the release before ignores the column and hands out
-- credentials for every tenant (README says so for rollbacks).
ALTER TABLE tenants ADD COLUMN hand_out jsonb;

-- A change reaches every instance as a tenant change: the notification and the change log
-- name the same columns.
DROP TRIGGER tenants_notify ON tenants;
CREATE TRIGGER tenants_notify
    AFTER INSERT OR UPDATE OF active, display_name, allowed_providers, subject_token_audience, require_subject_token, idp,
        hand_out
    OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION mcpc_notify_tenant();

DROP TRIGGER tenants_log ON tenants;
CREATE TRIGGER tenants_log
    AFTER INSERT OR UPDATE OF active, display_name, allowed_providers, subject_token_audience, require_subject_token, idp,
        hand_out
    OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION mcpc_log_change('tenant');
