-- Calls through the proxy (issue 42) are counted as hand-outs are, in rows of their own kind
-- (`proxied_calls`) per instance, connection, API key, minute, method class and status class
-- (the classes in `detail`). The rows' own key takes the kind and the detail too, so that a
-- batch written again still inserts nothing twice and rows of two classes never collide.
-- Writers of the release before use `ON CONFLICT DO NOTHING` without a target: any unique
-- index serves them.
DROP INDEX audit_events_handout;
CREATE UNIQUE INDEX audit_events_handout ON audit_events (at, instance, connection_id, api_key_id, first_at, kind, detail);
