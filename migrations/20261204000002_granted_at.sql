-- Hardening round 3: when the grant in force was made. A reconnect after a revocation
-- reuses the connection's row, so `created_at` (the row's first connect) is not when this
-- grant was made; "Your connections" and the admin API show `granted_at`. Existing rows
-- take their last `connect_completed` event's time where the audit trail still has it,
-- else their creation. Expand only: an older release leaves it at its default on insert
-- (the time of the insert, which is right) and does not set it on a reconnect.
ALTER TABLE connections ADD COLUMN granted_at timestamptz NOT NULL DEFAULT now();
UPDATE connections SET granted_at = created_at;
UPDATE connections c SET granted_at = g.at
FROM (SELECT connection_id, max(at) AS at FROM audit_events
      WHERE kind = 'connect_completed' AND connection_id IS NOT NULL GROUP BY connection_id) g
WHERE g.connection_id = c.id AND g.at > c.created_at;
