//! The downstream providers a tenant's users connect: what one is, whatever its kind.
//!
//! A [`Provider`] is its id, how it is shown, the operator's [`Policy`], where it was
//! configured ([`Origin`]: the file, or the operator API with its revision and reach) and
//! its [`Upstream`]: an OAuth 2.0 / OpenID Connect provider, a remote MCP server (its
//! authorization server found by discovery), or a typed credential (an API key or a
//! password the person types on our page). A kind has only the settings it uses, so a
//! typed credential cannot reach OAuth code by construction, and a new kind is one variant.
//!
//! - `templates`: the kinds and what a template knows of the well-known providers.
//! - `credential`: the typed credentials' form, their stored document and their check.
//! - `client_auth`: how the client authenticates at token and revocation endpoints.
//! - `proxy`: where the proxy may send a caller's request with the user's credential.
//! - `settings`: the configuration's `[providers.<name>]` and the operator API's stored
//!   settings (one [`settings::RawProvider`]) checked into a provider, the one check both share.
//! - `registry`: the providers served: the file's, and beside them the operator API's rows
//!   (read from the store, their client secrets opened by the vault: `client_secret`).

pub mod client_auth;
pub mod client_secret;
pub mod credential;
pub mod proxy;
pub mod registry;
pub mod settings;
pub mod templates;

pub use client_auth::ClientAuth;
pub use credential::CredentialSpec;
pub use registry::{ProviderRegistry, Providers};
pub use templates::{ProviderKind, Template};

use crate::domain::{ProviderId, Scopes};
use crate::net::http::Reach;
use crate::net::urls::Issuer;
use secrecy::{ExposeSecret, SecretString};
use std::sync::{Arc, LazyLock};
use url::Url;

/// One configured downstream provider, ready to use.
#[derive(Debug)]
pub struct Provider {
    pub id: ProviderId,
    /// The template it was configured with (the operator API shows it).
    pub kind: ProviderKind,
    pub display_name: String,
    pub policy: Policy,
    pub origin: Origin,
    pub upstream: Upstream,
    /// Where `/v1/proxy/{provider}/…` may go (`None`: the provider is not proxied).
    pub proxy: Option<proxy::ProxyRules>,
}

/// What the operator decided for a provider, whatever its kind.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Whether a re-connect may replace the upstream account pinned to a subject.
    pub allow_account_change: bool,
    /// Hosts in punycode accepted for this provider (see `net::urls`).
    pub allow_idn_hosts: Vec<String>,
    /// Tolerance for ID-token `exp` and `iat` (`clock_skew_seconds`).
    pub clock_skew: time::Duration,
    /// Endpoints found by discovery on another origin than the issuer may be private or
    /// loopback addresses, or plain http to loopback (`allow_private_endpoints`: an internal
    /// IdP whose discovery the operator trusts).
    pub allow_private_endpoints: bool,
}

/// Where a provider was configured.
#[derive(Debug, Clone, Copy)]
pub enum Origin {
    /// The configuration file: its configured origins are the operator's word.
    File,
    /// The operator API.
    Operator {
        /// The row's `revision`: what is cached of its discovery is keyed by it, so a
        /// change of its settings is never served from what the old ones found.
        revision: i64,
        /// How its endpoints, configured or discovered, are reached: through the SSRF
        /// guard (`Public`, or `Private` where `[operator] allow_private_endpoints` says so).
        reach: Reach,
        /// `false`: switched off; kept so that its grants can still be revoked at the
        /// provider, but nothing new starts and nothing is handed out.
        active: bool,
    },
}

/// What is on the other side, and the settings only that kind has.
#[derive(Debug)]
#[expect(clippy::large_enum_variant, reason = "a handful per instance, each behind an Arc: boxing buys nothing")]
pub enum Upstream {
    /// An OAuth 2.0 provider (endpoints configured or from its template), or an OpenID
    /// Connect one (endpoints from discovery of its issuer).
    OAuth(OAuth),
    /// A remote MCP server: its authorization server discovered (RFC 9728, RFC 8414),
    /// mcp-connect known there by a client configured, a Client ID Metadata Document or a
    /// registration (RFC 7591), its tokens bound to it (RFC 8707).
    RemoteMcp(RemoteMcp),
    /// An API key or a username and password typed on our page.
    Typed(Typed),
}

/// An OAuth client registered with a provider.
#[derive(Debug, Clone)]
pub struct Client {
    pub id: String,
    /// Empty for a public client (`token_endpoint_auth_method = "none"`).
    pub secret: SecretString,
    /// How the client authenticates at the token and revocation endpoints, where the
    /// configuration says; `None`: the server's metadata decides, else HTTP Basic
    /// (`client_auth::choose`).
    pub auth: Option<ClientAuth>,
}

impl Client {
    pub fn has_secret(&self) -> bool {
        !self.secret.expose_secret().is_empty()
    }
}

/// The endpoints configured (or from the template); `None` where discovery finds them.
#[derive(Debug, Clone, Default)]
pub struct Endpoints {
    pub authorize_url: Option<Url>,
    pub token_url: Option<Url>,
    pub userinfo_url: Option<Url>,
    pub revocation_url: Option<Url>,
}

/// The scopes a connect asks for when a tool names none, and how they are joined.
#[derive(Debug, Clone)]
pub struct ScopeRules {
    pub default: Scopes,
    /// `" "` or `","` (Slack).
    pub separator: String,
}

/// Where the account a grant is for is read from the provider's answer (dotted paths).
#[derive(Debug, Clone, Default)]
pub struct AccountFields {
    pub id_field: String,
    pub login_field: String,
}

#[derive(Debug)]
pub struct OAuth {
    pub client: Client,
    pub endpoints: Endpoints,
    pub issuer: Option<Issuer>,
    /// Endpoints from discovery of `issuer`, and ID tokens checked.
    pub oidc: bool,
    /// RFC 9207: the provider puts `iss` in its authorization responses, so a response
    /// without it, or with another value, is a mix-up attempt.
    pub authorization_response_iss: bool,
    pub scopes: ScopeRules,
    pub extra_authorize_params: Vec<(String, String)>,
    /// The MCP subject goes as OIDC `login_hint` (`login_hint = "subject"`).
    pub login_hint_subject: bool,
    pub account: AccountFields,
}

#[derive(Debug)]
pub struct RemoteMcp {
    /// The server's URL, its resource identifier.
    pub resource: Url,
    pub client: McpClient,
    /// The authorization server the discovered one must be (else the first one found is
    /// pinned).
    pub issuer: Option<Issuer>,
    pub authorization_response_iss: bool,
    pub scopes: ScopeRules,
}

/// How mcp-connect is known at a remote MCP server's authorization server.
#[derive(Debug)]
pub enum McpClient {
    /// Registered there by hand: the configuration names the client.
    Configured(Client),
    /// Found when the server is discovered: a Client ID Metadata Document where the server
    /// reads them, else a registration (RFC 7591), kept in `remote_mcp_clients`.
    Automatic,
}

#[derive(Debug)]
pub struct Typed {
    /// What the connect page asks for and how it is checked.
    pub spec: Arc<CredentialSpec>,
    /// Read from the check's answer, where configured.
    pub account: AccountFields,
}

static NO_SCOPES: LazyLock<Scopes> = LazyLock::new(Scopes::default);

impl Provider {
    /// 0 for a provider of the configuration file; the row's revision for one of the API.
    pub fn revision(&self) -> i64 {
        match self.origin {
            Origin::File => 0,
            Origin::Operator { revision, .. } => revision,
        }
    }

    /// How its endpoints are reached: `None` (as configured) for the file's providers.
    pub fn reach(&self) -> Option<Reach> {
        match self.origin {
            Origin::File => None,
            Origin::Operator { reach, .. } => Some(reach),
        }
    }

    /// `false`: switched off over the operator API.
    pub fn is_active(&self) -> bool {
        match self.origin {
            Origin::File => true,
            Origin::Operator { active, .. } => active,
        }
    }

    /// The typed credential's spec, for the `api_key` and `basic` kinds.
    pub fn credential(&self) -> Option<&Arc<CredentialSpec>> {
        match &self.upstream {
            Upstream::Typed(t) => Some(&t.spec),
            Upstream::OAuth(_) | Upstream::RemoteMcp(_) => None,
        }
    }

    /// The remote MCP server's URL, for the `mcp` kind.
    pub fn resource(&self) -> Option<&Url> {
        match &self.upstream {
            Upstream::RemoteMcp(m) => Some(&m.resource),
            Upstream::OAuth(_) | Upstream::Typed(_) => None,
        }
    }

    /// The scope rules of a kind that has scopes (a typed credential has none).
    pub fn scopes(&self) -> Option<&ScopeRules> {
        match &self.upstream {
            Upstream::OAuth(o) => Some(&o.scopes),
            Upstream::RemoteMcp(m) => Some(&m.scopes),
            Upstream::Typed(_) => None,
        }
    }

    /// The scopes a connect asks for when a tool names none (none for a typed credential).
    pub fn default_scopes(&self) -> &Scopes {
        self.scopes().map_or(&NO_SCOPES, |s| &s.default)
    }

    /// How scopes are joined on the authorization request.
    pub fn scope_separator(&self) -> &str {
        self.scopes().map_or(" ", |s| s.separator.as_str())
    }

    /// The OAuth client as configured: `None` for a typed credential and for a remote MCP
    /// server whose client is found by discovery.
    pub fn client(&self) -> Option<&Client> {
        match &self.upstream {
            Upstream::OAuth(o) => Some(&o.client),
            Upstream::RemoteMcp(RemoteMcp { client: McpClient::Configured(c), .. }) => Some(c),
            Upstream::RemoteMcp(_) | Upstream::Typed(_) => None,
        }
    }

    /// The issuer configured (an OAuth provider's, or the authorization server a remote
    /// MCP server's must be).
    pub fn issuer(&self) -> Option<&Issuer> {
        match &self.upstream {
            Upstream::OAuth(o) => o.issuer.as_ref(),
            Upstream::RemoteMcp(m) => m.issuer.as_ref(),
            Upstream::Typed(_) => None,
        }
    }

    /// Whether an authorization response must carry `iss` as configured (RFC 9207).
    pub fn authorization_response_iss(&self) -> bool {
        match &self.upstream {
            Upstream::OAuth(o) => o.authorization_response_iss,
            Upstream::RemoteMcp(m) => m.authorization_response_iss,
            Upstream::Typed(_) => false,
        }
    }

    /// The endpoints configured (an OAuth provider's only).
    pub fn endpoints(&self) -> Option<&Endpoints> {
        match &self.upstream {
            Upstream::OAuth(o) => Some(&o.endpoints),
            Upstream::RemoteMcp(_) | Upstream::Typed(_) => None,
        }
    }

    /// Where the account is read from: the user endpoint's answer (OAuth), the check's
    /// answer (a typed credential); a remote MCP server has no account endpoint.
    pub fn account_fields(&self) -> Option<&AccountFields> {
        match &self.upstream {
            Upstream::OAuth(o) => Some(&o.account),
            Upstream::Typed(t) => Some(&t.account),
            Upstream::RemoteMcp(_) => None,
        }
    }

    /// The URLs its configuration names that mcp-connect calls itself (the issuer's
    /// discovery, the token, user and revocation endpoints), by setting name.
    pub fn configured_urls(&self) -> [(&'static str, Option<&Url>); 4] {
        let ends = self.endpoints();
        [
            ("issuer", self.issuer().map(Issuer::url)),
            ("token_url", ends.and_then(|e| e.token_url.as_ref())),
            ("userinfo_url", ends.and_then(|e| e.userinfo_url.as_ref())),
            ("revocation_url", ends.and_then(|e| e.revocation_url.as_ref())),
        ]
    }
}

/// Reads a field of a provider's answer (its user endpoint's, a credential check's) by a
/// dotted path (`user.id`); numbers become strings.
pub fn json_field(v: &serde_json::Value, path: &str) -> Option<String> {
    let mut cur = v;
    for part in path.split('.') {
        cur = cur.get(part)?;
    }
    match cur {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_fields_are_read_by_dotted_path() {
        let v = serde_json::json!({"id": 42, "user": {"name": "x"}, "empty": ""});
        assert_eq!(json_field(&v, "id").as_deref(), Some("42"));
        assert_eq!(json_field(&v, "user.name").as_deref(), Some("x"));
        assert_eq!(json_field(&v, "empty"), None);
        assert_eq!(json_field(&v, "nope"), None);
    }
}
