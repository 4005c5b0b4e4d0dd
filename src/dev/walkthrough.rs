//! What `dev` prints once it runs: how to try it, step by step.

use std::path::Path;

pub(super) fn print_walkthrough(base: &str, env_file: &Path, mcp_urls: &[url::Url], metrics_url: &str) {
    let Some(mcp_url) = mcp_urls.first() else { return };
    let more = more_servers(mcp_urls);
    let env = env_file.display();
    // `.` needs a path with a slash to read a file rather than search PATH: `./` before a
    // relative one, an absolute one as it is.
    let source = if env_file.is_absolute() { env.to_string() } else { format!("./{env}") };
    let mcp_listen =
        format!("{}:{}", mcp_url.host_str().unwrap_or("127.0.0.1"), mcp_url.port_or_known_default().unwrap_or(8090));
    println!(
        r#"
mcp-connect dev is running on {base}  (development keys: nothing here is for real use)
Values for scripts are in {env}.

Try it (in another terminal):

  set -a; . {source}; set +a

  # 1. An MCP server asks for alice's token at the dev provider:
  curl -s -H "Authorization: Bearer $MCP_CONNECT_API_KEY" -H 'content-type: application/json' \
       -d '{{"subject":"alice","provider":"dev"}}' $MCP_CONNECT_URL/v1/token

  # 2. Open the "url" it printed in a browser. Sign in at the Dev Identity Provider as: alice
  #    Click Connect on the consent page, then Allow at the Dev Provider.

  # 3. The retried tool call asks again, with the elicitation id from step 1:
  curl -s -H "Authorization: Bearer $MCP_CONNECT_API_KEY" -H 'content-type: application/json' \
       -d '{{"subject":"alice","provider":"dev","elicitation_id":"<id from step 1>"}}' $MCP_CONNECT_URL/v1/token
  #    -> "status":"connected" with the token.

  # An API key instead of OAuth: step 1 with "provider":"devkeys". The link opens a form
  # on this service's page; type devkey-alice (any devkey-<name> is valid, anything else
  # is refused by the Dev Key Service's check). Step 3 answers "credential_type":"api_key".

  # Now try the phishing case: make a new link (step 1 with "subject":"carol"), open it,
  # and sign in as bob. The page refuses: the link was made for another account.

  # People see and end their connections at {base}/connections (signed in as alice).
  # Operators: curl -s -H "Authorization: Bearer $MCP_CONNECT_ADMIN_KEY" $MCP_CONNECT_URL/admin/v1/audit
  # The platform's operator adds a tenant at runtime (no restart):
  #   curl -s -H "Authorization: Bearer $MCP_CONNECT_OPERATOR_KEY" -H 'content-type: application/json' \
  #        -d '{{"id":"acme","display_name":"Acme","providers":["dev"]}}' $MCP_CONNECT_URL/operator/v1/tenants
  # Webhooks: start dev with --webhook-echo to see each event, verified, in this terminal.
  # Metrics (Prometheus text, on their own port): curl -s {metrics_url}

The MCP side (docs/mcp-servers.md): run the docs' MCP server against this demo (its
resource is {mcp_url}), in the shell that loaded the env file: it holds what the server
reads (MCP_CONNECT_URL, MCP_CONNECT_API_KEY, MCP_STATE_KEY, MCP_ISSUER, MCP_PROVIDERS):

  MCP_LISTEN={mcp_listen} MCP_RESOURCE={mcp_url} .venv-mcp/bin/python examples/snippets/server.py
  #  or, after `npm ci --prefix clients/typescript && npm run build --prefix clients/typescript`
  #  and `npm ci --prefix examples/snippets`: node examples/snippets/server.mjs (same variables)

  # An MCP access token for alice (the dev IdP's dev-only grant; its audience is {mcp_url}),
  # and the docs' client calling the server's tool as alice:
  export MCP_TOKEN=$(curl -s -u mcp-connect-dev:$MCP_CONNECT_DEV_IDP_CLIENT_SECRET \
       -d grant_type=urn:mcp-connect:dev:subject -d subject=alice $MCP_CONNECT_DEV_IDP_URL/token | jq -r .access_token)
  MCP_URL={mcp_url} .venv-mcp/bin/python examples/snippets/client.py

{more}Press Ctrl-C to stop (the private PostgreSQL stops with it).
"#
    );
}

/// How to run the further MCP servers (`--mcp-url` given more than once): each its own
/// tenant, key and audience.
fn more_servers(mcp_urls: &[url::Url]) -> String {
    let mut out = String::new();
    for (i, url) in mcp_urls.iter().enumerate().skip(1) {
        let n = i + 1;
        let listen =
            format!("{}:{}", url.host_str().unwrap_or("127.0.0.1"), url.port_or_known_default().unwrap_or(8090));
        out.push_str(&format!(
            r#"MCP server {n} (tenant dev{n}, resource {url}): its own key, the same env file otherwise:

  MCP_CONNECT_API_KEY=$MCP_CONNECT_API_KEY_{n} MCP_LISTEN={listen} MCP_RESOURCE={url} node examples/snippets/server.mjs
  # its users' tokens: the same grant with -d resource={url}; the client with MCP_URL={url}

"#,
        ));
    }
    out
}
