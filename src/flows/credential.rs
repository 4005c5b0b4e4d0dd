//! The credential form (`api_key` and `basic` providers): what the person typed on our
//! connect page, after the same checks as the OAuth consent (link pending and unexpired,
//! the signed-in person the link's subject at its IdP, the provider allowed and not
//! paused; CSRF and the session are the page's), checked against the provider, then sealed
//! and kept under the elicitation's lock as a code exchange's grant is: single use, one
//! connection, audited and announced without any value.

use super::Fault;
use super::callback::{CallbackError, Grant, Kept, keep_grant};
use super::connect::{ConnectError, SessionInfo, load_for_session};
use super::policy::kill_state;
use crate::app::AppState;
use crate::domain::{Account, AuditKind, ConnectionKey, ElicitationId, ElicitationStatus, KillState, ProviderId};
use crate::oauth::flow::TokenSet;
use crate::providers::Provider;
use crate::providers::credential::{self, Checked, FormRefusal};
use crate::store::{self, audit::AuditEvent, credential_checks::BudgetKey, elicitations::ElicitationRow};
use std::collections::BTreeMap;
use time::OffsetDateTime;

#[derive(Debug)]
pub enum CredentialOutcome {
    Connected {
        tenant_name: String,
        account: Option<String>,
    },
    /// The link was completed before (a second submit of the same form).
    AlreadyConnected {
        tenant_name: String,
    },
}

/// Why a typed credential was not kept. Nothing is stored for any of them.
#[derive(Debug, thiserror::Error)]
pub enum CredentialRefusal {
    /// The form was posted for a provider that signs in by OAuth.
    #[error("this provider takes no typed credential")]
    NotACredentialProvider,
    #[error("the form: {0}")]
    Form(FormRefusal),
    /// The provider's check answered this status.
    #[error("the provider did not accept the credential (status {0})")]
    Refused(u16),
    /// The provider could not say (no answer, a 5xx).
    #[error("the provider's check could not be made")]
    Unavailable,
    #[error("the credential is for another account than the one already connected")]
    AccountMismatch,
    #[error("the elicitation is no longer pending")]
    ElicitationGone,
    /// The person had [`MAX_CHECKS`] values refused (or unchecked) at this provider within
    /// [`CHECK_WINDOW`]: no more are sent to it (guessing through us) until the window ends.
    #[error("too many refused attempts at this provider")]
    TooManyAttempts,
    /// Another link of the same subject and provider connected at the same moment: that
    /// connection is kept.
    #[error("another link of this subject connected this provider at the same moment")]
    ConnectedConcurrently,
}

impl CredentialRefusal {
    /// The reason in the audit trail, the metric and the log.
    pub fn code(&self) -> &'static str {
        match self {
            CredentialRefusal::NotACredentialProvider => "not_a_credential_provider",
            CredentialRefusal::Form(_) => "credential_form_invalid",
            CredentialRefusal::Refused(_) => "credential_refused",
            CredentialRefusal::Unavailable => "provider_unavailable",
            CredentialRefusal::AccountMismatch => "account_mismatch",
            CredentialRefusal::ElicitationGone => "elicitation_not_pending",
            CredentialRefusal::TooManyAttempts => "too_many_attempts",
            CredentialRefusal::ConnectedConcurrently => "connected_concurrently",
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The link's checks (the same as the consent page's).
    #[error(transparent)]
    Connect(#[from] ConnectError),
    #[error(transparent)]
    Refused(#[from] CredentialRefusal),
    #[error(transparent)]
    Fault(#[from] Fault),
}
super::fault::wraps_fault!(CredentialError);

impl From<CallbackError> for CredentialError {
    fn from(e: CallbackError) -> Self {
        match e {
            // `keep_grant` refuses nothing but a concurrent connect of another link.
            CallbackError::Refused(_) => CredentialError::Refused(CredentialRefusal::ConnectedConcurrently),
            CallbackError::Fault(f) => CredentialError::Fault(f),
        }
    }
}

/// Checks a person may have sent to one provider per [`CHECK_WINDOW`] that did not end in
/// a valid value: one who mistyped tries again; a guesser gets five tries an hour, however
/// many links, tabs or concurrent submits (the budget is the person's, taken atomically
/// before the check: `store::credential_checks`). mcp-connect is then no oracle for keys
/// or passwords at the provider, and sends it too little to get its address blocked.
pub const MAX_CHECKS: i32 = 5;

/// The window [`MAX_CHECKS`] counts in.
pub const CHECK_WINDOW: time::Duration = time::Duration::hours(1);

/// `POST /connect/{provider}/credential`: the form's values checked, sealed and kept.
pub async fn submit(
    state: &AppState,
    id: ElicitationId,
    path_provider: &ProviderId,
    session: &SessionInfo,
    form: &BTreeMap<String, String>,
    now: OffsetDateTime,
) -> Result<CredentialOutcome, CredentialError> {
    let (e, provider) = load_for_session(state, id, path_provider, session, now).await?;
    let spec = provider.credential().cloned().ok_or(CredentialRefusal::NotACredentialProvider)?;
    let typed = spec.values(form).map_err(CredentialRefusal::Form)?;
    let account = match &spec.check {
        None => None,
        Some(check) => checked_account(state, &e, session, &provider, check, &typed, now).await?,
    };
    let tenant_name = state.directory.tenant_name(&e.tenant_id);
    // The check took a while: the link's expiry and the kill switch as they are now.
    let now = OffsetDateTime::now_utc();
    if kill_state(&state.pool, &state.caches, &e.tenant_id, &e.provider).await? != KillState::Open {
        return Err(ConnectError::ProviderDisabled.into());
    }

    let key = ConnectionKey { tenant: e.tenant_id.clone(), subject: e.subject.clone(), provider: e.provider.clone() };
    let mut tx = store::begin(&state.pool).await?;
    // Locked from here to the commit: a second submit (double click, two tabs) waits and
    // then finds the link completed; no second connection is written.
    let Some(locked) = store::elicitations::lock_pending(&mut *tx, e.id, now).await? else {
        drop(tx);
        return match store::elicitations::find_by_id(&state.pool, e.id).await? {
            Some(done) if done.status == ElicitationStatus::Completed => {
                Ok(CredentialOutcome::AlreadyConnected { tenant_name })
            }
            _ => Err(CredentialRefusal::ElicitationGone.into()),
        };
    };
    let tokens = TokenSet {
        access_token: typed.sealable(),
        refresh_token: None,
        id_token: None,
        token_type: spec.credential_type().to_owned(),
        expires_in: None,
        // A typed credential has no scopes (`/v1/token` asks for none for it).
        scope: Some(String::new()),
    };
    let grant = Grant { key, provider: &provider, tokens: &tokens };
    match keep_grant(state, &mut tx, &locked, &grant, account, now).await? {
        Kept::Connected(account) => {
            tx.commit().await?;
            state.connections.forget(&grant.key);
            crate::telemetry::metrics::elicitations_finished(ElicitationStatus::Completed, 1);
            Ok(CredentialOutcome::Connected { tenant_name, account: account.and_then(|a| a.login) })
        }
        Kept::AccountMismatch => {
            // The refusal's audit row commits; the connection held stays.
            tx.commit().await?;
            Err(CredentialRefusal::AccountMismatch.into())
        }
    }
}

/// The typed value checked at the provider (within the person's budget of failed checks):
/// the account it names, if the check reads one.
async fn checked_account(
    state: &AppState,
    e: &ElicitationRow,
    session: &SessionInfo,
    provider: &Provider,
    check: &credential::Check,
    typed: &credential::Credential,
    now: OffsetDateTime,
) -> Result<Option<Account>, CredentialError> {
    let budget = BudgetKey {
        tenant: &e.tenant_id,
        issuer: e.issuer.as_deref().unwrap_or(&session.issuer),
        subject: &e.subject,
        provider: &e.provider,
    };
    if !store::credential_checks::take(&state.pool, &budget, now, CHECK_WINDOW, MAX_CHECKS).await? {
        audit_refusal(&state.pool, e, &CredentialRefusal::TooManyAttempts, None).await;
        return Err(CredentialRefusal::TooManyAttempts.into());
    }
    let account = provider.account_fields().cloned().unwrap_or_default();
    let fields = (account.id_field.as_str(), account.login_field.as_str());
    match credential::check(&state.outbound, check, typed, fields).await {
        Ok(Checked::Valid(account)) => {
            store::credential_checks::give_back(&state.pool, &budget).await?;
            Ok(account)
        }
        Ok(Checked::Refused(status)) => {
            let r = CredentialRefusal::Refused(status);
            audit_refusal(&state.pool, e, &r, Some(status)).await;
            Err(r.into())
        }
        Err(err) => {
            tracing::warn!(error = %err, provider = %provider.id, "credential check failed");
            let r = CredentialRefusal::Unavailable;
            audit_refusal(&state.pool, e, &r, None).await;
            Err(r.into())
        }
    }
}

/// `connect_failed` with the reason (and the provider's status): never the value.
async fn audit_refusal(db: &crate::store::Db, e: &ElicitationRow, r: &CredentialRefusal, status: Option<u16>) {
    metrics::counter!(crate::telemetry::metrics::CONNECT_FAILURES, "reason" => r.code()).increment(1);
    let mut ev = AuditEvent::for_elicitation(AuditKind::ConnectFailed, e);
    ev.detail = match status {
        Some(s) => serde_json::json!({ "reason": r.code(), "provider_status": s }),
        None => serde_json::json!({ "reason": r.code() }),
    };
    if let Err(err) = store::audit::insert_event(db, &ev).await {
        tracing::error!(error = %err, "could not write audit event");
    }
}
