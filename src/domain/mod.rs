//! Values from outside parsed into types once, at the edge: a `Subject` or `Scopes` in hand
//! is known to be well formed, so the code behind the edge never re-validates strings.

mod audit;
mod clock;
pub mod failpoint;
pub mod gate;
mod handout;
mod ids;
#[cfg(test)]
pub(crate) mod props;
mod scopes;
pub mod shown;
pub mod workload;

pub use audit::{AuditKind, MethodClass, ProxiedCall, StatusClass};
pub use clock::{Clock, ManualClock, SystemClock};
pub use handout::{ConnectionFacts, HandOut, HandOutRequest, RefreshPolicy, check_handout};
pub use ids::{
    ApiKeyId, Caller, ConnectionId, ConnectionKey, DEFAULT_IDP, ElicitationId, IdpName, ProviderId, Subject, TenantId,
    WebhookId, hex16,
};
pub use scopes::Scopes;

/// What the operator's kill switches allow for a tenant's provider right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillState {
    Open,
    NoNewElicitations,
    NoTokenHandouts,
}

impl KillState {
    /// What the switches in force (a tenant's own and the global one) allow together: the
    /// stricter wins.
    pub fn of(modes: &[KillMode]) -> Self {
        if modes.contains(&KillMode::NoTokenHandouts) {
            Self::NoTokenHandouts
        } else if modes.is_empty() {
            Self::Open
        } else {
            Self::NoNewElicitations
        }
    }
}

/// What a kill switch stops: `no_new_elicitations` stops new links and connects in
/// flight; `no_token_handouts` also stops handing out stored tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
#[schema(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum KillMode {
    NoNewElicitations,
    NoTokenHandouts,
}

impl KillMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoNewElicitations => "no_new_elicitations",
            Self::NoTokenHandouts => "no_token_handouts",
        }
    }

    pub fn parse(s: &str) -> Result<Self, ParseError> {
        match s {
            "no_new_elicitations" => Ok(Self::NoNewElicitations),
            "no_token_handouts" => Ok(Self::NoTokenHandouts),
            _ => Err(ParseError("unknown kill switch mode")),
        }
    }

    /// The mode's text, or `off` for no switch (as audit rows and webhooks say it).
    pub fn or_off(mode: Option<Self>) -> &'static str {
        mode.map_or("off", Self::as_str)
    }
}

/// The account at the provider a connection belongs to.
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct Account {
    pub id: String,
    pub login: Option<String>,
}

/// A tenant: one MCP server registration.
#[derive(Debug, Clone)]
pub struct TenantConfig {
    pub id: TenantId,
    pub display_name: String,
    pub providers: Vec<ProviderId>,
    pub subject_token: SubjectTokenPolicy,
    /// The tenant's primary IdP (`default`: `[idp]`). `None` only in a configuration file
    /// that leaves it out: the database's value stands (`default` for a new tenant).
    pub idp: Option<IdpName>,
    /// What `/v1/token` hands out. `None` only in a configuration file that leaves it out:
    /// the database's value stands (credentials for a new tenant).
    pub hand_out: Option<HandOutPolicy>,
    /// The workload issuers it trusts (`None`: none; a file that leaves them out trusts
    /// none, so a trust removed from the file ends).
    pub workload_issuers: Option<Vec<workload::WorkloadIssuer>>,
}

/// Whether `/v1/token` hands out the credential itself, or only that a usable connection
/// exists (its account and scopes): the grant is then used only through `/v1/proxy`, and
/// tool code never holds a token.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HandOutMode {
    #[default]
    Credentials,
    None,
}

impl HandOutMode {
    pub fn as_str(self) -> &'static str {
        match self {
            HandOutMode::Credentials => "credentials",
            HandOutMode::None => "none",
        }
    }
}

/// A tenant's hand-out: a default, and overrides by provider (as stored, as JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandOutPolicy {
    pub default: HandOutMode,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub providers: std::collections::BTreeMap<String, HandOutMode>,
}

impl HandOutPolicy {
    pub fn for_provider(&self, provider: &ProviderId) -> HandOutMode {
        self.providers.get(provider.as_str()).copied().unwrap_or(self.default)
    }

    /// As stored: unreadable means nothing is handed out (a custody setting fails closed).
    pub fn from_stored(v: Option<&serde_json::Value>) -> Self {
        match v {
            None | Some(serde_json::Value::Null) => Self::default(),
            Some(v) => serde_json::from_value(v.clone()).unwrap_or_else(|e| {
                tracing::warn!(error = %e, "a tenant's hand_out is unreadable: nothing is handed out");
                HandOutPolicy { default: HandOutMode::None, providers: std::collections::BTreeMap::new() }
            }),
        }
    }
}

/// How a tenant's MCP server proves whose token it asks for (`subject_token` on
/// `POST /v1/token`, see `flows::subject`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubjectTokenPolicy {
    /// The audience the user's MCP access token must name: the MCP server's resource URL
    /// (RFC 9728). `None`: this tenant's requests carry no subject token (in a
    /// configuration file: not said, the database's value is kept).
    pub audience: Option<String>,
    /// `Some(true)`: a request naming only a `subject` is refused, so that a leaked server
    /// key alone fetches nothing. `None` (a configuration file that leaves it out): the
    /// database's value is kept, so an instance whose file lacks the setting never turns
    /// it off for the others; it counts as `false` where nothing says otherwise.
    pub required: Option<bool>,
}

impl SubjectTokenPolicy {
    pub fn is_required(&self) -> bool {
        self.required == Some(true)
    }
}

/// Why an outside value was refused. The message is safe to show to the caller: it names
/// the rule, never echoes a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub &'static str);

/// Status of an elicitation (DESIGN.md data model).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ElicitationStatus {
    Pending,
    Completed,
    Declined,
    Expired,
    Cancelled,
}

impl ElicitationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Completed => "completed",
            Self::Declined => "declined",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Result<Self, ParseError> {
        Ok(match s {
            "pending" => Self::Pending,
            "completed" => Self::Completed,
            "declined" => Self::Declined,
            "expired" => Self::Expired,
            "cancelled" => Self::Cancelled,
            _ => return Err(ParseError("unknown elicitation status")),
        })
    }
}

/// Status of a stored connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionStatus {
    Active,
    NeedsReauth,
    Revoked,
}

impl ConnectionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::NeedsReauth => "needs_reauth",
            Self::Revoked => "revoked",
        }
    }

    pub fn parse(s: &str) -> Result<Self, ParseError> {
        Ok(match s {
            "active" => Self::Active,
            "needs_reauth" => Self::NeedsReauth,
            "revoked" => Self::Revoked,
            _ => return Err(ParseError("unknown connection status")),
        })
    }
}

/// Stores a status enum or an id in its `TEXT` column as [`as_str`](ElicitationStatus::as_str)
/// spells it, and reads it back through `parse`: a value the code does not know (or that
/// no longer parses) is a decode error, not a string that compares unequal to everything.
macro_rules! text_column {
    ($t:ty) => {
        impl sqlx::Type<sqlx::Postgres> for $t {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <str as sqlx::Type<sqlx::Postgres>>::type_info()
            }
            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <str as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }
        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $t {
            fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                let s = <&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
                Ok(Self::parse(s)?)
            }
        }
        impl sqlx::Encode<'_, sqlx::Postgres> for $t {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <&str as sqlx::Encode<sqlx::Postgres>>::encode(self.as_str(), buf)
            }
        }
    };
}
text_column!(ElicitationStatus);
text_column!(ConnectionStatus);
text_column!(KillMode);
text_column!(Subject);
text_column!(TenantId);
text_column!(IdpName);
text_column!(ProviderId);
text_column!(ApiKeyId);
text_column!(KeyScope);

/// An id in a `TEXT[]` column (a tenant's providers): an array of [`text_column!`]s.
macro_rules! text_array_column {
    ($t:ty) => {
        impl sqlx::postgres::PgHasArrayType for $t {
            fn array_type_info() -> sqlx::postgres::PgTypeInfo {
                <&str as sqlx::postgres::PgHasArrayType>::array_type_info()
            }
            fn array_compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <&str as sqlx::postgres::PgHasArrayType>::array_compatible(ty)
            }
        }
    };
}
text_array_column!(ProviderId);

/// Stores an id newtype over a `Uuid` in its `UUID` column. Every UUID is a well-formed id
/// (`parse` only insists on one spelling of its text), so decoding cannot refuse one.
macro_rules! uuid_column {
    ($t:ty) => {
        impl sqlx::Type<sqlx::Postgres> for $t {
            fn type_info() -> sqlx::postgres::PgTypeInfo {
                <uuid::Uuid as sqlx::Type<sqlx::Postgres>>::type_info()
            }
            fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
                <uuid::Uuid as sqlx::Type<sqlx::Postgres>>::compatible(ty)
            }
        }
        impl sqlx::postgres::PgHasArrayType for $t {
            fn array_type_info() -> sqlx::postgres::PgTypeInfo {
                <uuid::Uuid as sqlx::postgres::PgHasArrayType>::array_type_info()
            }
        }
        impl<'r> sqlx::Decode<'r, sqlx::Postgres> for $t {
            fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
                Ok(Self::from_uuid(<uuid::Uuid as sqlx::Decode<sqlx::Postgres>>::decode(value)?))
            }
        }
        impl sqlx::Encode<'_, sqlx::Postgres> for $t {
            fn encode_by_ref(
                &self,
                buf: &mut sqlx::postgres::PgArgumentBuffer,
            ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
                <uuid::Uuid as sqlx::Encode<sqlx::Postgres>>::encode(self.as_uuid(), buf)
            }
        }
    };
}
uuid_column!(ElicitationId);
uuid_column!(ConnectionId);
uuid_column!(WebhookId);

/// Scope of an API key: MCP servers call `/v1`, operators call `/admin/v1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum KeyScope {
    /// An MCP server's: `/v1`, for its tenant.
    Server,
    /// A tenant's operator's: `/admin/v1`, for its tenant.
    Admin,
    /// The platform operator's: `/operator/v1`, above tenants (it belongs to none, and
    /// reaches no tenant's connections or tokens).
    Operator,
}

impl KeyScope {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Server => "server",
            Self::Admin => "admin",
            Self::Operator => "operator",
        }
    }

    pub fn parse(s: &str) -> Result<Self, ParseError> {
        match s {
            "server" => Ok(Self::Server),
            "admin" => Ok(Self::Admin),
            "operator" => Ok(Self::Operator),
            _ => Err(ParseError("unknown key scope")),
        }
    }
}

/// A protected resource's identifier as an audience (RFC 9728 §1.2, RFC 8707 §2): an
/// absolute https URL (http on a loopback host, for development) with a host and without
/// a fragment, at most 2,000 characters. Kept as written: an audience is compared as a
/// string, and `https://mcp.example.com` is not `https://mcp.example.com/`.
pub fn resource_url(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    if raw.len() > 2000 {
        return Err("must be at most 2000 characters".to_owned());
    }
    let u = url::Url::parse(raw).map_err(|e| format!("not an absolute URL ({e})"))?;
    let loopback = matches!(u.host(), Some(url::Host::Ipv4(a)) if a.is_loopback())
        || matches!(u.host(), Some(url::Host::Ipv6(a)) if a.is_loopback())
        || u.host_str() == Some("localhost");
    match u.scheme() {
        "https" => {}
        "http" if loopback => {}
        _ => return Err("must be an https URL (http only on a loopback host)".to_owned()),
    }
    if u.host_str().is_none() || u.fragment().is_some() || !u.username().is_empty() || u.password().is_some() {
        return Err("must have a host, and no fragment or credentials".to_owned());
    }
    Ok(raw.to_owned())
}

#[cfg(test)]
mod resource_url_tests {
    use super::resource_url;

    #[test]
    fn a_resource_is_an_https_url_or_http_on_loopback() {
        for ok in [
            "https://mcp.example.com/mcp",
            "https://mcp.example.com",
            "http://127.0.0.1:8090/mcp",
            "http://localhost/x",
        ] {
            assert_eq!(resource_url(ok).as_deref(), Ok(ok), "{ok}");
        }
        for bad in [
            "mcp-server",
            "",
            "urn:example:mcp",
            "http://mcp.example.com/mcp",
            "https://mcp.example.com/mcp#x",
            "https://user:pw@mcp.example.com/",
            "ftp://mcp.example.com/",
        ] {
            assert!(resource_url(bad).is_err(), "{bad:?}");
        }
    }
}
