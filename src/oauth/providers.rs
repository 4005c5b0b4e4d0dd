//! Provider templates and the registry of configured providers.
//!
//! A template fills in the well-known endpoints of a provider; configuration supplies the
//! client credentials and may override any endpoint. `oidc` providers are configured by
//! issuer and resolved through discovery when the flow needs them.

use crate::domain::{ProviderId, Scopes};
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::sync::Arc;
use url::Url;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    Github,
    Google,
    Gitlab,
    Slack,
    Microsoft,
    /// Any OpenID Connect provider, endpoints from discovery.
    Oidc,
    /// Any OAuth 2.0 provider, endpoints given explicitly.
    Oauth2,
    /// No OAuth: an API key (and any other fields) typed on our page (`oauth::credential`).
    ApiKey,
    /// No OAuth: a username and password typed on our page, used as HTTP Basic.
    Basic,
    /// A remote MCP server: its authorization server discovered (RFC 9728, RFC 8414),
    /// mcp-connect registered there, its tokens bound to it (RFC 8707).
    Mcp,
}

/// What a template knows about a provider; every field can be overridden in the config.
#[derive(Debug, Clone, Default)]
pub struct Template {
    pub display_name: &'static str,
    pub authorize_url: Option<&'static str>,
    pub token_url: Option<&'static str>,
    pub userinfo_url: Option<&'static str>,
    pub revocation_url: Option<&'static str>,
    pub issuer: Option<&'static str>,
    pub oidc: bool,
    pub scope_separator: &'static str,
    pub default_scopes: &'static [&'static str],
    pub extra_authorize_params: &'static [(&'static str, &'static str)],
    pub account_id_field: &'static str,
    pub account_login_field: &'static str,
}

impl ProviderKind {
    pub fn template(self) -> Template {
        match self {
            ProviderKind::Github => GITHUB,
            ProviderKind::Google => GOOGLE,
            ProviderKind::Gitlab => GITLAB,
            ProviderKind::Slack => SLACK,
            ProviderKind::Microsoft => MICROSOFT,
            ProviderKind::Oidc => OIDC,
            ProviderKind::Oauth2 => OAUTH2,
            ProviderKind::ApiKey | ProviderKind::Basic => CREDENTIAL,
            ProviderKind::Mcp => MCP,
        }
    }

    /// A kind whose credential is typed on our page rather than granted by OAuth.
    pub fn is_credential(self) -> bool {
        matches!(self, ProviderKind::ApiKey | ProviderKind::Basic)
    }
}

/// The fields a template leaves unset (`Default` is not `const`).
const EMPTY: Template = Template {
    display_name: "",
    authorize_url: None,
    token_url: None,
    userinfo_url: None,
    revocation_url: None,
    issuer: None,
    oidc: false,
    scope_separator: " ",
    default_scopes: &[],
    extra_authorize_params: &[],
    account_id_field: "",
    account_login_field: "",
};

const GITHUB: Template = Template {
    display_name: "GitHub",
    authorize_url: Some("https://github.com/login/oauth/authorize"),
    token_url: Some("https://github.com/login/oauth/access_token"),
    userinfo_url: Some("https://api.github.com/user"),
    scope_separator: " ",
    default_scopes: &["read:user"],
    account_id_field: "id",
    account_login_field: "login",
    ..EMPTY
};

const GOOGLE: Template = Template {
    display_name: "Google",
    authorize_url: Some("https://accounts.google.com/o/oauth2/v2/auth"),
    token_url: Some("https://oauth2.googleapis.com/token"),
    userinfo_url: Some("https://openidconnect.googleapis.com/v1/userinfo"),
    revocation_url: Some("https://oauth2.googleapis.com/revoke"),
    issuer: Some("https://accounts.google.com"),
    oidc: true,
    scope_separator: " ",
    default_scopes: &["openid", "email"],
    // Without these Google issues no refresh token on a repeated consent.
    extra_authorize_params: &[("access_type", "offline"), ("prompt", "consent")],
    account_id_field: "sub",
    account_login_field: "email",
};

const GITLAB: Template = Template {
    display_name: "GitLab",
    authorize_url: Some("https://gitlab.com/oauth/authorize"),
    token_url: Some("https://gitlab.com/oauth/token"),
    userinfo_url: Some("https://gitlab.com/api/v4/user"),
    revocation_url: Some("https://gitlab.com/oauth/revoke"),
    scope_separator: " ",
    default_scopes: &["read_user"],
    account_id_field: "id",
    account_login_field: "username",
    ..EMPTY
};

const SLACK: Template = Template {
    display_name: "Slack",
    authorize_url: Some("https://slack.com/oauth/v2/authorize"),
    token_url: Some("https://slack.com/api/oauth.v2.access"),
    userinfo_url: Some("https://slack.com/api/users.identity"),
    scope_separator: ",",
    default_scopes: &["identity.basic"],
    account_id_field: "user.id",
    account_login_field: "user.name",
    ..EMPTY
};

const MICROSOFT: Template = Template {
    display_name: "Microsoft",
    authorize_url: Some("https://login.microsoftonline.com/common/oauth2/v2.0/authorize"),
    token_url: Some("https://login.microsoftonline.com/common/oauth2/v2.0/token"),
    userinfo_url: Some("https://graph.microsoft.com/v1.0/me"),
    scope_separator: " ",
    default_scopes: &["offline_access", "User.Read"],
    account_id_field: "id",
    account_login_field: "userPrincipalName",
    ..EMPTY
};

const OIDC: Template = Template {
    display_name: "",
    oidc: true,
    scope_separator: " ",
    default_scopes: &["openid"],
    account_id_field: "sub",
    account_login_field: "preferred_username",
    ..EMPTY
};

const OAUTH2: Template =
    Template { display_name: "", scope_separator: " ", account_id_field: "id", account_login_field: "login", ..EMPTY };

/// `api_key` and `basic`: no endpoints, no scopes; their account fields name none unless
/// configured.
const CREDENTIAL: Template = Template { display_name: "", scope_separator: " ", ..EMPTY };

/// `mcp`: everything from discovery; no account endpoint (an MCP server has none).
const MCP: Template = Template { display_name: "", scope_separator: " ", ..EMPTY };

/// One configured downstream provider, ready to use.
#[derive(Debug)]
pub struct Provider {
    pub id: ProviderId,
    pub kind: ProviderKind,
    pub display_name: String,
    pub client_id: String,
    pub client_secret: SecretString,
    /// Explicit endpoints; `None` for an `oidc` provider until discovery fills them.
    pub authorize_url: Option<Url>,
    pub token_url: Option<Url>,
    pub userinfo_url: Option<Url>,
    pub revocation_url: Option<Url>,
    pub issuer: Option<crate::net::urls::Issuer>,
    /// RFC 9207: the provider puts `iss` in its authorization responses, so a response
    /// without it, or with another value, is a mix-up attempt.
    pub authorization_response_iss: bool,
    pub oidc: bool,
    pub scope_separator: String,
    pub default_scopes: Scopes,
    pub extra_authorize_params: Vec<(String, String)>,
    pub account_id_field: String,
    pub account_login_field: String,
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
    /// 0 for a provider of the configuration file; the row's `revision` for one made over
    /// the operator API (what is cached of its discovery is keyed by it, so a change of
    /// its settings is never served from what the old ones found).
    pub revision: i64,
    /// How its endpoints, configured or discovered, are reached: `None` for a provider of
    /// the configuration file (its configured origins are the operator's word); for one of
    /// the operator API, through the SSRF guard (`Public`, or `Private` where
    /// `[operator] allow_private_endpoints` says so).
    pub reach: Option<crate::net::http::Reach>,
    /// `false`: switched off over the operator API; kept so that its grants can still be
    /// revoked at the provider, but nothing new starts and nothing is handed out.
    pub active: bool,
    /// `Some` for the `api_key` and `basic` kinds: what the connect page asks for and how it
    /// is checked. Their OAuth fields (client, endpoints, scopes) are empty and never used:
    /// every path that would talk OAuth to the provider asks [`Provider::credential`] first.
    pub credential: Option<Arc<super::credential::CredentialSpec>>,
    /// `Some` for the `mcp` kind: the remote MCP server's URL, its resource identifier.
    /// Its endpoints come from discovery; its client id from the configuration, or from
    /// registering (`flows::remote`).
    pub resource: Option<Url>,
    /// How the client authenticates at the token and revocation endpoints, where the
    /// configuration says (`token_endpoint_auth_method`); `None`: the server's metadata
    /// decides, else HTTP Basic (`oauth::client_auth::choose`).
    pub token_endpoint_auth_method: Option<super::client_auth::ClientAuth>,
}

/// All configured providers by id.
#[derive(Debug, Clone, Default)]
pub struct ProviderRegistry {
    providers: Arc<BTreeMap<ProviderId, Arc<Provider>>>,
}

impl ProviderRegistry {
    pub fn new(providers: Vec<Provider>) -> Self {
        Self { providers: Arc::new(providers.into_iter().map(|p| (p.id.clone(), Arc::new(p))).collect()) }
    }

    /// These providers, and beside them `more` whose ids these do not have (the file's win).
    pub fn with(&self, more: Vec<Provider>) -> Self {
        let mut all = (*self.providers).clone();
        for p in more {
            all.entry(p.id.clone()).or_insert_with(|| Arc::new(p));
        }
        Self { providers: Arc::new(all) }
    }

    pub fn get(&self, id: &ProviderId) -> Option<&Arc<Provider>> {
        self.providers.get(id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Arc<Provider>> {
        self.providers.values()
    }
}
