//! The upstream account of an exchanged grant: the ID token verified where the flow is
//! OIDC, and the user endpoint's answer, whose `sub` must then be the ID token's
//! (OIDC Core §5.3.2).

use super::{CallbackError, CallbackRefusal, Exchanged};
use crate::app::AppState;
use crate::domain::Account;
use crate::oauth::flow::{self, AuthServer, FlowError};
use crate::oauth::resolve::Source;
use secrecy::SecretString;
use time::OffsetDateTime;

/// The account the grant is for; `None` where the provider names none (no ID token and
/// no user endpoint).
pub async fn verified(state: &AppState, x: &Exchanged, now: OffsetDateTime) -> Result<Option<Account>, CallbackError> {
    let mut id_subject = None;
    if let Some(nonce) = &x.nonce {
        let raw =
            x.tokens.id_token.as_ref().ok_or(CallbackRefusal::Exchange(FlowError::IdToken(
                crate::oauth::id_token::IdTokenRefusal::Missing,
            )))?;
        let v = state
            .resolver
            .verify_id_token(&state.outbound, Source::Provider(&x.provider), x.server.clone(), raw, nonce, now)
            .await
            .map_err(CallbackRefusal::Exchange)?;
        id_subject = Some(v.subject);
    }
    let Some(info) = userinfo(&state.outbound, &x.server, &x.tokens.access_token).await? else {
        return Ok(id_subject.map(|id| Account { id, login: None }));
    };
    if let Some(id_sub) = &id_subject {
        flow::check_userinfo_subject(id_sub, &info).map_err(CallbackRefusal::UserinfoSubject)?;
    }
    let fields = x.provider.account_fields().ok_or(CallbackRefusal::Account)?;
    let id = crate::providers::json_field(&info, &fields.id_field).ok_or(CallbackRefusal::Account)?;
    let login = crate::providers::json_field(&info, &fields.login_field);
    Ok(Some(Account { id, login }))
}

/// The provider's user endpoint answer, or `None` when it has none.
async fn userinfo(
    outbound: &crate::net::http::Outbound,
    server: &AuthServer,
    access_token: &SecretString,
) -> Result<Option<serde_json::Value>, CallbackRefusal> {
    let Some(url) = &server.userinfo_url else { return Ok(None) };
    let v = outbound
        .with_guard(&server.guard)
        .get_json(url, Some(secrecy::ExposeSecret::expose_secret(access_token)))
        .await
        .map_err(|_| CallbackRefusal::Account)?;
    Ok(Some(v))
}
