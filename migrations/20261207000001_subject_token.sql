-- A tenant's MCP server may prove whose token it asks for with the user's MCP access
-- token (`subject_token` on POST /v1/token): the audience that token must name (the MCP
-- server's resource URL), and whether a bare `subject` is refused.
--
-- Expand only: a binary of the release before ignores both columns (it accepts a bare
-- subject for every tenant; README says so for rollbacks).
ALTER TABLE tenants
    ADD COLUMN subject_token_audience text,
    ADD COLUMN require_subject_token boolean NOT NULL DEFAULT false,
    ADD CONSTRAINT tenants_require_needs_audience
        CHECK (NOT require_subject_token OR subject_token_audience IS NOT NULL);

-- A change of either reaches every instance as a tenant change: the notification and the
-- change log name the same columns.
DROP TRIGGER tenants_notify ON tenants;
CREATE TRIGGER tenants_notify
    AFTER INSERT OR UPDATE OF active, display_name, allowed_providers, subject_token_audience, require_subject_token
    OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION mcpc_notify_tenant();

DROP TRIGGER tenants_log ON tenants;
CREATE TRIGGER tenants_log
    AFTER INSERT OR UPDATE OF active, display_name, allowed_providers, subject_token_audience, require_subject_token
    OR DELETE ON tenants
    FOR EACH ROW EXECUTE FUNCTION mcpc_log_change('tenant');
