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
