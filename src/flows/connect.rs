//! The connect flow behind the browser pages (DESIGN.md steps 4-6): who may open an
//! elicitation, starting the provider authorization, and completing it at the callback.
//! Every check is a plain function of its inputs; the callers turn refusals into pages.

use super::policy::{self, kill_state};
use crate::app::AppState;
use crate::crypto;
use crate::domain::AuditKind;
use crate::domain::{ElicitationId, ElicitationStatus, KillState, ProviderId, Scopes, Subject};
use crate::oauth::flow;
use crate::providers::{Provider, Upstream};
use crate::store::{self, audit::AuditEvent, elicitations::ElicitationRow};
use crate::webhooks::EventKind;
use std::sync::Arc;
use time::OffsetDateTime;
use url::Url;

const STATE_TTL: time::Duration = time::Duration::minutes(10);
pub const STATE_PURPOSE: &str = "oauth_state";

/// The logged-in browser user: the IdP's `sub` and that IdP's issuer (together, the
/// person), and the hash of the session id.
#[derive(Debug, Clone)]
pub struct SessionInfo {
    pub subject: Subject,
    pub issuer: String,
    pub id_hash: [u8; 32],
}

/// Why an elicitation cannot be worked on from this page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryRefusal {
    NotFound,
    Expired,
    Finished(ElicitationStatus),
    /// Cancelled by the MCP client: the person answered `cancel` or `decline` there.
    ClosedInAssistant,
    ProviderMismatch,
}

/// Checks an elicitation opened at `/connect/{provider}`: it exists, is pending, has not
/// expired, and is for the provider in the path.
pub fn check_entry(
    e: Option<&ElicitationRow>,
    path_provider: &ProviderId,
    now: OffsetDateTime,
) -> Result<(), EntryRefusal> {
    let e = e.ok_or(EntryRefusal::NotFound)?;
    if e.provider != *path_provider {
        return Err(EntryRefusal::ProviderMismatch);
    }
    match e.status {
        ElicitationStatus::Pending if e.expires_at > now => Ok(()),
        ElicitationStatus::Pending | ElicitationStatus::Expired => Err(EntryRefusal::Expired),
        ElicitationStatus::Cancelled if e.cancel_reason.is_some() => Err(EntryRefusal::ClosedInAssistant),
        other => Err(EntryRefusal::Finished(other)),
    }
}

/// The one identity check: the browser user is the subject the link was made for, at the
/// IdP it was made for. Byte equality of the issuer and of the IdP's `sub`; names and
/// e-mails play no part. A link without a recorded issuer matches nobody.
pub fn same_subject(e: &ElicitationRow, session: &SessionInfo) -> bool {
    same_issuer(e, session)
        && crypto::constant_time_eq(e.subject.as_str().as_bytes(), session.subject.as_str().as_bytes())
}

/// Whether the link was made for a subject of its tenant's IdP as it is now: one made
/// before the tenant moved to another IdP is over (the next `/v1/token` closes it).
fn of_tenants_idp(directory: &crate::app::Directory, e: &ElicitationRow) -> bool {
    let idp = directory.tenant_idp(&e.tenant_id);
    idp.is_some_and(|i| e.issuer.as_deref() == Some(i.issuer.as_str()))
}

/// Whether the session was signed in at the IdP the link was made for.
fn same_issuer(e: &ElicitationRow, session: &SessionInfo) -> bool {
    e.issuer.as_deref().is_some_and(|i| crypto::constant_time_eq(i.as_bytes(), session.issuer.as_bytes()))
}

/// Records that someone else opened a link (the refusal page is the caller's).
pub async fn record_identity_mismatch(
    db: &crate::store::Db,
    e: &ElicitationRow,
    session: &SessionInfo,
) -> Result<(), sqlx::Error> {
    metrics::counter!(crate::telemetry::metrics::IDENTITY_MISMATCHES).increment(1);
    let mut ev = AuditEvent::for_elicitation(AuditKind::IdentityMismatch, e);
    // The intended subject is in the row already; the other one is kept for the operator.
    ev.detail = serde_json::json!({ "browser_subject": session.subject.as_str(), "browser_issuer": session.issuer });
    store::audit::insert_event(db, &ev).await
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("elicitation refused: {0:?}")]
    Entry(EntryRefusal),
    #[error("the browser user is not the elicitation's subject")]
    IdentityMismatch,
    #[error("the provider is not available to this tenant")]
    ProviderNotAllowed,
    #[error("the provider is disabled by the operator")]
    ProviderDisabled,
    #[error("provider configuration could not be resolved: {0}")]
    Resolve(#[source] crate::oauth::resolve::ResolveError),
    /// Connect (the OAuth redirect) asked of a provider whose credential is typed here.
    #[error("the provider takes a typed credential, not an OAuth sign-in")]
    NotOAuth,
    #[error(transparent)]
    Fault(#[from] super::Fault),
}
super::fault::wraps_fault!(ConnectError);

pub(super) async fn load_for_session(
    state: &AppState,
    id: ElicitationId,
    path_provider: &ProviderId,
    session: &SessionInfo,
    now: OffsetDateTime,
) -> Result<(ElicitationRow, Arc<Provider>), ConnectError> {
    let e = store::elicitations::find_by_id(&state.pool, id).await?;
    check_entry(e.as_ref(), path_provider, now).map_err(ConnectError::Entry)?;
    let e = e.ok_or(ConnectError::Entry(EntryRefusal::NotFound))?;
    if !of_tenants_idp(&state.directory, &e) {
        return Err(ConnectError::Entry(EntryRefusal::Expired));
    }
    if !same_subject(&e, session) {
        record_identity_mismatch(&state.pool, &e, session).await?;
        return Err(ConnectError::IdentityMismatch);
    }
    // A provider switched off over the operator API is paused, as a kill switch pauses it.
    let provider = policy::provider_for(&state.directory, &e.tenant_id, path_provider).map_err(|e| match e {
        policy::PolicyError::ProviderDeactivated => ConnectError::ProviderDisabled,
        _ => ConnectError::ProviderNotAllowed,
    })?;
    if kill_state(&state.pool, &state.caches, &e.tenant_id, &e.provider).await? != KillState::Open {
        return Err(ConnectError::ProviderDisabled);
    }
    Ok((e, provider))
}

/// What the consent page shows.
pub struct ConsentView {
    pub elicitation: ElicitationRow,
    /// The scopes Connect will ask for: the link's, or where it names none, those the
    /// server's metadata lists (as listed).
    pub scopes: Vec<String>,
    pub tenant_name: String,
    pub provider: Arc<Provider>,
    /// The host the browser will be sent to, shown in full.
    pub domain: String,
    /// Its origin, the one place the Connect form's redirect may lead (CSP form-action).
    pub authorize_origin: String,
}

/// What the credential form shows.
pub struct CredentialView {
    pub elicitation: ElicitationRow,
    pub tenant_name: String,
    pub provider: Arc<Provider>,
    pub spec: Arc<crate::providers::credential::CredentialSpec>,
    /// The host the value is checked at, shown in full; `None` when it is not checked.
    pub domain: Option<String>,
}

/// The full authority people are sent to, as pages show it: the host, and the port where
/// it is not the scheme's default.
pub fn authority(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

/// What the connect link shows.
pub enum Consent {
    /// The consent page, after every check.
    View(Box<ConsentView>),
    /// The credential form of an `api_key` or `basic` provider, after every check.
    Credential(Box<CredentialView>),
    /// The link is good, and nobody is signed in, or someone of another IdP than the one
    /// the link is for: the page sends the person to sign in at `idp` (its name) first, and
    /// the checks that need the person run when they come back.
    SignIn { idp: String },
}

/// The connect link opened.
pub async fn consent_view(
    state: &AppState,
    id: ElicitationId,
    path_provider: &ProviderId,
    session: Option<&SessionInfo>,
    now: OffsetDateTime,
) -> Result<Consent, ConnectError> {
    let e = store::elicitations::find_by_id(&state.pool, id).await?;
    check_entry(e.as_ref(), path_provider, now).map_err(ConnectError::Entry)?;
    let e = e.ok_or(ConnectError::Entry(EntryRefusal::NotFound))?;
    let Some(session) = session.filter(|s| same_issuer(&e, s)) else {
        // The IdP the link's subject belongs to: its tenant's. A link of another (made
        // before the tenant moved, or before issuers were recorded) cannot be signed in
        // for: to the person, it is over, and the assistant's next call makes a new one.
        let idp = state.directory.tenant_idp(&e.tenant_id).filter(|_| of_tenants_idp(&state.directory, &e));
        let idp = idp.ok_or(ConnectError::Entry(EntryRefusal::Expired))?;
        return Ok(Consent::SignIn { idp: idp.name.clone() });
    };
    let (elicitation, provider) = load_for_session(state, id, path_provider, session, now).await?;
    let tenant_name = state.directory.tenant_name(&elicitation.tenant_id);
    if let Some(spec) = provider.credential().cloned() {
        // Typed on this page: the check's host is where the value goes.
        let domain = spec.check.as_ref().map(|c| authority(&c.url));
        return Ok(Consent::Credential(Box::new(CredentialView { elicitation, tenant_name, provider, spec, domain })));
    }
    let server = super::remote::provider_server(state, &provider).await.map_err(ConnectError::Resolve)?;
    // The page shows what Connect will ask for (see `start_authorization`).
    let scopes = match elicitation.scopes.is_empty() {
        true => server.scopes_supported.clone(),
        false => elicitation.scopes.as_slice().to_vec(),
    };
    let domain = authority(&server.authorize_url);
    let authorize_origin = server.authorize_url.origin().ascii_serialization();
    Ok(Consent::View(Box::new(ConsentView { elicitation, scopes, tenant_name, provider, domain, authorize_origin })))
}

#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct SealedState {
    pub(super) verifier: String,
    pub(super) nonce: Option<String>,
}

/// Connect: creates the one-time state and returns the provider's authorization URL.
pub async fn start_authorization(
    state: &AppState,
    id: ElicitationId,
    path_provider: &ProviderId,
    session: &SessionInfo,
    now: OffsetDateTime,
) -> Result<Url, ConnectError> {
    let (e, provider) = load_for_session(state, id, path_provider, session, now).await?;
    if provider.credential().is_some() {
        return Err(ConnectError::NotOAuth);
    }
    let server = super::remote::provider_server(state, &provider).await.map_err(ConnectError::Resolve)?;
    let mut scopes = e.scopes.clone();
    // A remote MCP server, and nothing asked for: what its metadata lists (MCP authorization).
    if scopes.as_slice().is_empty() && !server.scopes_supported.is_empty() {
        scopes = Scopes::parse(&server.scopes_supported).unwrap_or_default();
    }
    let (oidc, extra) = match &provider.upstream {
        Upstream::OAuth(o) => {
            let mut extra = o.extra_authorize_params.clone();
            // Only where the operator asked for it: otherwise the provider never learns
            // who the MCP subject is.
            if o.login_hint_subject {
                extra.push(("login_hint".to_owned(), e.subject.to_string()));
            }
            (o.oidc, extra)
        }
        Upstream::RemoteMcp(_) | Upstream::Typed(_) => (false, Vec::new()),
    };
    let oidc = oidc && scopes.as_slice().iter().any(|s| s == "openid");
    let redirect = state.urls.provider_redirect_uri(path_provider);
    let req = flow::authorize(&server, &redirect, &scopes.join(provider.scope_separator()), &extra, oidc);

    let state_hash = crypto::lookup_hash(STATE_PURPOSE, &req.state);
    let secret = serde_json::to_vec(&SealedState { verifier: req.pkce_verifier, nonce: req.nonce })?;
    let key = state.keys.sealing(crate::keys::Scope::Tenant(&e.tenant_id)).await?;
    let sealed = key.seal_aux(STATE_PURPOSE, &state_hash, &secret)?;
    let mut tx = store::begin(&state.pool).await?;
    store::states::insert_state(
        &mut *tx,
        &store::states::NewOauthState {
            state_hash: &state_hash,
            elicitation_id: e.id,
            session_hash: &session.id_hash,
            tenant_id: &e.tenant_id,
            subject: &e.subject,
            provider: &e.provider,
            redirect_uri: redirect.as_str(),
            key_id: key.key_id(),
            sealed: &sealed,
            expires_at: now + STATE_TTL,
        },
    )
    .await?;
    store::audit::insert_event(&mut *tx, &AuditEvent::for_elicitation(AuditKind::ConnectStarted, &e)).await?;
    tx.commit().await?;
    Ok(req.url)
}

/// Decline on our consent page: a normal outcome, recorded, never re-prompted by itself.
pub async fn decline(
    state: &AppState,
    id: ElicitationId,
    path_provider: &ProviderId,
    session: &SessionInfo,
    now: OffsetDateTime,
) -> Result<String, ConnectError> {
    let (e, _) = load_for_session(state, id, path_provider, session, now).await?;
    let mut tx = store::begin(&state.pool).await?;
    if store::elicitations::mark_declined(&mut *tx, e.id, &e.subject, now).await? {
        crate::telemetry::metrics::elicitations_finished(ElicitationStatus::Declined, 1);
        let mut ev = AuditEvent::for_elicitation(AuditKind::ConsentDeclined, &e);
        ev.detail = serde_json::json!({ "where": "consent_page" });
        store::audit::insert_event(&mut *tx, &ev).await?;
        super::events::elicitation(&mut tx, EventKind::ElicitationDeclined, &e, "consent_page", "declined").await?;
    }
    tx.commit().await?;
    Ok(state.directory.tenant_name(&e.tenant_id))
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    const ISSUER: &str = "https://idp.example";

    fn row(status: &str, provider: &str, expires_in: i64, cancel_reason: Option<&str>) -> ElicitationRow {
        let now = OffsetDateTime::UNIX_EPOCH + time::Duration::days(1);
        ElicitationRow {
            id: ElicitationId::from_uuid(uuid::Uuid::nil()),
            tenant_id: crate::domain::TenantId::parse("acme").unwrap(),
            subject: Subject::parse("alice").unwrap(),
            provider: ProviderId::parse(provider).unwrap(),
            scopes: Scopes::default(),
            status: ElicitationStatus::parse(status).unwrap(),
            created_at: now,
            expires_at: now + time::Duration::seconds(expires_in),
            completed_at: None,
            issuer: Some(ISSUER.to_owned()),
            connection_id: None,
            cancel_reason: cancel_reason.map(str::to_owned),
        }
    }

    #[test]
    fn the_connect_page_opens_only_a_pending_unexpired_link_of_its_provider() {
        let now = OffsetDateTime::UNIX_EPOCH + time::Duration::days(1);
        let github = ProviderId::parse("github").unwrap();
        use EntryRefusal::*;
        let cases = [
            (Some(row("pending", "github", 60, None)), Ok(())),
            (None, Err(NotFound)),
            (Some(row("pending", "gitlab", 60, None)), Err(ProviderMismatch)),
            (Some(row("pending", "github", 0, None)), Err(Expired)),
            (Some(row("pending", "github", -1, None)), Err(Expired)),
            (Some(row("expired", "github", 60, None)), Err(Expired)),
            (Some(row("completed", "github", 60, None)), Err(Finished(ElicitationStatus::Completed))),
            (Some(row("declined", "github", 60, None)), Err(Finished(ElicitationStatus::Declined))),
            (Some(row("cancelled", "github", 60, None)), Err(Finished(ElicitationStatus::Cancelled))),
            (Some(row("cancelled", "github", 60, Some("decline"))), Err(ClosedInAssistant)),
            (Some(row("cancelled", "github", 60, Some("cancel"))), Err(ClosedInAssistant)),
        ];
        for (e, want) in cases {
            assert_eq!(check_entry(e.as_ref(), &github, now), want, "{e:?}");
        }
    }

    #[test]
    fn only_the_subject_the_link_was_made_for_passes() {
        let e = row("pending", "github", 60, None);
        let at = |issuer: &str, s: &str| SessionInfo {
            subject: Subject::parse(s).unwrap(),
            issuer: issuer.to_owned(),
            id_hash: [0; 32],
        };
        let session = |s: &str| at(ISSUER, s);
        assert!(same_subject(&e, &session("alice")));
        for other in ["bob", "Alice", "alice ", "alic", "alice@example.com"] {
            assert!(Subject::parse(other).is_err() || !same_subject(&e, &session(other)), "{other:?}");
        }
        // The same `sub` at another IdP is someone else; so is anyone, for a link whose
        // issuer is not recorded.
        for issuer in ["https://other-idp.example", "https://idp.example/", ""] {
            assert!(!same_subject(&e, &at(issuer, "alice")), "{issuer:?}");
        }
        let unrecorded = ElicitationRow { issuer: None, ..e };
        assert!(!same_subject(&unrecorded, &session("alice")));
    }
}
