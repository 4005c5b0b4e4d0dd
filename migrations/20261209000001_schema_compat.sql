-- Expand/contract, so that a rollback or a pod of the release before, restarted in the
-- middle of a rollout, is not an outage (docs/operations.md, "Upgrades and rollbacks"):
-- a release's migrations only expand the schema (new tables, nullable or defaulted
-- columns, indexes, triggers the older binary's writes satisfy), and a binary runs on a
-- schema with migrations it does not know as long as its compatibility level is at least
-- `oldest_binary_level`. To take away what an older binary uses (drop or rename what it
-- reads, add a NOT NULL it does not write), the release that stops using it raises the
-- binary's level (`store::SCHEMA_LEVEL`) to L; a later release's migration removes it and
-- sets `oldest_binary_level` to L, so every binary still using it refuses with a message
-- instead of failing at random (docs/development.md, "Changing the schema").
--
-- Level 1 is the first release with this table; binaries before it refuse any schema with
-- a migration they do not know.
CREATE TABLE schema_compat (
    one                 boolean PRIMARY KEY DEFAULT true CHECK (one),
    oldest_binary_level integer NOT NULL CHECK (oldest_binary_level >= 1)
);
INSERT INTO schema_compat (oldest_binary_level) VALUES (1);
