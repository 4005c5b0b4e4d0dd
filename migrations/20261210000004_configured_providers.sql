-- The provider ids any instance's configuration file has named (written at every start and
-- `migrate`). The operator API makes and changes no provider of such an id, and no
-- instance serves an API provider under it: a file's provider and an API one never share
-- an id across instances whose files differ. An id stays here once named (grants and links
-- of it may exist).
SET LOCAL lock_timeout = '10s';
CREATE TABLE configured_providers (
    id         text PRIMARY KEY,
    first_seen timestamptz NOT NULL DEFAULT now()
);

-- An id newly named is announced as a provider change: every instance reads its providers
-- again and stops serving an API provider under it at once.
CREATE TRIGGER configured_providers_notify AFTER INSERT ON configured_providers
    FOR EACH ROW EXECUTE FUNCTION mcpc_notify_provider();
CREATE TRIGGER configured_providers_log AFTER INSERT ON configured_providers
    FOR EACH ROW EXECUTE FUNCTION mcpc_log_change('provider');
