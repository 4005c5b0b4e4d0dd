-- Operator keys (scope `operator`), for the operator API (`/operator/v1`): above tenants,
-- so they belong to none. Expand only: the release before reads keys joined to their
-- tenant, so to it an operator key is an unknown key, and its own keys satisfy both checks.
SET LOCAL lock_timeout = '10s';
ALTER TABLE api_keys ALTER COLUMN tenant_id DROP NOT NULL;
ALTER TABLE api_keys DROP CONSTRAINT api_keys_scope_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_scope_check CHECK (scope IN ('server', 'admin', 'operator'));
ALTER TABLE api_keys ADD CONSTRAINT api_keys_operator_has_no_tenant CHECK ((scope = 'operator') = (tenant_id IS NULL));

-- Who keeps a tenant: a configuration file (`file`: every start writes what the file says,
-- and the operator API may only switch it off and on) or the operator API (`api`). A file
-- that names a tenant the API made takes it over at its next start.
ALTER TABLE tenants ADD COLUMN managed_by text NOT NULL DEFAULT 'file' CHECK (managed_by IN ('file', 'api'));
