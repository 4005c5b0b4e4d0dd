-- A retry that waits (`wait_seconds` on POST /v1/token and GET /v1/elicitations/{id}):
-- every change of an elicitation's status is announced from the transaction that made it,
-- so a request waiting on any instance wakes when the connect (or a decline, a cancel, an
-- expiry) commits, instead of polling. Payload: the elicitation's id. Forward-only.
CREATE FUNCTION mcpc_notify_elicitation() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('mcpc_elicitations', NEW.id::text);
    RETURN NULL;
END $$;

CREATE TRIGGER elicitations_notify
    AFTER UPDATE OF status ON elicitations
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status)
    EXECUTE FUNCTION mcpc_notify_elicitation();
