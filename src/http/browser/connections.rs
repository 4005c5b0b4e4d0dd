//! `GET /connections` ("Your connections") and `POST /connections/disconnect`: a signed-in
//! person sees every connection held for them, by assistant, and ends one of theirs.

use super::pages::{PageError, PageKind, render};
use super::refusals::{forbidden_csrf, session_expired};
use super::session::{MaybeSession, request_id};
use crate::app::AppState;
use crate::domain::ConnectionId;
use crate::flows::held::{self, DisconnectError, Group};
use actix_web::{HttpRequest, HttpResponse, web};
use askama::Template;
use time::OffsetDateTime;
use time::macros::format_description;
use uuid::Uuid;

#[derive(Template)]
#[template(path = "connections.html")]
struct ConnectionsPage<'a> {
    signed_in_as: &'a str,
    /// The host (and port) of the IdP the person signed in at, where more than one is
    /// configured.
    signed_in_at: Option<String>,
    csrf: &'a str,
    groups: Vec<GroupView>,
    notice: Option<Notice>,
}

struct GroupView {
    tenant_name: String,
    connections: Vec<ConnectionView>,
}

struct ConnectionView {
    id: String,
    provider_name: String,
    provider_domain: Option<String>,
    account_login: Option<String>,
    scopes: Vec<String>,
    connected_since: String,
    last_used: Option<String>,
    status: &'static str,
}

struct Notice {
    class: &'static str,
    text: String,
}

/// To the minute, in UTC: what the usage table knows.
fn minute(t: OffsetDateTime) -> String {
    let f = format_description!("[year]-[month]-[day] [hour]:[minute] UTC");
    t.to_offset(time::UtcOffset::UTC).format(&f).unwrap_or_default()
}

fn view(groups: Vec<Group>) -> Vec<GroupView> {
    groups
        .into_iter()
        .map(|g| GroupView {
            tenant_name: g.tenant_name,
            connections: g
                .connections
                .into_iter()
                .map(|c| ConnectionView {
                    id: c.id.to_string(),
                    provider_name: c.provider_name,
                    provider_domain: c.provider_domain,
                    account_login: c.account_login,
                    scopes: c.scopes.as_slice().to_vec(),
                    connected_since: minute(c.connected_since),
                    last_used: c.last_used.map(minute),
                    status: c.status.as_str(),
                })
                .collect(),
        })
        .collect()
}

/// To sign-in (at the IdP named, where `/connections?idp=<name>` names one) and back here.
fn sign_in(state: &AppState, idp: Option<&str>) -> HttpResponse {
    let login = super::login::sign_in_url(state, "/connections", idp);
    HttpResponse::SeeOther().insert_header(("location", login)).finish()
}

async fn page(
    state: &AppState,
    rid: &str,
    session: &super::BrowserSession,
    notice: Option<Notice>,
) -> Result<HttpResponse, PageError> {
    let groups = held::held_by(state, &session.info).await.map_err(|e| PageError::internal(rid, &e))?;
    let page = ConnectionsPage {
        signed_in_as: session.info.subject.as_str(),
        // Where tenants sign in at several IdPs, one name may be two people: the page says
        // which IdP's this is.
        signed_in_at: (state.directory.idps.named_count() > 0)
            .then(|| url::Url::parse(&session.info.issuer).ok())
            .flatten()
            .map(|u| u[url::Position::BeforeHost..url::Position::AfterPort].to_owned()),
        csrf: session.csrf(),
        groups: view(groups),
        notice,
    };
    render(&page, None)
}

/// What the page says after a disconnect (the POST redirects here: a reload repeats
/// nothing). Only a configured provider's name is ever shown.
#[derive(serde::Deserialize)]
pub struct ShowQuery {
    disconnected: Option<String>,
    /// `no` when the provider could not be told.
    told: Option<String>,
    /// Without a session: the IdP to sign in at (by name; `/login` checks it).
    idp: Option<String>,
}

fn notice(state: &AppState, q: &ShowQuery) -> Option<Notice> {
    let id = crate::domain::ProviderId::parse(q.disconnected.as_deref()?).ok()?;
    let name = state.directory.providers.get(&id)?.display_name.clone();
    Some(if q.told.as_deref() == Some("no") {
        Notice {
            class: "bad",
            text: format!(
                "Disconnected: this service deleted what it held for {name}, but {name} could not be told; \
                 you can also remove the app in your account there."
            ),
        }
    } else {
        Notice { class: "ok", text: format!("Disconnected {name}.") }
    })
}

/// `GET /connections`.
pub async fn show(
    req: HttpRequest,
    state: web::Data<AppState>,
    session: MaybeSession,
    q: web::Query<ShowQuery>,
) -> Result<HttpResponse, PageError> {
    let rid = request_id(&req);
    let Some(session) = session.0 else { return Ok(sign_in(&state, q.idp.as_deref())) };
    page(&state, &rid.0, &session, notice(&state, &q)).await
}

#[derive(serde::Deserialize)]
pub struct DisconnectForm {
    csrf: Option<String>,
    id: Option<String>,
}

/// `POST /connections/disconnect`: the form's CSRF token is bound to the session, and the
/// connection must be the signed-in subject's (another's, in any tenant, is "no such
/// connection").
pub async fn disconnect(
    req: HttpRequest,
    state: web::Data<AppState>,
    session: MaybeSession,
    form: web::Form<DisconnectForm>,
) -> Result<HttpResponse, PageError> {
    let rid = request_id(&req);
    // The connect flow's words ("Nothing was connected", "the link from your assistant")
    // mean nothing here.
    let refused = |e: PageError| e.with_outcome(Some("Nothing was disconnected."));
    let Some(session) = session.0 else {
        return Err(refused(session_expired(&rid, "Open your connections again and sign in.")));
    };
    if !session.csrf_matches(form.csrf.as_deref()) {
        return Err(refused(forbidden_csrf(&rid, "Open your connections again and retry.")));
    }
    let not_yours = || {
        refused(PageError::new(
            &rid,
            PageKind::NotFound,
            "No such connection",
            "This connection does not exist or is not yours.",
            "Open your connections again.",
        ))
    };
    let id =
        form.id.as_deref().and_then(|s| Uuid::try_parse(s).ok()).map(ConnectionId::from_uuid).ok_or_else(not_yours)?;
    let r = match held::disconnect(&state, &session.info, id).await {
        Ok(r) => r,
        Err(DisconnectError::NotYours) => return Err(not_yours()),
        Err(DisconnectError::Fault(f)) => return Err(refused(super::refusals::fault(&rid, &f))),
    };
    let mut back = state.urls.base.clone();
    back.set_path("/connections");
    back.query_pairs_mut().append_pair("disconnected", &r.provider);
    if r.provider_result.starts_with("failed") {
        back.query_pairs_mut().append_pair("told", "no");
    }
    Ok(HttpResponse::SeeOther().insert_header(("location", back.as_str())).finish())
}
