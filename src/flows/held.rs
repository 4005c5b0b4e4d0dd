//! "Your connections": what a signed-in person holds, in every tenant, and a person ending
//! one of theirs. The disconnect is the admin revoke (`revoke::revoke_connection`: at the
//! provider, ciphertexts deleted, cache entries dropped everywhere, the subject's pending
//! links for that provider closed) with `by: subject` in the audit trail.

use crate::app::AppState;
use crate::domain::{ConnectionId, ConnectionStatus, ProviderId, Scopes, TenantId};
use crate::flows::connect::SessionInfo;
use crate::flows::revoke::{self, Revoked};
use crate::store::{self, connections::Owner};
use time::OffsetDateTime;

/// How long the page waits for a provider's metadata (for the host it shows).
const DOMAIN_LOOKUP: std::time::Duration = std::time::Duration::from_secs(2);

/// The actor of a disconnect made on "Your connections".
pub const BY_SUBJECT: &str = "subject";

/// One connection as its owner sees it.
pub struct Held {
    pub id: ConnectionId,
    pub provider_name: String,
    /// The host the provider signs people in at, where known.
    pub provider_domain: Option<String>,
    pub account_login: Option<String>,
    pub scopes: Scopes,
    pub connected_since: OffsetDateTime,
    /// As the audit trail records it, a minute or two behind (`connection_last_used`: the
    /// usage mark, renewed every ten minutes, and the audit rows since).
    pub last_used: Option<OffsetDateTime>,
    pub status: ConnectionStatus,
}

/// A tenant's connections, under the name people know it by.
pub struct Group {
    pub tenant_name: String,
    pub connections: Vec<Held>,
}

/// The person's connections that are not revoked, grouped by tenant: those of the session's
/// subject at the session's IdP.
pub async fn held_by(state: &AppState, person: &SessionInfo) -> Result<Vec<Group>, sqlx::Error> {
    let rows = store::connections::held_by_subject(&state.pool, &person.issuer, &person.subject).await?;
    // Each provider once, all at once, each bounded: a provider whose metadata cannot be
    // had just now costs the page two seconds at most, and shows no host.
    let mut providers: Vec<&ProviderId> = rows.iter().map(|r| &r.meta.provider).collect();
    providers.sort_unstable();
    providers.dedup();
    let lookups = providers.iter().map(|p| async move {
        let domain = tokio::time::timeout(DOMAIN_LOOKUP, provider_domain(state, p)).await.ok().flatten();
        ((*p).clone(), domain)
    });
    let domains: std::collections::HashMap<ProviderId, Option<String>> =
        futures_util::future::join_all(lookups).await.into_iter().collect();
    let mut groups: Vec<(crate::domain::TenantId, Group)> = Vec::new();
    for row in rows {
        let held = Held {
            id: row.meta.id,
            provider_name: provider_name(&state.directory, &row.meta.provider),
            provider_domain: domains.get(&row.meta.provider).cloned().flatten(),
            account_login: row.meta.account_login,
            scopes: row.meta.scopes,
            connected_since: row.meta.granted_at,
            last_used: row.meta.last_used_at,
            status: row.meta.status,
        };
        match groups.last_mut() {
            Some((tenant, g)) if *tenant == row.tenant_id => g.connections.push(held),
            _ => {
                let group = Group { tenant_name: state.directory.tenant_name(&row.tenant_id), connections: vec![held] };
                groups.push((row.tenant_id, group));
            }
        }
    }
    Ok(groups.into_iter().map(|(_, g)| g).collect())
}

/// The provider's display name, or its id when it is no longer configured.
pub fn provider_name(directory: &crate::app::Directory, provider: &ProviderId) -> String {
    directory.providers.get(provider).map_or_else(|| provider.to_string(), |p| p.display_name.clone())
}

/// The full authority people sign in at (as on the consent page); `None` when the
/// provider's metadata cannot be had just now.
async fn provider_domain(state: &AppState, provider: &ProviderId) -> Option<String> {
    let p = state.directory.providers.get(provider)?.clone();
    if let Some(spec) = p.credential() {
        return spec.check.as_ref().map(|c| super::connect::authority(&c.url));
    }
    let server = super::remote::provider_server(state, &p).await.ok()?;
    Some(super::connect::authority(&server.authorize_url))
}

#[derive(Debug, thiserror::Error)]
pub enum DisconnectError {
    /// No such connection, or another subject's: the same answer, so that a guess learns
    /// nothing about connections that are not the person's.
    #[error("no such connection of this subject")]
    NotYours,
    #[error(transparent)]
    Fault(#[from] super::Fault),
}
super::fault::wraps_fault!(DisconnectError);

/// Whether `person` may end the connection whose owner is `owner`. The one rule of the
/// page: a person (the subject at one IdP) ends their own connections only, in any tenant.
pub fn may_disconnect(person: &SessionInfo, owner: Option<&Owner>) -> Result<TenantId, DisconnectError> {
    match owner {
        Some(o) if o.subject == person.subject && o.issuer.as_deref() == Some(person.issuer.as_str()) => {
            Ok(o.tenant_id.clone())
        }
        _ => Err(DisconnectError::NotYours),
    }
}

/// Ends one of `person`'s connections, as the admin revoke does.
pub async fn disconnect(state: &AppState, person: &SessionInfo, id: ConnectionId) -> Result<Revoked, DisconnectError> {
    let owner = store::connections::owner_of(&state.pool, id).await?;
    let tenant = may_disconnect(person, owner.as_ref())?;
    let who = (person.issuer.as_str(), &person.subject);
    revoke::revoke_persons(state, &tenant, id, who, BY_SUBJECT, revoke::RevokedBy::Subject)
        .await?
        .ok_or(DisconnectError::NotYours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_person_may_end_their_own_connections_only() {
        use crate::domain::Subject;
        const A: &str = "https://idp-a.example";
        let alice = SessionInfo { subject: Subject::parse("alice").unwrap(), issuer: A.to_owned(), id_hash: [0; 32] };
        let at = |t: &str, i: Option<&str>, s: &str| {
            Some(Owner {
                tenant_id: TenantId::parse(t).unwrap(),
                issuer: i.map(str::to_owned),
                subject: Subject::parse(s).unwrap(),
            })
        };
        let owned = |t: &str, s: &str| at(t, Some(A), s);
        let cases: [(Option<Owner>, Option<&str>); 8] = [
            (owned("acme", "alice"), Some("acme")),
            (owned("beta", "alice"), Some("beta")),
            (owned("acme", "bob"), None),
            (owned("acme", "Alice"), None),
            // Another IdP's alice is someone else; a row without an issuer is nobody's.
            (at("acme", Some("https://idp-b.example"), "alice"), None),
            (at("acme", Some("https://idp-a.example/"), "alice"), None),
            (at("acme", None, "alice"), None),
            (None, None),
        ];
        for (owner, allowed) in cases {
            let got = may_disconnect(&alice, owner.as_ref()).ok();
            assert_eq!(got.as_ref().map(TenantId::as_str), allowed, "{owner:?}");
        }
    }
}
