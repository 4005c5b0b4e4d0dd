//! The request and answer types of `/v1/token` and `/v1/elicitations/{id}` (docs/api.md).
//! Answers are parsed into an enum, so a caller matches on what happened instead of
//! reading a `status` string.

use crate::secret::AccessToken;
use serde::{Deserialize, Serialize};
use std::fmt;
use time::OffsetDateTime;

/// The id of an elicitation: an opaque handle issued by mcp-connect.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct ElicitationId(String);

/// A string that cannot be an elicitation id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not an elicitation id")]
pub struct InvalidElicitationId;

impl ElicitationId {
    /// Accepts 1 to 128 visible ASCII characters; mcp-connect's ids are UUIDs, but the
    /// client treats them as opaque.
    pub fn parse(s: &str) -> Result<Self, InvalidElicitationId> {
        if s.is_empty() || s.len() > 128 || !s.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(InvalidElicitationId);
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ElicitationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for ElicitationId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// The body of `POST /v1/token`. Only `subject` and `provider` are required.
#[derive(Debug, Clone, Serialize)]
pub struct TokenRequest {
    subject: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    subject_token: Option<crate::secret::SubjectToken>,
    provider: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    scopes: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    elicitation_id: Option<ElicitationId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mcp_session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_seconds: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server_name: Option<String>,
}

/// The longest mcp-connect holds a retry (`wait_seconds`).
pub const MAX_WAIT_SECONDS: u64 = 30;

impl TokenRequest {
    /// `subject` is the `sub` of the validated MCP access token, never a tool argument.
    pub fn new(subject: impl Into<String>, provider: impl Into<String>) -> Self {
        Self {
            subject: subject.into(),
            subject_token: None,
            provider: provider.into(),
            scopes: None,
            elicitation_id: None,
            mcp_session_id: None,
            wait_seconds: None,
            server_name: None,
        }
    }

    /// With [`Self::elicitation_id`]: while that elicitation is pending, let mcp-connect
    /// hold the answer up to `seconds` (at most 30) until the connect commits. The
    /// retry after the client's `accept` then returns the token the moment the person
    /// finishes, or the same pending answer when the wait runs out.
    pub fn wait_seconds(mut self, seconds: u64) -> Self {
        self.wait_seconds = Some(seconds.min(MAX_WAIT_SECONDS));
        self
    }

    /// How long mcp-connect may hold this request.
    pub fn wait(&self) -> std::time::Duration {
        std::time::Duration::from_secs(if self.elicitation_id.is_some() { self.wait_seconds.unwrap_or(0) } else { 0 })
    }

    /// The user's MCP access token the subject was taken from: mcp-connect checks it
    /// (signature, issuer, the tenant's audience, expiry) and that its `sub` is the
    /// subject. Tenants with `require_subject_token` refuse requests without it; tenants
    /// without a `subject_token_audience` refuse requests with it
    /// (`subject_token_not_accepted`).
    pub fn subject_token(mut self, token: crate::secret::SubjectToken) -> Self {
        self.subject_token = Some(token);
        self
    }

    /// Scopes beyond the provider's configured default.
    pub fn scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// On a retried tool call: the elicitation the first round handed out, so mcp-connect
    /// reconciles it (pending, completed, declined) instead of starting anew.
    pub fn elicitation_id(mut self, id: ElicitationId) -> Self {
        self.elicitation_id = Some(id);
        self
    }

    /// The MCP session the call belongs to, kept with the elicitation for the audit trail.
    pub fn mcp_session_id(mut self, id: impl Into<String>) -> Self {
        self.mcp_session_id = Some(id.into());
        self
    }

    /// The MCP server's name as its users know it (its `serverInfo` title or name): the
    /// elicitation's message says it needs the access, instead of the tenant's display
    /// name. mcp-connect refuses (`invalid_request`) a name that is empty after trimming,
    /// longer than 64 characters, or has control or invisible formatting characters.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    pub fn subject(&self) -> &str {
        &self.subject
    }

    pub fn provider(&self) -> &str {
        &self.provider
    }
}

/// The downstream account a connection belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Account {
    pub id: String,
    pub login: Option<String>,
}

/// The elicitation record mcp-connect made (or reused) for a `connect_required` answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Elicitation {
    pub id: ElicitationId,
    /// The connect page: an opaque handle, no secret, useless to anyone but the subject.
    pub url: String,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

/// The URL-mode elicitation, ready for the MCP server's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct McpUrlElicitation {
    /// Always `"url"`.
    pub mode: String,
    pub message: String,
    pub url: String,
    pub elicitation_id: ElicitationId,
}

impl McpUrlElicitation {
    /// `elicitation/create` params for 2026-07-28, which has no `elicitationId`: put them
    /// under a key of `inputRequests` in an `input_required` result.
    pub fn params_2026_07_28(&self) -> serde_json::Value {
        serde_json::json!({ "mode": "url", "message": self.message, "url": self.url })
    }

    /// One entry of `data.elicitations` of the 2025-11-25 `-32042` error (or the params of
    /// a 2025-11-25 `elicitation/create` request).
    pub fn params_2025_11_25(&self) -> serde_json::Value {
        serde_json::json!({
            "mode": "url",
            "message": self.message,
            "url": self.url,
            "elicitationId": self.elicitation_id,
        })
    }
}

/// What `POST /v1/token` answered.
#[derive(Debug, Clone)]
pub enum TokenOutcome {
    /// A usable connection exists; the token was refreshed first if it was about to expire.
    Connected {
        /// `None` where the tenant hands out nothing (`hand_out = "none"`): the grant is used
        /// through `/v1/proxy` only.
        token: Option<AccessToken>,
        /// `oauth2` (a bearer token), `api_key` or `basic` (typed on mcp-connect's page).
        credential_type: String,
        /// `api_key` and `basic`: every field typed, by name, each redacted like `token`.
        fields: Option<std::collections::BTreeMap<String, AccessToken>>,
        token_type: String,
        expires_at: Option<OffsetDateTime>,
        scopes: Vec<String>,
        account: Option<Account>,
        connection_id: String,
    },
    /// The user has to connect: send `mcp` as a URL-mode elicitation and keep
    /// `elicitation.id` for the retry. `provider_name` is the provider's display name
    /// (`None` from a service older than the field).
    ConnectRequired { elicitation: Elicitation, mcp: McpUrlElicitation, provider_name: Option<String> },
    /// The user declined the elicitation named in the request. A normal outcome: answer
    /// "not connected" (to `provider_name`, the display name) and do not prompt again on
    /// your own.
    Declined { elicitation_id: ElicitationId, provider_name: Option<String> },
}

/// The wire form of a `/v1/token` answer. No `Debug`: it holds the token as a plain string
/// until it is moved into an [`AccessToken`].
#[derive(Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum TokenWire {
    Connected {
        #[serde(default)]
        access_token: Option<String>,
        #[serde(default = "oauth2")]
        credential_type: String,
        #[serde(default)]
        fields: Option<std::collections::BTreeMap<String, String>>,
        token_type: String,
        #[serde(with = "time::serde::rfc3339::option")]
        expires_at: Option<OffsetDateTime>,
        scopes: Vec<String>,
        account: Option<Account>,
        connection_id: String,
    },
    ConnectRequired {
        elicitation: Elicitation,
        mcp: McpUrlElicitation,
        #[serde(default)]
        provider_name: Option<String>,
    },
    Declined {
        elicitation_id: ElicitationId,
        #[serde(default)]
        provider_name: Option<String>,
    },
}

fn oauth2() -> String {
    "oauth2".to_owned()
}

impl From<TokenWire> for TokenOutcome {
    fn from(w: TokenWire) -> Self {
        match w {
            TokenWire::Connected {
                access_token,
                credential_type,
                fields,
                token_type,
                expires_at,
                scopes,
                account,
                connection_id,
            } => TokenOutcome::Connected {
                token: access_token.map(AccessToken::new),
                credential_type,
                fields: fields.map(|f| f.into_iter().map(|(k, v)| (k, AccessToken::new(v))).collect()),
                token_type,
                expires_at,
                scopes,
                account,
                connection_id,
            },
            TokenWire::ConnectRequired { elicitation, mcp, provider_name } => {
                TokenOutcome::ConnectRequired { elicitation, mcp, provider_name }
            }
            TokenWire::Declined { elicitation_id, provider_name } => {
                TokenOutcome::Declined { elicitation_id, provider_name }
            }
        }
    }
}

/// What the MCP client answered to a URL elicitation when it did not accept it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// The user dismissed the request without choosing.
    Cancel,
    /// The user said no.
    Decline,
}

impl CancelReason {
    /// From an MCP `ElicitResult.action` (`accept` is not a cancel).
    pub fn from_action(action: &str) -> Option<Self> {
        match action {
            "cancel" => Some(Self::Cancel),
            "decline" => Some(Self::Decline),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Decline => "decline",
        }
    }
}

/// The state of an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ElicitationStatus {
    Pending,
    Completed,
    Declined,
    Expired,
    Cancelled,
    /// A status this client version does not know.
    #[serde(other)]
    Unknown,
}

/// `GET /v1/elicitations/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ElicitationInfo {
    pub id: ElicitationId,
    pub status: ElicitationStatus,
    pub subject: String,
    pub provider: String,
    pub scopes: Vec<String>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub completed_at: Option<OffsetDateTime>,
    /// For a `cancelled` elicitation the MCP client closed: `cancel` or `decline`.
    #[serde(default)]
    pub cancel_reason: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connected_answer_parses_into_a_redacted_token() {
        let w: TokenWire = serde_json::from_value(serde_json::json!({
            "status": "connected", "access_token": "tok-123", "token_type": "Bearer",
            "expires_at": "2030-01-01T00:00:00Z", "scopes": ["repo"],
            "account": {"id": "42", "login": "octo"}, "connection_id": "c1"
        }))
        .unwrap();
        let outcome = TokenOutcome::from(w);
        let TokenOutcome::Connected { token: Some(token), account, expires_at, .. } = &outcome else {
            panic!("{outcome:?}")
        };
        assert_eq!(token.expose_secret(), "tok-123");
        assert_eq!(account.as_ref().unwrap().login.as_deref(), Some("octo"));
        assert!(expires_at.is_some());
        assert!(!format!("{outcome:?}").contains("tok-123"));
    }

    #[test]
    fn connect_required_and_declined_parse() {
        let w: TokenWire = serde_json::from_value(serde_json::json!({
            "status": "connect_required",
            "elicitation": {"id": "e-1", "url": "https://c/connect/gh?e=e-1", "expires_at": "2030-01-01T00:00:00Z"},
            "mcp": {"mode": "url", "message": "Connect", "url": "https://c/connect/gh?e=e-1", "elicitationId": "e-1"}
        }))
        .unwrap();
        let TokenOutcome::ConnectRequired { mcp, .. } = TokenOutcome::from(w) else { panic!() };
        assert_eq!(
            mcp.params_2026_07_28(),
            serde_json::json!({"mode":"url","message":"Connect","url":"https://c/connect/gh?e=e-1"})
        );
        assert_eq!(mcp.params_2025_11_25()["elicitationId"], "e-1");
        let w: TokenWire =
            serde_json::from_value(serde_json::json!({"status": "declined", "elicitation_id": "e-1"})).unwrap();
        assert!(matches!(TokenOutcome::from(w), TokenOutcome::Declined { .. }));
    }

    #[test]
    fn elicitation_ids_are_short_visible_ascii() {
        assert!(ElicitationId::parse("").is_err());
        assert!(ElicitationId::parse("a b").is_err());
        assert!(ElicitationId::parse(&"a".repeat(129)).is_err());
        assert!(ElicitationId::parse("0b5c2a1e-7c1d-4b8e-9a55-2f0e1c9d8a77").is_ok());
    }

    #[test]
    fn an_unknown_status_is_not_an_error() {
        let s: ElicitationStatus = serde_json::from_value(serde_json::json!("archived")).unwrap();
        assert_eq!(s, ElicitationStatus::Unknown);
    }
}
