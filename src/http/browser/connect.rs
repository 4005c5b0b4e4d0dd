//! `/connect/{provider}`: the page a URL-mode elicitation points to, the Connect/Decline
//! form, and the provider's callback.

use super::pages::{
    ConsentPage, CredentialPage, HINT_RETRY, PageError, PageKind, ResultPage, render, render_refused_form,
};
use super::refusals::{callback_error, connect_error, forbidden_csrf, unknown_link};
use super::session::{MaybeSession, request_id};
use crate::app::AppState;
use crate::domain::{ElicitationId, ProviderId};
use crate::flows::callback::{self, CallbackOutcome};
use crate::flows::connect::{self, ConnectError};
use crate::flows::credential::{self, CredentialError, CredentialOutcome, CredentialRefusal};
use crate::http::middleware::RequestId;
use crate::oauth::callback::CallbackQuery;
use actix_web::{HttpRequest, HttpResponse, web};
use std::collections::BTreeMap;
use time::OffsetDateTime;

#[derive(serde::Deserialize)]
pub struct ShowQuery {
    e: Option<String>,
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
    let session = session.0;
    let view = connect::consent_view(&state, id, &provider, session.as_ref().map(|s| &s.info), now).await;
    let view = match view {
        Ok(v) => v,
        Err(e) => return Err(refusal(&state, &rid, session.as_ref(), (&provider, &id), e).await),
    };
    if let (connect::Consent::Credential(v), Some(session)) = (&view, &session) {
        return render(&credential_page(v, session, &id.to_string(), None), None);
    }
    let (connect::Consent::View(v), Some(session)) = (&view, session) else {
        // A good link and nobody signed in (or someone of another IdP): to the sign-in of
        // the link's IdP. An absolute URL on our origin (invariant 14), built from parsed
        // values only.
        let idp = match &view {
            connect::Consent::SignIn { idp } => Some(idp.as_str()),
            connect::Consent::View(_) | connect::Consent::Credential(_) => None,
        };
        let login = super::login::sign_in_url(&state, &format!("/connect/{provider}?e={id}"), idp);
        return Ok(HttpResponse::SeeOther().insert_header(("location", login)).finish());
    };
    let page = ConsentPage {
        tenant_name: &v.tenant_name,
        provider_name: &v.provider.display_name,
        provider_domain: &v.domain,
        provider_id: provider.as_str(),
        scopes: &v.scopes,
        signed_in_as: session.info.subject.as_str(),
        csrf: session.csrf(),
        elicitation_id: &id.to_string(),
    };
    render(&page, Some(&v.authorize_origin))
}

/// [`connect_error`], and for the identity refusal the IdP's end-session origin in the
/// page's CSP `form-action`: its Sign out goes on there (a browser enforces `form-action`
/// on the redirects that follow a form post too).
async fn refusal(
    state: &AppState,
    rid: &RequestId,
    session: Option<&super::BrowserSession>,
    link: (&ProviderId, &ElicitationId),
    e: ConnectError,
) -> PageError {
    let mismatch = matches!(e, ConnectError::IdentityMismatch);
    let mut page = connect_error(rid, session, link, e);
    if mismatch && let Some(own) = page.page.as_mut() {
        let idp = session.and_then(|s| state.directory.idps.by_issuer(&s.info.issuer));
        if let Some(idp) = idp {
            own.form_action =
                crate::flows::login::idp_logout_url(state, idp).await.map(|u| u.origin().ascii_serialization());
        }
    }
    page
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
        return Err(super::refusals::session_expired(&rid, "Open the link from your assistant again."));
    };
    if !session.csrf_matches(form.csrf.as_deref()) {
        return Err(forbidden_csrf(&rid, "Open the link from your assistant again."));
    }
    let id = form.e.as_deref().and_then(|e| ElicitationId::parse(e).ok()).ok_or_else(|| unknown_link(&rid))?;
    let now = OffsetDateTime::now_utc();
    match form.decision.as_deref() {
        Some("connect") => match connect::start_authorization(&state, id, &provider, &session.info, now).await {
            Ok(url) => Ok(HttpResponse::SeeOther().insert_header(("location", url.as_str())).finish()),
            Err(e) => Err(refusal(&state, &rid, Some(&session), (&provider, &id), e).await),
        },
        Some("decline") => match connect::decline(&state, id, &provider, &session.info, now).await {
            Ok(tenant_name) => declined_page(&tenant_name),
            Err(e) => Err(refusal(&state, &rid, Some(&session), (&provider, &id), e).await),
        },
        _ => Err(PageError::new(
            &rid,
            PageKind::Refused,
            "Choose Connect or Decline",
            "The form was sent without a choice.",
            HINT_RETRY,
        )),
    }
}

/// The credential form of `v`, with why the last submit was not taken.
fn credential_page<'a>(
    v: &'a connect::CredentialView,
    session: &'a super::BrowserSession,
    elicitation_id: &'a str,
    error: Option<&'a str>,
) -> CredentialPage<'a> {
    CredentialPage {
        tenant_name: &v.tenant_name,
        provider_name: &v.provider.display_name,
        provider_domain: v.domain.as_deref(),
        provider_id: v.provider.id.as_str(),
        fields: &v.spec.fields,
        signed_in_as: session.info.subject.as_str(),
        csrf: session.csrf(),
        elicitation_id,
        error,
    }
}

/// `POST /connect/{provider}/credential`: the typed credential of an `api_key` or `basic`
/// provider. The session and its CSRF token first; then the link's checks, the provider's
/// check, and the value sealed (`flows::credential`). A value the provider refused, or a
/// form that lacks one, shows the form again with why (and never the value).
pub async fn credential(
    req: HttpRequest,
    state: web::Data<AppState>,
    path: web::Path<String>,
    session: MaybeSession,
    form: web::Form<BTreeMap<String, String>>,
) -> Result<HttpResponse, PageError> {
    let rid = request_id(&req);
    let provider = parse_provider(&rid, &path)?;
    let Some(session) = session.0 else {
        return Err(super::refusals::session_expired(&rid, "Open the link from your assistant again."));
    };
    let form = form.into_inner();
    if !session.csrf_matches(form.get("csrf").map(String::as_str)) {
        return Err(forbidden_csrf(&rid, "Open the link from your assistant again."));
    }
    let id = form.get("e").and_then(|e| ElicitationId::parse(e).ok()).ok_or_else(|| unknown_link(&rid))?;
    let now = OffsetDateTime::now_utc();
    let submitted = credential::submit(&state, id, &provider, &session.info, &form, now).await;
    drop(form);
    match submitted {
        Ok(CredentialOutcome::Connected { tenant_name, account }) => connected_page(&tenant_name, account),
        Ok(CredentialOutcome::AlreadyConnected { tenant_name }) => already_connected_page(&tenant_name),
        Err(CredentialError::Connect(e)) => Err(refusal(&state, &rid, Some(&session), (&provider, &id), e).await),
        Err(CredentialError::Refused(r)) => {
            tracing::warn!(reason = r.code(), "credential refused");
            let again = match &r {
                CredentialRefusal::Form(f) => Some(format!("{f}. Nothing was stored.")),
                CredentialRefusal::Refused(_) => Some(
                    "The provider did not accept what you typed. Nothing was stored; check it and try again."
                        .to_owned(),
                ),
                _ => None,
            };
            match again {
                // The form again, after the link's checks once more (it may have expired).
                Some(message) => match connect::consent_view(&state, id, &provider, Some(&session.info), now).await {
                    Ok(connect::Consent::Credential(v)) => {
                        render_refused_form(&credential_page(&v, &session, &id.to_string(), Some(&message)))
                    }
                    Ok(_) => Err(unknown_link(&rid)),
                    Err(e) => Err(refusal(&state, &rid, Some(&session), (&provider, &id), e).await),
                },
                None => Err(super::refusals::credential_error(&rid, r)),
            }
        }
        Err(CredentialError::Fault(f)) => Err(super::refusals::fault(&rid, &f)),
    }
}

fn connected_page(tenant_name: &str, account: Option<String>) -> Result<HttpResponse, PageError> {
    let message = match account {
        Some(a) => format!("Your account {a} is connected."),
        None => "Your account is connected.".to_owned(),
    };
    render(&ResultPage { title: "Connected", message: &message, tenant_name, class: "ok" }, None)
}

fn already_connected_page(tenant_name: &str) -> Result<HttpResponse, PageError> {
    render(
        &ResultPage {
            title: "Already connected",
            message: "This connection was completed before; nothing more was done.",
            tenant_name,
            class: "ok",
        },
        None,
    )
}

fn declined_page(tenant_name: &str) -> Result<HttpResponse, PageError> {
    render(
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
    if state.lifecycle.shutdown.is_stopping() {
        return Err(PageError::new(
            &rid,
            PageKind::Unavailable,
            "Please try again",
            "This server is restarting. Nothing was connected yet.",
            "Reload this page in a moment.",
        ));
    }
    let task = {
        let (state, q) = (state.get_ref().clone(), q.clone());
        state
            .lifecycle
            .detached
            .clone()
            .spawn_local(async move { callback::complete(&state, &provider, info.as_ref(), &q, now).await })
    };
    let outcome = task.await.map_err(|e| PageError::internal(&rid.0, &e))?;
    match outcome {
        Ok(CallbackOutcome::Connected { tenant_name, account }) => connected_page(&tenant_name, account),
        Ok(CallbackOutcome::AlreadyConnected { tenant_name }) => already_connected_page(&tenant_name),
        Ok(CallbackOutcome::Declined { tenant_name }) => declined_page(&tenant_name),
        Err(r) => Err(callback_error(&rid, &q, r)),
    }
}
