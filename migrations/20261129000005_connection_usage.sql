-- When a connection was last used is kept apart from the connection row. Marking use (at
-- most once a minute per instance) then never rewrites the row that holds the grant, so
-- the row's version (its xmin) changes only when the grant or its status changes: the
-- lookup cache confirms its entries by that version (src/cache.rs). Forward-only.
CREATE TABLE connection_usage (
    connection_id uuid PRIMARY KEY REFERENCES connections (id) ON DELETE CASCADE,
    last_used_at  timestamptz NOT NULL
);

INSERT INTO connection_usage (connection_id, last_used_at)
    SELECT id, last_used_at FROM connections WHERE last_used_at IS NOT NULL;

ALTER TABLE connections DROP COLUMN last_used_at;
