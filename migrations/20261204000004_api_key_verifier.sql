-- Hardening round 3: a fast verifier for API keys. A key's secret is 256 random bits, so a
-- domain-separated SHA-256 of the whole key (`crypto::lookup_hash("api_key_verifier", key)`)
-- resists an offline guess as well as argon2 does, and checks in microseconds: a flood of
-- wrong secrets for a key id that is known (ids are in audit rows and key prefixes) costs no
-- argon2 and throttles nobody, and the right key works on an instance that never saw it.
-- Keys made before have none until their first verification by argon2 fills it in; until
-- then, wrong secrets for them are throttled per key id. The argon2 hash stays.
ALTER TABLE api_keys ADD COLUMN verifier bytea;
