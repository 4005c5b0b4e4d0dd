-- What the MCP client answered when it closed a link (hardening): `cancel` or `decline`,
-- kept with a `cancelled` elicitation so the API and the page can tell "closed in your
-- assistant" from an operator's cancel (NULL). `declined` stays the status for a refusal on
-- our consent page or `access_denied` at the provider. Forward-only.
ALTER TABLE elicitations
    ADD COLUMN cancel_reason text CHECK (cancel_reason IN ('cancel', 'decline'));
