-- The audit trail names the person as the pair (issuer, subject): tenants of different
-- IdPs may each have an `alice`. NULL: an event of no subject, or one the release before
-- wrote (it knows nothing of this column). Adding a nullable column without a default
-- only changes the catalogue, on the partitioned table and every partition.
SET LOCAL lock_timeout = '10s';
ALTER TABLE audit_events ADD COLUMN issuer text;
