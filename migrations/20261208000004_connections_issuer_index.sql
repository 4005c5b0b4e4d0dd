-- no-transaction
-- As 20261208000003, for connections.
CREATE INDEX CONCURRENTLY IF NOT EXISTS connections_issuer_unset ON connections (id) WHERE issuer IS NULL;
