//! Provider templates: the kinds a provider is configured as, and what a template knows
//! of the well-known ones. A template fills in the endpoints; configuration supplies the
//! client credentials and may override any endpoint. `oidc` providers are configured by
//! issuer and resolved through discovery when the flow needs them.

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
    /// The API origins `/v1/proxy` may reach where the configuration names none (the first
    /// is the default), and the path prefixes there.
    pub proxy_origins: &'static [&'static str],
    pub proxy_paths: &'static [&'static str],
    /// Whether its API takes `%2F` inside a path segment (`[proxy] encoded_slashes`).
    pub proxy_encoded_slashes: bool,
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
    proxy_origins: &[],
    proxy_paths: &["/"],
    proxy_encoded_slashes: false,
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
    proxy_origins: &["https://api.github.com", "https://uploads.github.com"],
    proxy_paths: &["/"],
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
    proxy_origins: &["https://www.googleapis.com", "https://gmail.googleapis.com", "https://people.googleapis.com"],
    proxy_paths: &["/"],
    proxy_encoded_slashes: false,
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
    proxy_origins: &["https://gitlab.com"],
    proxy_paths: &["/api/v4/"],
    // `/projects/group%2Fproject`: GitLab's way of naming a project by its path.
    proxy_encoded_slashes: true,
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
    proxy_origins: &["https://slack.com"],
    proxy_paths: &["/api/"],
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
    proxy_origins: &["https://graph.microsoft.com"],
    proxy_paths: &["/v1.0/", "/beta/"],
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
