//! `POST /v1/token`.

use super::ServerCaller;
use crate::app::AppState;
use crate::domain::{Account, ConnectionId, HandOutMode};
use crate::domain::{ElicitationId, ProviderId, Scopes, Subject};
use crate::flows::token::{self as tokens, TokenOutcome, TokenRequest};
use crate::http::error::{ApiError, ErrorBody, ErrorCode};
use crate::store::elicitations::ElicitationRow;
use crate::telemetry::metrics::TOKEN_REQUESTS;
use actix_web::http::header::HeaderValue;
use actix_web::{HttpResponse, web};
use secrecy::{ExposeSecret, SecretString};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// A token for `subject` at `provider`; with `elicitation_id`, the retry after a connect.
#[derive(Debug, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"subject": "alice", "provider": "github", "scopes": ["read:user"]}))]
pub struct TokenBody {
    /// The MCP user (their `sub` at the primary IdP). Needed unless `subject_token` is
    /// sent; with it, it must be the token's `sub`.
    #[schema(schema_with = crate::http::schema::opt_subject)]
    subject: Option<String>,
    /// The user's MCP access token, proving the subject (tenants with a
    /// `subject_token_audience`; required where the tenant sets `require_subject_token`).
    #[schema(schema_with = crate::http::schema::opt_subject_token)]
    subject_token: Option<SubjectToken>,
    #[schema(schema_with = crate::http::schema::provider)]
    provider: String,
    #[schema(schema_with = crate::http::schema::opt_scopes)]
    scopes: Option<Vec<String>>,
    /// The id from an earlier `connect_required`: the retried tool call.
    #[schema(schema_with = crate::http::schema::opt_elicitation_id)]
    elicitation_id: Option<String>,
    /// The MCP session the request belongs to, kept with the elicitation for the audit.
    #[schema(schema_with = crate::http::schema::opt_session_id)]
    mcp_session_id: Option<String>,
    /// With `elicitation_id`: when that elicitation is still pending, hold the answer up to
    /// this many seconds (at most 30) until the connect commits (or is declined or
    /// cancelled), then answer: the token at once, or the same `connect_required` when the
    /// wait runs out. 0 or absent: answer at once.
    #[schema(schema_with = crate::http::schema::opt_wait_seconds)]
    wait_seconds: Option<u64>,
    /// The MCP server's name, said in the elicitation's message.
    #[schema(schema_with = crate::http::schema::opt_server_name)]
    server_name: Option<String>,
}

/// A bearer token in a request body: never shown by `Debug`.
#[derive(serde::Deserialize)]
#[serde(transparent)]
struct SubjectToken(String);

impl std::fmt::Debug for SubjectToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubjectToken(..)")
    }
}

/// A request as parsed, before its subject is proven (`flows::subject`).
struct Parsed {
    named: Option<Subject>,
    token: Option<SecretString>,
    wait: std::time::Duration,
    request: WithoutSubject,
    server_name: Option<String>,
}

/// What a request asks for, but whose.
struct WithoutSubject {
    provider: ProviderId,
    scopes: Option<Scopes>,
    elicitation_id: Option<ElicitationId>,
    mcp_context: serde_json::Value,
}

impl WithoutSubject {
    fn with(self, subject: Subject) -> TokenRequest {
        let WithoutSubject { provider, scopes, elicitation_id, mcp_context } = self;
        TokenRequest { subject, provider, scopes, elicitation_id, mcp_context }
    }
}

fn parse(body: TokenBody) -> Result<Parsed, ApiError> {
    let wait = wait_of(body.wait_seconds)?;
    if !wait.is_zero() && body.elicitation_id.is_none() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "wait_seconds needs an elicitation_id: a first call has nothing to wait for",
        ));
    }
    let named = body
        .subject
        .as_deref()
        .map(Subject::parse)
        .transpose()
        .map_err(|e| ApiError::new(ErrorCode::InvalidSubject, e.0))?;
    let token = match body.subject_token {
        None => None,
        Some(SubjectToken(t)) if !t.is_empty() && t.len() <= crate::http::schema::SUBJECT_TOKEN_MAX => {
            Some(SecretString::from(t))
        }
        Some(_) => {
            return Err(ApiError::new(ErrorCode::InvalidRequest, "subject_token must be 1-8192 characters"));
        }
    };
    let server_name = match body.server_name {
        None => None,
        Some(s) if crate::domain::shown::is_display_name(&s, SERVER_NAME_MAX) => Some(s.trim().to_owned()),
        Some(_) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "server_name must be 1-64 printable characters, without control or invisible formatting ones",
            ));
        }
    };
    let TokenBody { provider, scopes, elicitation_id, mcp_session_id, .. } = body;
    let request = request(provider, scopes, elicitation_id, mcp_session_id)?;
    Ok(Parsed { named, token, wait, request, server_name })
}

/// The longest `server_name`, in characters: a name, not a sentence.
const SERVER_NAME_MAX: usize = 64;

/// `wait_seconds` as a duration: 0 to 30.
pub fn wait_of(seconds: Option<u64>) -> Result<std::time::Duration, ApiError> {
    match seconds.unwrap_or(0) {
        s if s <= crate::flows::wait::MAX_WAIT_SECONDS => Ok(std::time::Duration::from_secs(s)),
        _ => Err(ApiError::new(ErrorCode::InvalidRequest, "wait_seconds is at most 30")),
    }
}

fn request(
    provider: String,
    scopes: Option<Vec<String>>,
    elicitation_id: Option<String>,
    mcp_session_id: Option<String>,
) -> Result<WithoutSubject, ApiError> {
    let provider = ProviderId::parse(&provider).map_err(|e| ApiError::new(ErrorCode::UnknownProvider, e.0))?;
    let scopes =
        scopes.map(|s| Scopes::parse(&s)).transpose().map_err(|e| ApiError::new(ErrorCode::InvalidScope, e.0))?;
    let elicitation_id = elicitation_id
        .map(|s| ElicitationId::parse(&s))
        .transpose()
        .map_err(|e| ApiError::new(ErrorCode::InvalidElicitationId, e.0))?;
    let mcp_context = match mcp_session_id {
        None => serde_json::json!({}),
        Some(s) if !s.is_empty() && s.chars().count() <= 256 && !s.chars().any(char::is_control) => {
            serde_json::json!({ "mcp_session_id": s })
        }
        Some(_) => {
            return Err(ApiError::new(ErrorCode::InvalidRequest, "mcp_session_id must be 1-256 printable characters"));
        }
    };
    Ok(WithoutSubject { provider, scopes, elicitation_id, mcp_context })
}

/// A stored token (refreshed first when it is about to expire), or a connect URL for a
/// URL-mode elicitation, or the person's decline. Never a second grant: a retry with the
/// `elicitation_id` gets the token the connect stored.
#[utoipa::path(
    post,
    path = "/v1/token",
    operation_id = "postToken",
    tag = "v1",
    request_body = TokenBody,
    responses(
        (status = 200, description = "`connected` with the token, `connect_required` with the link, or `declined`.", body = TokenAnswer,
            links(
                ("GetElicitation" = (operation_id = "getElicitation", parameters(("id" = "$response.body#/elicitation/id")))),
                ("CancelElicitation" = (operation_id = "cancelElicitation", parameters(("id" = "$response.body#/elicitation/id")))),
            )),
        (status = 400, description = "`invalid_json`, `invalid_subject` (also: neither `subject` nor `subject_token`), \
            `unknown_provider`, `invalid_scope`, `invalid_elicitation_id`, `elicitation_mismatch`, \
            `subject_token_not_accepted` (this tenant has no `subject_token_audience`) or `invalid_request` (also: \
            `wait_seconds` over 30 or without `elicitation_id`).", body = ErrorBody),
        (status = 403, description = "`provider_not_allowed` (this tenant may not use the provider), `provider_disabled` \
            (an operator's kill switch), `insufficient_scope` (an admin key), `subject_token_required` (this tenant \
            requires the user's token), or the `subject_token` refused: `subject_token_invalid`, \
            `subject_token_issuer`, `subject_token_audience`, `subject_token_expired`, `subject_token_not_yet_valid`, \
            `subject_token_subject` (another `sub` than the `subject` named).", body = ErrorBody,
            headers(("WWW-Authenticate" = String, description = "Only with `insufficient_scope`."))),
        (status = 404, description = "`elicitation_not_found`: no elicitation of that id in this tenant.", body = ErrorBody),
        (status = 502, description = "`provider_misconfigured`: the provider's configuration, or what its server says \
            of itself, is refused for a reason a retry cannot fix; no link is made (the operator must act; the service \
            log says what). No `Retry-After`.", body = ErrorBody),
        (status = 503, description = "`provider_unavailable`: the provider could not refresh the token, or its server \
            be reached, just now (a connection is kept), or `temporarily_unavailable` (also: the IdP's keys for a `subject_token` could not \
            be fetched). Retry after `Retry-After` seconds.", body = ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before retrying."))),
    ),
    security(("server_key" = [])),
)]
pub async fn post_token(
    caller: ServerCaller,
    state: web::Data<AppState>,
    body: web::Json<TokenBody>,
) -> Result<HttpResponse, ApiError> {
    let body = body.into_inner();
    // A configured provider's name, or `other`: labels never carry what a caller made up.
    let provider = crate::telemetry::metrics::on().then(|| match ProviderId::parse(&body.provider) {
        Ok(p) if state.directory.providers.get(&p).is_some() => p.as_str().to_owned(),
        _ => "other".to_owned(),
    });
    let answer = answer(caller, &state, body).await;
    if let Some(provider) = provider {
        let outcome = match &answer {
            Ok((_, outcome)) => *outcome,
            Err(e) => e.code.as_str(),
        };
        metrics::counter!(TOKEN_REQUESTS, "provider" => provider, "outcome" => outcome).increment(1);
    }
    answer.map(|(response, _)| response)
}

/// The response, and the outcome it reports.
async fn answer(
    caller: ServerCaller,
    state: &AppState,
    body: TokenBody,
) -> Result<(HttpResponse, &'static str), ApiError> {
    let Parsed { named, token, wait, request, server_name } = parse(body)?;
    // Moved out: the caller's id and proof are read below, its tenant no more.
    let tenant = caller.0.tenant;
    let subject =
        crate::flows::subject::proven_subject(state, &tenant, named, token.as_ref(), OffsetDateTime::now_utc()).await?;
    let req = request.with(subject);
    let provider = req.provider.clone();
    let outcome = tokens::token_waiting(state, &tenant, &caller.0.id, &caller.0.proof, req, wait).await?;
    // A tenant that hands out nothing learns that the connection is usable, not its token.
    // Not known (the tenant switched off meanwhile): nothing is handed out.
    let handed_out = state.directory.tenants.hand_out(&tenant, &provider) == Some(HandOutMode::Credentials);
    Ok(match outcome {
        TokenOutcome::Connected { access_token, credential, shape, expires_at, account, connection_id, holder: _ } => (
            json_answer(&TokenAnswer::Connected(Connected {
                access_token: handed_out.then(|| access_token.expose_secret()),
                credential_type: credential.as_ref().map_or("oauth2", |(kind, _)| kind),
                fields: credential.as_ref().filter(|_| handed_out).map(|(_, c)| &c.fields),
                hand_out: if handed_out { HandOutMode::Credentials } else { HandOutMode::None },
                token_type: &shape.token_type,
                expires_at: expires_at.map(rfc3339),
                scopes: shape.scopes.as_slice(),
                account: account.as_ref(),
                connection_id,
            }))?,
            "connected",
        ),
        TokenOutcome::ConnectRequired(e) => {
            let asking = server_name.map_or_else(|| state.directory.tenants.display_name(&tenant), Some);
            let answer = connect_required(state, asking.as_deref().unwrap_or(tenant.as_str()), &provider, &e);
            (HttpResponse::Ok().json(TokenAnswer::<'static>::ConnectRequired(answer)), "connect_required")
        }
        TokenOutcome::Declined(id) => {
            let declined = Declined { elicitation_id: id.to_string(), provider_name: provider_name(state, &provider) };
            (HttpResponse::Ok().json(TokenAnswer::Declined(declined)), "declined")
        }
    })
}

/// A `200` with `answer` as its JSON, written into a buffer of a cached hand-out's size at
/// once (actix-web's `json` grows one from 128 bytes: two more allocations and moves).
fn json_answer(answer: &TokenAnswer<'_>) -> Result<HttpResponse, ApiError> {
    let mut body = Vec::with_capacity(512);
    serde_json::to_writer(&mut body, answer).map_err(|e| ApiError::internal(&e))?;
    // A constant value: `ContentType::json()` is a `Mime`, made into a header value by
    // copying its text on every answer.
    const JSON: HeaderValue = HeaderValue::from_static("application/json");
    Ok(HttpResponse::Ok().insert_header((actix_web::http::header::CONTENT_TYPE, JSON)).body(body))
}

pub fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_default()
}

/// The answer of `POST /v1/token`, told apart by `status`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum TokenAnswer<'a> {
    Connected(Connected<'a>),
    ConnectRequired(ConnectRequired),
    Declined(Declined),
}

/// A usable token.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Connected<'a> {
    /// The provider's access token: hand it to the tool, never to the model or a log.
    /// For `api_key` and `basic`: the key, or the password. Absent where the tenant hands
    /// out nothing (`hand_out` `none`): use `/v1/proxy`.
    #[schema(example = "<the provider's access token>")]
    #[serde(skip_serializing_if = "Option::is_none")]
    access_token: Option<&'a str>,
    /// `credentials`, or `none`: this tenant's grants are used only through `/v1/proxy`.
    hand_out: HandOutMode,
    /// How the MCP server uses it: `oauth2` (a bearer token), `api_key` (as the provider
    /// documents its key), `basic` (HTTP Basic with `fields.username` and `access_token`).
    #[schema(example = "oauth2")]
    credential_type: &'a str,
    /// `api_key` and `basic` only: every field typed on the connect page, by the name the
    /// provider's configuration gives it (secret ones too: hand them to the tool only).
    #[serde(skip_serializing_if = "Option::is_none")]
    fields: Option<&'a std::collections::BTreeMap<String, String>>,
    /// `Bearer` (or what the provider said) for `oauth2`; the `credential_type` otherwise.
    #[schema(example = "bearer")]
    token_type: &'a str,
    /// When the token expires (RFC 3339); null when the provider did not say.
    #[schema(value_type = Option<String>, format = DateTime)]
    expires_at: Option<String>,
    scopes: &'a [String],
    account: Option<&'a Account>,
    // Serialized as the id's hyphenated text straight into the answer (no string made).
    #[schema(value_type = String, format = Uuid)]
    connection_id: ConnectionId,
}

/// The person has to connect: show `mcp` as a URL-mode elicitation, then retry with
/// `elicitation_id`.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ConnectRequired {
    elicitation: ElicitationLink,
    mcp: McpElicitation,
    /// The provider's display name, for the MCP server's own texts ("not connected to …").
    #[schema(example = "GitHub")]
    provider_name: String,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ElicitationLink {
    #[schema(format = Uuid)]
    id: String,
    /// The connect page; it holds the elicitation id and nothing secret.
    url: String,
    #[schema(format = DateTime)]
    expires_at: String,
}

/// The `params` of MCP's URL-mode `elicitation/create`, ready to send.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpElicitation {
    #[schema(example = "url")]
    mode: &'static str,
    message: String,
    url: String,
    #[schema(format = Uuid)]
    elicitation_id: String,
}

/// The person declined on our page or at the provider.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Declined {
    #[schema(format = Uuid)]
    elicitation_id: String,
    /// The provider's display name, for the MCP server's "not connected" text.
    #[schema(example = "GitHub")]
    provider_name: String,
}

/// The `connect_required` answer, with `mcp` ready for the MCP server's URL elicitation;
/// `asking` is who the message says needs the access (the MCP server, or the tenant).
pub(super) fn connect_required(
    state: &AppState,
    asking: &str,
    provider: &ProviderId,
    e: &ElicitationRow,
) -> ConnectRequired {
    let id = e.id;
    let url = state.urls.connect_url(provider, &id);
    let provider_name = provider_name(state, provider);
    let message = format!(
        "{asking} needs access to your {provider_name} account. Open the link to sign in and approve the connection; \
         nothing is shared until you do."
    );
    ConnectRequired {
        elicitation: ElicitationLink { id: id.to_string(), url: url.clone(), expires_at: rfc3339(e.expires_at) },
        mcp: McpElicitation { mode: "url", message, url, elicitation_id: id.to_string() },
        provider_name,
    }
}

/// The provider's display name (its id when it is no longer configured).
pub fn provider_name(state: &AppState, provider: &ProviderId) -> String {
    state.directory.providers.get(provider).map_or_else(|| provider.as_str().to_owned(), |p| p.display_name.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::api::{assert_small, future_size};

    #[test]
    fn a_cached_hand_out_moves_a_small_future_because_its_cold_paths_are_boxed() {
        // The handler's future, which actix-web boxes per request beside the extractors'
        // (so this is the least that box takes); with it the answer's and the hand-out's,
        // which it awaits inline.
        type Args = (ServerCaller, web::Data<AppState>, web::Json<TokenBody>);
        let handler = future_size(|(c, s, b): Args| post_token(c, s, b));
        let answer = future_size(|(c, s, b): (ServerCaller, &'static AppState, TokenBody)| super::answer(c, s, b));
        type Hand = (&'static AppState, &'static crate::domain::TenantId, &'static crate::domain::ApiKeyId);
        let token_for = future_size(|((s, t, k), r): (Hand, TokenRequest)| {
            tokens::token_for(s, t, k, r, OffsetDateTime::UNIX_EPOCH)
        });
        assert_small("post_token", handler, 4024);
        assert_small("answer", answer, 3552);
        assert_small("token_for", token_for, 2072);
    }
}
