-- Expand/contract, so that a rollback or a pod of the release before, restarted in the
-- middle of a rollout, is not an outage (docs/operations.md, "Upgrades and rollbacks"):
-- a release's migrations only expand the schema (new tables, nullable or defaulted
-- columns, indexes, triggers the older binary's writes satisfy), and a binary runs on a
-- schema with migrations it does not know as long as its compatibility level is at least
-- `oldest_binary_level`. A migration that takes away what an older binary uses (drops or
-- renames what it reads, adds a NOT NULL it does not write) lands a release after the code
-- stopped using it, and raises `oldest_binary_level` to the level of that release's
-- predecessor, so that older binaries refuse with a message instead of failing at random.
--
-- Level 1 is the first release with this table; binaries before it refuse any schema with
-- a migration they do not know.
CREATE TABLE schema_compat (
    one                 boolean PRIMARY KEY DEFAULT true CHECK (one),
    oldest_binary_level integer NOT NULL CHECK (oldest_binary_level >= 1)
);
INSERT INTO schema_compat (oldest_binary_level) VALUES (1);
