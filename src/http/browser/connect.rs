//! `/connect/{provider}`: the page a URL-mode elicitation points to, the Connect/Decline
//! form, and the provider's callback.

use super::login::forbidden_csrf;
use super::pages::{ConsentPage, HINT_RETRY, PageError, RefusedPage, ResultPage, render};
use super::session::{MaybeSession, request_id};
use crate::app::AppState;
use crate::domain::{ElicitationId, ElicitationStatus, ProviderId};
use crate::flows::callback::{self, CallbackOutcome, CallbackRefusal};
use crate::flows::connect::{self, ConnectError, EntryRefusal};
use crate::http::middleware::RequestId;
use crate::oauth::callback::CallbackQuery;
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse, web};
use time::OffsetDateTime;

#[derive(serde::Deserialize)]
pub struct ShowQuery {
    e: Option<String>,
}

fn unknown_link(rid: &RequestId) -> PageError {
    PageError::new(
        rid,
        StatusCode::NOT_FOUND,
        "This link is not valid",
        "There is no connect request behind this link.",
        HINT_RETRY,
    )
}

fn entry_error(rid: &RequestId, r: EntryRefusal) -> PageError {
    match r {
        EntryRefusal::NotFound | EntryRefusal::ProviderMismatch => unknown_link(rid),
        EntryRefusal::Expired => PageError::new(
            rid,
            StatusCode::GONE,
            "This link has expired",
            "Connect links are valid for a few minutes only.",
            HINT_RETRY,
        ),
        EntryRefusal::Finished(ElicitationStatus::Completed) => PageError {
            outcome: None,
            ..PageError::new(
                rid,
                StatusCode::GONE,
                "This link was already used",
                "The connection it asked for has been made.",
                "Go back to your assistant; it can use the connection now.",
            )
        },
        EntryRefusal::ClosedInAssistant => PageError::new(
            rid,
            StatusCode::GONE,
            "You closed this request in your assistant",
            "You answered the request in your assistant without connecting, so this link no longer works.",
            "If you want to connect after all, ask your assistant again; it will give you a new link.",
        ),
        EntryRefusal::Finished(_) => PageError::new(
            rid,
            StatusCode::GONE,
            "This link is no longer active",
            "The request was declined or cancelled.",
            HINT_RETRY,
        ),
    }
}

fn parse_provider(rid: &RequestId, raw: &str) -> Result<ProviderId, PageError> {
    ProviderId::parse(raw).map_err(|_| unknown_link(rid))
}

/// `GET /connect/{provider}?e=<id>`.
pub async fn show(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    q: web::Query<ShowQuery>,
    session: MaybeSession,
) -> Result<HttpResponse, PageError> {
    let rid = request_id(&req);
    let provider = parse_provider(&rid, &path)?;
    let id = q.e.as_deref().and_then(|e| ElicitationId::parse(e).ok()).ok_or_else(|| unknown_link(&rid))?;
    let now = OffsetDateTime::now_utc();
    let e = crate::store::elicitations::find_by_id(&state.pool, id.as_uuid())
        .await
        .map_err(|e| PageError::internal(&rid.0, &e))?;
    connect::check_entry(e.as_ref(), &provider, now).map_err(|r| entry_error(&rid, r))?;

    let Some(session) = session.0 else {
        // An absolute URL on our origin (invariant 14), built from parsed values only.
        let mut login = state.public_base_url.clone();
        login.set_path("/login");
        login.query_pairs_mut().clear().append_pair("return_to", &format!("/connect/{provider}?e={id}"));
        return Ok(HttpResponse::SeeOther().insert_header(("location", login.as_str())).finish());
    };
    match connect::consent_view(&state, id, &provider, &session.info, now).await {
        Ok(v) => {
            let page = ConsentPage {
                tenant_name: &v.tenant_name,
                provider_name: &v.provider.display_name,
                provider_domain: &v.domain,
                provider_id: provider.as_str(),
                scopes: &v.elicitation.scopes,
                signed_in_as: session.info.subject.as_str(),
                csrf: session.csrf(),
                elicitation_id: &id.to_string(),
            };
            render(StatusCode::OK, &page, Some(&v.authorize_origin))
        }
        Err(e) => Err(refusal(&state, &rid, &session, (&provider, &id), e).await),
    }
}

/// [`connect_error`], and for the identity refusal the IdP's end-session origin in the
/// page's CSP `form-action`: its Sign out goes on there (a browser enforces `form-action`
/// on the redirects that follow a form post too).
async fn refusal(
    state: &AppState,
    rid: &RequestId,
    session: &super::BrowserSession,
    link: (&ProviderId, &ElicitationId),
    e: ConnectError,
) -> PageError {
    let mismatch = matches!(e, ConnectError::IdentityMismatch);
    let mut page = connect_error(rid, session, link, e);
    if mismatch && let Some(own) = page.page.as_mut() {
        own.form_action = crate::flows::login::idp_logout_url(state).await.map(|u| u.origin().ascii_serialization());
    }
    page
}

/// Maps a refusal to its page; the identity mismatch gets its own page, whose Sign out
/// leads back to this link (`link`: provider and elicitation) with a fresh account choice.
fn connect_error(
    rid: &RequestId,
    session: &super::BrowserSession,
    link: (&ProviderId, &ElicitationId),
    e: ConnectError,
) -> PageError {
    match e {
        ConnectError::Entry(r) => entry_error(rid, r),
        ConnectError::IdentityMismatch => {
            let return_to = format!("/connect/{}?e={}", link.0, link.1);
            let page = RefusedPage {
                signed_in_as: session.info.subject.as_str(),
                csrf: session.csrf(),
                request_id: &rid.0,
                return_to: &return_to,
            };
            PageError::with_page(rid, StatusCode::FORBIDDEN, "This link was made for another account", &page)
        }
        ConnectError::ProviderNotAllowed => unknown_link(rid),
        ConnectError::ProviderDisabled => PageError::new(
            rid,
            StatusCode::SERVICE_UNAVAILABLE,
            "Connecting this provider is paused",
            "The operator of this service has paused new connections to this provider.",
            "Try again later, or ask your administrator.",
        ),
        ConnectError::Resolve(msg) => {
            tracing::error!(error = %msg, "provider resolution failed");
            PageError::new(
                rid,
                StatusCode::SERVICE_UNAVAILABLE,
                "The provider is unavailable",
                "Its sign-in could not be reached.",
                "Try again in a minute.",
            )
        }
        ConnectError::Database(e) => PageError::internal(&rid.0, &e),
        ConnectError::Vault(e) => PageError::internal(&rid.0, &e),
        ConnectError::Encoding(e) => PageError::internal(&rid.0, &e),
    }
}

#[derive(serde::Deserialize)]
pub struct AuthorizeForm {
    csrf: Option<String>,
    e: Option<String>,
    decision: Option<String>,
}

/// `POST /connect/{provider}/authorize`: Connect (303 to the provider) or Decline.
pub async fn authorize(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    session: MaybeSession,
    form: web::Form<AuthorizeForm>,
) -> Result<HttpResponse, PageError> {
    let rid = request_id(&req);
    let provider = parse_provider(&rid, &path)?;
    let Some(session) = session.0 else {
        return Err(super::login::session_expired(&rid, "Open the link from your assistant again."));
    };
    if !session.csrf_matches(form.csrf.as_deref()) {
        return Err(forbidden_csrf(&rid, "Open the link from your assistant again."));
    }
    let id = form.e.as_deref().and_then(|e| ElicitationId::parse(e).ok()).ok_or_else(|| unknown_link(&rid))?;
    let now = OffsetDateTime::now_utc();
    match form.decision.as_deref() {
        Some("connect") => match connect::start_authorization(&state, id, &provider, &session.info, now).await {
            Ok(url) => Ok(HttpResponse::SeeOther().insert_header(("location", url.as_str())).finish()),
            Err(e) => Err(refusal(&state, &rid, &session, (&provider, &id), e).await),
        },
        Some("decline") => match connect::decline(&state, id, &provider, &session.info, now).await {
            Ok(tenant_name) => declined_page(&tenant_name),
            Err(e) => Err(refusal(&state, &rid, &session, (&provider, &id), e).await),
        },
        _ => Err(PageError::new(
            &rid,
            StatusCode::BAD_REQUEST,
            "Choose Connect or Decline",
            "The form was sent without a choice.",
            HINT_RETRY,
        )),
    }
}

fn declined_page(tenant_name: &str) -> Result<HttpResponse, PageError> {
    render(
        StatusCode::OK,
        &ResultPage {
            title: "Not connected",
            message: "You declined. Nothing was connected and nothing was shared.",
            tenant_name,
            class: "",
        },
        None,
    )
}

/// `GET /connect/{provider}/callback`.
pub async fn callback(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    q: web::Query<CallbackQuery>,
    session: MaybeSession,
) -> Result<HttpResponse, PageError> {
    let rid = request_id(&req);
    let provider = parse_provider(&rid, &path)?;
    let now = OffsetDateTime::now_utc();
    let info = session.0.map(|s| s.info);
    let q = q.into_inner();
    // Invariant 13: the code exchange and its commit run to the end on the worker's task
    // set even if the browser goes away meanwhile (a grant the provider issued is either
    // stored or revoked, never dropped half-way). Not once the instance is stopping: the
    // state is not consumed, so the same answer works on the instance the retry reaches.
    if state.shutdown.is_stopping() {
        return Err(PageError::new(
            &rid,
            StatusCode::SERVICE_UNAVAILABLE,
            "Please try again",
            "This server is restarting. Nothing was connected yet.",
            "Reload this page in a moment.",
        ));
    }
    let task = {
        let (state, q) = (state.get_ref().clone(), q.clone());
        state
            .detached
            .clone()
            .spawn_local(async move { callback::complete(&state, &provider, info.as_ref(), &q, now).await })
    };
    let outcome = task.await.map_err(|e| PageError::internal(&rid.0, &e))?;
    match outcome {
        Ok(CallbackOutcome::Connected { tenant_name, account }) => {
            let message = match account {
                Some(a) => format!("Your account {a} is connected."),
                None => "Your account is connected.".to_owned(),
            };
            render(
                StatusCode::OK,
                &ResultPage { title: "Connected", message: &message, tenant_name: &tenant_name, class: "ok" },
                None,
            )
        }
        Ok(CallbackOutcome::AlreadyConnected { tenant_name }) => render(
            StatusCode::OK,
            &ResultPage {
                title: "Already connected",
                message: "This connection was completed before; nothing more was done.",
                tenant_name: &tenant_name,
                class: "ok",
            },
            None,
        ),
        Ok(CallbackOutcome::Declined { tenant_name }) => declined_page(&tenant_name),
        Err(r) => Err(callback_error(&rid, &q, r)),
    }
}

fn callback_error(rid: &RequestId, q: &CallbackQuery, r: CallbackRefusal) -> PageError {
    metrics::counter!(crate::telemetry::metrics::CONNECT_FAILURES, "reason" => r.code()).increment(1);
    tracing::warn!(
        reason = r.code(),
        provider_revocation = r.provider_revocation(),
        query = %q.describe(),
        "callback refused"
    );
    match refusal_text(r.into_inner()) {
        Ok(t) => PageError::new(rid, t.status, t.title, t.message, t.hint),
        Err(internal) => PageError::internal(&rid.0, &internal),
    }
}

/// What a refusal page says: status, title, what happened, what to do.
struct RefusalText {
    status: StatusCode,
    title: &'static str,
    message: &'static str,
    hint: &'static str,
}

const fn refused(message: &'static str) -> RefusalText {
    RefusalText { status: StatusCode::BAD_REQUEST, title: "The connection was refused", message, hint: HINT_RETRY }
}

const OTHER_SESSION: RefusalText = RefusalText {
    status: StatusCode::FORBIDDEN,
    title: "The connection was refused",
    message: "This answer belongs to a sign-in in another browser or session.",
    hint: HINT_RETRY,
};
const PROVIDER_ERROR: RefusalText = RefusalText {
    status: StatusCode::BAD_GATEWAY,
    title: "The provider reported an error",
    message: "Nothing was connected.",
    hint: "You can open the same link again and retry.",
};
const ANSWER_FAILED_CHECKS: RefusalText = RefusalText {
    status: StatusCode::BAD_GATEWAY,
    title: "The provider's answer did not pass the checks",
    message: "Nothing was connected.",
    hint: "You can open the same link again and retry.",
};
const CONNECTED_CONCURRENTLY: RefusalText = RefusalText {
    status: StatusCode::CONFLICT,
    title: "Connected in another window",
    message: "This account was connected from another window a moment ago; that connection is kept and the \
              duplicate grant made here was not stored (it is revoked at the provider where the provider allows).",
    hint: "Nothing more to do. If your assistant still asks, open the link again.",
};
const ACCOUNT_MISMATCH: RefusalText = RefusalText {
    status: StatusCode::CONFLICT,
    title: "A different account is already connected",
    message: "You signed in at the provider with another account than the one already connected here. The \
              existing connection was kept.",
    hint: "Sign in at the provider with the account you connected before, or ask your administrator to remove \
           the old connection.",
};
const PROVIDER_PAUSED: RefusalText = RefusalText {
    status: StatusCode::SERVICE_UNAVAILABLE,
    title: "Connecting this provider is paused",
    message: "The operator of this service has paused connections to this provider. Nothing was connected.",
    hint: "Try again later, or ask your administrator.",
};
const PROVIDER_UNAVAILABLE: RefusalText = RefusalText {
    status: StatusCode::SERVICE_UNAVAILABLE,
    title: "The provider is unavailable",
    message: "Nothing was connected.",
    hint: "Open the same link again in a minute.",
};

/// The page for each refusal; an internal failure is the error to log behind a 500 page.
fn refusal_text(r: CallbackRefusal) -> Result<RefusalText, Box<dyn std::error::Error>> {
    Ok(match r {
        CallbackRefusal::MissingState | CallbackRefusal::StateUnknown => {
            refused("This answer from the provider is unknown or was already used.")
        }
        CallbackRefusal::StateExpired => refused("This answer from the provider came too late."),
        CallbackRefusal::NoSession | CallbackRefusal::SessionMismatch => OTHER_SESSION,
        CallbackRefusal::ProviderMismatch | CallbackRefusal::RedirectMismatch | CallbackRefusal::Iss(_) => {
            refused("The answer did not come from the provider this request was sent to.")
        }
        CallbackRefusal::ElicitationGone => refused("The connect request is no longer active."),
        CallbackRefusal::ProviderError(_) => PROVIDER_ERROR,
        // Down, slow, or a body that is not a token response: an outage, not a refusal.
        CallbackRefusal::Exchange(crate::oauth::flow::FlowError::Transient(_)) => PROVIDER_UNAVAILABLE,
        CallbackRefusal::MissingCode
        | CallbackRefusal::Exchange(_)
        | CallbackRefusal::Account
        | CallbackRefusal::UserinfoSubject(_) => ANSWER_FAILED_CHECKS,
        CallbackRefusal::ConnectedConcurrently => CONNECTED_CONCURRENTLY,
        CallbackRefusal::AccountMismatch => ACCOUNT_MISMATCH,
        CallbackRefusal::ProviderDisabled => PROVIDER_PAUSED,
        CallbackRefusal::Resolve(_) => PROVIDER_UNAVAILABLE,
        CallbackRefusal::Database(e) => return Err(Box::new(e)),
        CallbackRefusal::Vault(e) => return Err(Box::new(e)),
        CallbackRefusal::Encoding(e) => return Err(Box::new(e)),
        // `into_inner` unwrapped it already; a nested one says what it wraps.
        CallbackRefusal::GrantRefused { refusal, .. } => return refusal_text(*refusal),
    })
}
