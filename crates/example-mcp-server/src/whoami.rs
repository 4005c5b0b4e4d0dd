//! The MCP server: one tool, `whoami_on(provider)`, that needs the user's token at a
//! downstream provider and calls the provider's user endpoint with it. The token comes
//! from mcp-connect; how the server asks for it depends on what the client speaks:
//!
//! - 2026-07-28 with `elicitation.url` in the request's capabilities: an `input_required`
//!   result with a URL-mode `elicitation/create` and a sealed `requestState`; the retry
//!   opens the state and asks mcp-connect about that elicitation.
//! - 2025-11-25 with `elicitation.url` declared at `initialize`: the `-32042` error.
//! - anything else: a normal result naming the setup link, never a form asking for a secret.
//!
//! Decline and cancel, in the client or on mcp-connect's page, end in a normal
//! "not connected" result: no error and no new prompt on the retry.

use crate::auth::{Subject, UserToken};
use crate::legacy::PendingElicitations;
use mcp_connect_client::{
    AccessToken, CancelReason, Client, RequestState, RequestStateError, RequestStateKey, TokenOutcome, TokenRequest,
    ToolCall, arguments_digest,
};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock, ErrorCode,
    InputRequiredResult, ListToolsResult, PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig,
    Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use time::{Duration, OffsetDateTime};

pub const TOOL: &str = "whoami_on";
/// The key of our request in `inputRequests` / `inputResponses`.
const INPUT_KEY: &str = "connect";
/// A `requestState` lives no longer than this (and never beyond its elicitation).
const STATE_TTL: Duration = Duration::minutes(10);
/// `URLElicitationRequiredError` (2025-11-25).
const URL_ELICITATION_REQUIRED: ErrorCode = ErrorCode(-32042);

/// How this request's client can be asked to open a URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UrlElicitation {
    /// 2026-07-28 (and later) with `elicitation.url` in this request's capabilities.
    InputRequired,
    /// 2025-11-25 with `elicitation.url` declared at `initialize`.
    Error32042,
    /// No URL mode: a setup link in a normal result.
    Unsupported,
}

/// The server's shared state. Cheap to clone (rmcp makes one handler per session).
#[derive(Clone)]
pub struct WhoamiServer {
    inner: Arc<Inner>,
}

struct Inner {
    connect: Client,
    state_key: RequestStateKey,
    /// Provider name (as configured in mcp-connect) → its user endpoint.
    providers: HashMap<String, String>,
    http: reqwest::Client,
    legacy: PendingElicitations,
}

/// One `tools/call` of `whoami_on`, with everything the decision needs.
struct Call<'a> {
    subject: &'a str,
    /// The access token the subject was taken from, for mcp-connect to check.
    user_token: Option<UserToken>,
    provider: &'a str,
    arguments: &'a Value,
    request_state: Option<&'a str>,
    /// The client's `action` for our input request on a 2026-07-28 retry.
    answer: Option<&'a str>,
    url_elicitation: UrlElicitation,
    session: Option<String>,
}

impl Call<'_> {
    fn tool_call(&self) -> ToolCall<'_> {
        ToolCall::new(self.subject, TOOL, self.arguments)
    }

    fn legacy_key(&self) -> crate::legacy::CallKey {
        let session = self.session.clone().unwrap_or_default();
        (session, self.subject.to_owned(), TOOL.to_owned(), arguments_digest(self.arguments))
    }
}

/// What the server can do about the downstream token.
enum Access {
    Token(AccessToken),
    Ask(InputRequiredResult),
    /// Declined or cancelled: a normal result, no new prompt.
    NotConnected,
    /// The client has no URL mode: name the link to open outside the workflow.
    SetupLink(String),
    /// mcp-connect could not answer (its error code, no secret).
    Failed(String),
}

impl WhoamiServer {
    /// `providers` maps each provider name to the URL of its user endpoint.
    pub fn new(
        connect: Client,
        state_key: RequestStateKey,
        providers: HashMap<String, String>,
    ) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(std::time::Duration::from_secs(10))
            .build()?;
        Ok(Self {
            inner: Arc::new(Inner { connect, state_key, providers, http, legacy: PendingElicitations::default() }),
        })
    }

    // --- The mcp-connect wiring (quoted in the README) ---------------------------------
    /// The user's token for the provider, or what to answer instead.
    async fn downstream_token(&self, call: &Call<'_>) -> Result<Access, ErrorData> {
        let (s, now) = (&self.inner, OffsetDateTime::now_utc());
        // A retry names the elicitation of round one: in the sealed requestState
        // (2026-07-28), or remembered for this session (2025-11-25, which has no state).
        let resumed = match call.request_state {
            Some(sealed) => match RequestState::open(sealed, &s.state_key, &call.tool_call(), now) {
                Ok(state) => Some(state.elicitation_id),
                Err(RequestStateError::Expired) => None, // too old: start over
                Err(e) => return Err(ErrorData::invalid_params(e.to_string(), None)),
            },
            None => s.legacy.take(&call.legacy_key(), now),
        };
        // `decline` or `cancel` in the client is an answer, not an error: no new prompt,
        // and the link it answered is closed at mcp-connect (opened later, it connects nothing).
        if let Some(reason) = call.answer.and_then(CancelReason::from_action) {
            if let Some(id) = &resumed
                && let Err(e) = s.connect.cancel_elicitation(id, reason).await
            {
                tracing::warn!(code = e.code(), "could not close the link at mcp-connect");
            }
            return Ok(Access::NotConnected);
        }
        if call.answer.is_some_and(|a| a != "accept") {
            return Ok(Access::NotConnected);
        }
        let mut req = TokenRequest::new(call.subject, call.provider);
        if let Some(UserToken(t)) = &call.user_token {
            req = req.subject_token(t.clone());
        }
        if let Some(id) = resumed {
            req = req.elicitation_id(id);
        }
        // `accept` only means the user opened the link; mcp-connect knows the outcome.
        Ok(match s.connect.token(&req).await {
            Err(e) => Access::Failed(e.code().unwrap_or("unavailable").to_owned()),
            Ok(TokenOutcome::Connected { token: Some(token), .. }) => Access::Token(token),
            // This example calls the provider itself; a tenant that hands out nothing
            // wants its calls made through /v1/proxy.
            Ok(TokenOutcome::Connected { token: None, .. }) => Access::Failed("hand_out_none".to_owned()),
            Ok(TokenOutcome::Declined { .. }) => Access::NotConnected,
            Ok(TokenOutcome::ConnectRequired { elicitation, mcp, .. }) => match call.url_elicitation {
                UrlElicitation::InputRequired => {
                    let expires_at = elicitation.expires_at.min(now + STATE_TTL);
                    let state = RequestState::new(elicitation.id, expires_at).seal(&s.state_key, &call.tool_call());
                    Access::Ask(input_required(mcp.params_2026_07_28(), state)?)
                }
                UrlElicitation::Error32042 => {
                    s.legacy.remember(call.legacy_key(), elicitation.id, elicitation.expires_at, now);
                    let data = json!({ "elicitations": [mcp.params_2025_11_25()] });
                    return Err(ErrorData::new(URL_ELICITATION_REQUIRED, mcp.message, Some(data)));
                }
                UrlElicitation::Unsupported => Access::SetupLink(elicitation.url),
            },
        })
    }
    // --- end of the wiring ---------------------------------------------------------------

    /// Calls the provider's user endpoint with the token. The token goes nowhere else.
    async fn whoami(&self, provider: &str, user_endpoint: &str, token: &AccessToken) -> CallToolResult {
        let r = self.inner.http.get(user_endpoint).bearer_auth(token.expose_secret()).send().await;
        let me: Value = match r {
            Ok(r) if r.status().is_success() => match r.json().await {
                Ok(v) => v,
                Err(_) => return tool_error(format!("{provider} answered something that is not JSON.")),
            },
            Ok(r) => return tool_error(format!("{provider} refused the request ({}).", r.status())),
            Err(_) => return tool_error(format!("{provider} could not be reached.")),
        };
        let login = me.get("login").or_else(|| me.get("preferred_username")).cloned().unwrap_or(Value::Null);
        let id = me.get("id").or_else(|| me.get("sub")).cloned().unwrap_or(Value::Null);
        let mut result = CallToolResult::success(vec![ContentBlock::text(format!(
            "On {provider} you are {} (account id {}).",
            login.as_str().unwrap_or("?"),
            id
        ))]);
        result.structured_content = Some(json!({ "connected": true, "provider": provider, "login": login, "id": id }));
        result
    }
}

fn input_required(params: Value, state: String) -> Result<InputRequiredResult, ErrorData> {
    serde_json::from_value(json!({
        "resultType": "input_required",
        "inputRequests": { INPUT_KEY: { "method": "elicitation/create", "params": params } },
        "requestState": state,
    }))
    .map_err(|e| ErrorData::internal_error(format!("building input_required: {e}"), None))
}

fn tool_error(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn not_connected(provider: &str, text: String, setup_url: Option<&str>) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(json!({ "connected": false, "provider": provider, "setup_url": setup_url }));
    result
}

/// How the client of this request can be asked to open a URL.
fn url_elicitation_of(cx: &RequestContext<RoleServer>) -> UrlElicitation {
    let version = cx.protocol_version().unwrap_or(ProtocolVersion::V_2025_03_26);
    url_elicitation(version.as_str(), cx.client_capabilities().as_ref())
}

/// The decision, from the negotiated version and the capabilities that apply to this
/// request (2026-07-28: the request's `_meta`; before: those declared at `initialize`).
/// An `elicitation` without `url` (form only) is not URL support.
fn url_elicitation(version: &str, capabilities: Option<&ClientCapabilities>) -> UrlElicitation {
    let url_capable = capabilities.and_then(|c| c.elicitation.as_ref()).is_some_and(|e| e.url.is_some());
    match version {
        _ if !url_capable => UrlElicitation::Unsupported,
        v if v >= ProtocolVersion::V_2026_07_28.as_str() => UrlElicitation::InputRequired,
        v if v == ProtocolVersion::V_2025_11_25.as_str() => UrlElicitation::Error32042,
        _ => UrlElicitation::Unsupported,
    }
}

/// The subject of the validated access token of the HTTP request that carried this call.
fn subject_of(cx: &RequestContext<RoleServer>) -> Result<String, ErrorData> {
    cx.extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.extensions.get::<Subject>())
        .map(|s| s.0.clone())
        .ok_or_else(|| ErrorData::internal_error("no authenticated subject on the request", None))
}

fn user_token_of(cx: &RequestContext<RoleServer>) -> Option<UserToken> {
    cx.extensions.get::<http::request::Parts>()?.extensions.get::<UserToken>().cloned()
}

fn session_of(cx: &RequestContext<RoleServer>) -> Option<String> {
    let parts = cx.extensions.get::<http::request::Parts>()?;
    parts.headers.get("mcp-session-id")?.to_str().ok().map(str::to_owned)
}

fn tool_definition() -> Tool {
    let schema = json!({
        "type": "object",
        "properties": {
            "provider": { "type": "string", "description": "The provider to ask, as configured in mcp-connect (e.g. \"github\")." }
        },
        "required": ["provider"],
        "additionalProperties": false
    });
    let schema = match schema {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    Tool::new(
        TOOL,
        "Tells who you are at a provider, with your own account there. Asks you to connect the account first if needed.",
        Arc::new(schema),
    )
}

impl ServerHandler for WhoamiServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_instructions("whoami_on(provider) shows your account at a connected provider.")
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == TOOL).then(tool_definition)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![tool_definition()]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name != TOOL {
            return Err(ErrorData::invalid_params(format!("unknown tool {}", request.name), None));
        }
        let subject = subject_of(&cx)?;
        let arguments = Value::Object(request.arguments.clone().unwrap_or_default());
        let Some(provider) = arguments.get("provider").and_then(Value::as_str) else {
            return Err(ErrorData::invalid_params("provider is required", None));
        };
        let Some(user_endpoint) = self.inner.providers.get(provider).cloned() else {
            return Ok(tool_error(format!("This server does not know the provider {provider:?}.")).into());
        };
        let answer = request
            .input_responses
            .as_ref()
            .and_then(|r| r.get(INPUT_KEY))
            .and_then(|v| v.get("action"))
            .and_then(Value::as_str);
        let call = Call {
            subject: &subject,
            user_token: user_token_of(&cx),
            provider,
            arguments: &arguments,
            request_state: request.request_state.as_deref(),
            answer,
            url_elicitation: url_elicitation_of(&cx),
            session: session_of(&cx),
        };
        Ok(match self.downstream_token(&call).await? {
            Access::Token(token) => self.whoami(provider, &user_endpoint, &token).await.into(),
            Access::Ask(input) => input.into(),
            Access::NotConnected => {
                not_connected(provider, format!("Not connected to {provider}: nothing was shared."), None).into()
            }
            Access::SetupLink(url) => not_connected(
                provider,
                format!(
                    "Not connected to {provider}. This client cannot open a connect page by itself: \
                     open {url} in your browser to connect the account, then ask again."
                ),
                Some(&url),
            )
            .into(),
            Access::Failed(code) => {
                tool_error(format!("The connection service could not answer ({code}); try again later.")).into()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(v: Value) -> ClientCapabilities {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn url_mode_needs_the_url_capability_and_a_revision_that_has_it() {
        let both = caps(json!({"elicitation": {"form": {}, "url": {}}}));
        assert_eq!(url_elicitation("2026-07-28", Some(&both)), UrlElicitation::InputRequired);
        assert_eq!(url_elicitation("2025-11-25", Some(&both)), UrlElicitation::Error32042);
        // 2025-06-18 had no URL mode, whatever a client claims.
        assert_eq!(url_elicitation("2025-06-18", Some(&both)), UrlElicitation::Unsupported);
    }

    #[test]
    fn form_only_or_no_elicitation_gets_the_setup_link() {
        for c in [json!({"elicitation": {}}), json!({"elicitation": {"form": {}}}), json!({})] {
            assert_eq!(url_elicitation("2026-07-28", Some(&caps(c.clone()))), UrlElicitation::Unsupported, "{c}");
            assert_eq!(url_elicitation("2025-11-25", Some(&caps(c.clone()))), UrlElicitation::Unsupported, "{c}");
        }
        assert_eq!(url_elicitation("2026-07-28", None), UrlElicitation::Unsupported);
    }

    #[test]
    fn the_input_required_result_has_the_2026_shape() {
        let r =
            input_required(json!({"mode": "url", "message": "m", "url": "https://c/connect/p?e=1"}), "mcs1.x".into())
                .unwrap();
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["resultType"], "input_required");
        assert_eq!(v["requestState"], "mcs1.x");
        assert_eq!(v["inputRequests"]["connect"]["method"], "elicitation/create");
        assert_eq!(v["inputRequests"]["connect"]["params"]["url"], "https://c/connect/p?e=1");
    }
}
