//! What a provider is started with: its port, role, registered clients and token lifetimes.

use std::time::Duration;

/// Everything [`crate::DevProvider::start`] needs.
#[derive(Clone, Debug)]
pub struct DevProviderConfig {
    /// 0 picks a random free port on 127.0.0.1.
    pub port: u16,
    /// Shown as the `<h1>` of every page, e.g. "Dev Identity Provider".
    pub display_name: String,
    /// Decides the wording of the authorization page and whether the dev subject grant exists.
    pub role: Role,
    /// OAuth clients known at start; more can be added with [`crate::DevProvider::add_client`].
    pub clients: Vec<ClientRegistration>,
    /// Lifetime of access tokens, reported as `expires_in`.
    pub access_token_ttl: Duration,
    /// When set, access tokens are RS256 JWTs (RFC 9068 style: iss, sub, aud = this value,
    /// client_id, exp, iat, jti, scope) instead of opaque random strings.
    pub jwt_access_token_audience: Option<String>,
    /// Further audiences a client may ask for by `resource` (RFC 8707) on the dev subject
    /// grant (one MCP server each, beside the first); any other `resource` is
    /// `invalid_target`.
    pub extra_access_token_audiences: Vec<String>,
    /// The URL it is reached at, when that is not its own port (a proxy in front, in tests
    /// of what lies between): the issuer and every endpoint in its metadata use it.
    pub public_url: Option<String>,
}

impl Default for DevProviderConfig {
    fn default() -> Self {
        Self {
            port: 0,
            display_name: "Dev Provider".to_owned(),
            role: Role::Downstream,
            clients: Vec::new(),
            access_token_ttl: Duration::from_secs(3600),
            jwt_access_token_audience: None,
            extra_access_token_audiences: Vec::new(),
            public_url: None,
        }
    }
}

/// A registered OAuth client. Redirect URIs are compared as exact strings, as OAuth 2.1 requires.
#[derive(Clone)]
pub struct ClientRegistration {
    pub client_id: String,
    pub client_secret: String,
    pub redirect_uris: Vec<String>,
}

// The secret stays out of Debug output so a logged config never leaks it.
impl std::fmt::Debug for ClientRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientRegistration")
            .field("client_id", &self.client_id)
            .field("client_secret", &"<redacted>")
            .field("redirect_uris", &self.redirect_uris)
            .finish()
    }
}

/// What the provider stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Signs people in: the page asks "Sign in as", and the dev subject grant
    /// ([`crate::DEV_SUBJECT_GRANT_TYPE`]) is offered.
    IdentityProvider,
    /// A service whose API the user lets a client use: the page asks for consent.
    Downstream,
}

/// The dev-only grant of the identity provider role: `grant_type=urn:mcp-connect:dev:subject`
/// with `subject=<name>` and client authentication returns an access token for that subject
/// without a browser, so a test or an MCP client can get a token directly.
pub const DEV_SUBJECT_GRANT_TYPE: &str = "urn:mcp-connect:dev:subject";
