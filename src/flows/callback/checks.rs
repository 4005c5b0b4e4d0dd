//! The callback's decisions as plain functions of what was read: no database, no
//! provider, no clock of their own. The orchestrator (`mod.rs`) reads, calls these, and
//! acts on the answer; each refusal here has a row in the tables below.

use super::CallbackRefusal;
use crate::crypto;
use crate::domain::{Account, ConnectionStatus, ProviderId, Scopes};
use crate::flows::connect::SessionInfo;
use crate::oauth::callback::CallbackQuery;
use crate::store::{elicitations::ElicitationRow, states::OauthStateRow};
use time::OffsetDateTime;
use url::Url;

/// The longest authorization code taken from a callback.
const MAX_CODE_LEN: usize = 2048;

/// The callback's `state`, if it looks like one of ours (anything else is never looked up).
pub fn raw_state(q: &CallbackQuery) -> Result<&str, CallbackRefusal> {
    q.state.as_deref().filter(|s| crypto::looks_like_token(s)).ok_or(CallbackRefusal::MissingState)
}

/// The callback's `code`: present, not empty, of a sane length.
pub fn code(q: &CallbackQuery) -> Result<&str, CallbackRefusal> {
    q.code.as_deref().filter(|c| !c.is_empty() && c.len() <= MAX_CODE_LEN).ok_or(CallbackRefusal::MissingCode)
}

/// The binding checks of DESIGN.md step 6, on a state that was just consumed: the path's
/// provider, the browser session and subject that started it, the redirect URI.
pub fn state_binding(
    s: &OauthStateRow,
    path_provider: &ProviderId,
    session: &SessionInfo,
    expected_redirect: &Url,
) -> Result<(), CallbackRefusal> {
    if s.provider != *path_provider {
        return Err(CallbackRefusal::ProviderMismatch);
    }
    if !crypto::constant_time_eq(&s.session_hash, &session.id_hash)
        || !crypto::constant_time_eq(s.subject.as_str().as_bytes(), session.subject.as_str().as_bytes())
    {
        return Err(CallbackRefusal::SessionMismatch);
    }
    if s.redirect_uri != expected_redirect.as_str() {
        return Err(CallbackRefusal::RedirectMismatch);
    }
    Ok(())
}

/// A stored state that could not be consumed: another session's, or expired unused.
/// `Ok`: this session's and used (or just consumed by a concurrent request): its
/// elicitation tells whether the result may be shown again.
pub fn unusable_state(old: &OauthStateRow, session: &SessionInfo, now: OffsetDateTime) -> Result<(), CallbackRefusal> {
    if !crypto::constant_time_eq(&old.session_hash, &session.id_hash) {
        return Err(CallbackRefusal::SessionMismatch);
    }
    if old.used_at.is_none() && old.expires_at <= now {
        return Err(CallbackRefusal::StateExpired);
    }
    Ok(())
}

/// The locked elicitation is the one the state was made for.
pub fn elicitation_matches(st: &OauthStateRow, e: &ElicitationRow) -> Result<(), CallbackRefusal> {
    if e.tenant_id != st.tenant_id || e.subject != st.subject || e.provider != st.provider {
        return Err(CallbackRefusal::ElicitationGone);
    }
    Ok(())
}

/// What the provider's `error` answer means.
#[derive(Debug)]
pub enum ProviderAnswer {
    /// `access_denied`: the person declined at the provider.
    Declined,
    /// Any other error: the elicitation stays pending, so the person may try again.
    Refused(CallbackRefusal),
}

/// The provider's `error` (RFC 6749 §4.1.2.1), its code kept to 64 safe characters for
/// the log and the audit row (it is the provider's text, not ours).
pub fn provider_answer(error: &str) -> ProviderAnswer {
    if error == "access_denied" {
        return ProviderAnswer::Declined;
    }
    let code = error.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').take(64).collect();
    ProviderAnswer::Refused(CallbackRefusal::ProviderError(code))
}

/// Account pinning: a held grant (active or needing re-consent) of one upstream account
/// is not replaced by a grant of another, unless the provider allows account changes.
pub fn account_pinning(
    existing: Option<(ConnectionStatus, Option<&str>)>,
    new: Option<&Account>,
    allow_account_change: bool,
) -> Result<(), CallbackRefusal> {
    match (existing, new) {
        (Some((status, Some(old))), Some(new))
            if status != ConnectionStatus::Revoked && old != new.id && !allow_account_change =>
        {
            Err(CallbackRefusal::AccountMismatch)
        }
        _ => Ok(()),
    }
}

/// Scopes as granted: the token response's `scope` when present and well-formed
/// (RFC 6749 §5.1; some providers separate with commas), else what was asked for.
pub fn granted_scopes(response_scope: Option<&str>, asked: &Scopes) -> Scopes {
    let Some(s) = response_scope else { return asked.clone() };
    let parts: Vec<&str> = s.split([' ', ',']).filter(|x| !x.is_empty()).collect();
    Scopes::parse(&parts).unwrap_or_else(|_| asked.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{Subject, TenantId};
    use uuid::Uuid;

    fn now() -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap()
    }

    fn session() -> SessionInfo {
        SessionInfo {
            id_hash: [1; 32],
            subject: Subject::parse("alice").unwrap(),
            issuer: "https://idp.example".into(),
        }
    }

    fn redirect() -> Url {
        Url::parse("https://connect.example/connect/github/callback").unwrap()
    }

    fn state_row() -> OauthStateRow {
        OauthStateRow {
            elicitation_id: crate::domain::ElicitationId::from_uuid(Uuid::nil()),
            session_hash: vec![1; 32],
            tenant_id: TenantId::parse("acme").unwrap(),
            subject: Subject::parse("alice").unwrap(),
            provider: ProviderId::parse("github").unwrap(),
            redirect_uri: redirect().to_string(),
            key_id: "k1".to_owned(),
            sealed: vec![],
            expires_at: now() + time::Duration::minutes(10),
            used_at: None,
        }
    }

    fn query(state: Option<&str>, code: Option<&str>) -> CallbackQuery {
        CallbackQuery { state: state.map(str::to_owned), code: code.map(str::to_owned), ..CallbackQuery::default() }
    }

    #[test]
    fn the_state_binding_refuses_each_mismatch_with_its_reason() {
        let github = ProviderId::parse("github").unwrap();
        let other = |f: fn(&mut OauthStateRow)| {
            let mut s = state_row();
            f(&mut s);
            s
        };
        let cases: [(&str, OauthStateRow, Option<CallbackRefusal>); 6] = [
            ("all bound", state_row(), None),
            (
                "another provider",
                other(|s| s.provider = ProviderId::parse("google").unwrap()),
                Some(CallbackRefusal::ProviderMismatch),
            ),
            ("another session", other(|s| s.session_hash = vec![2; 32]), Some(CallbackRefusal::SessionMismatch)),
            (
                "another subject",
                other(|s| s.subject = Subject::parse("bob").unwrap()),
                Some(CallbackRefusal::SessionMismatch),
            ),
            (
                "another redirect",
                other(|s| s.redirect_uri = "https://evil.example/cb".into()),
                Some(CallbackRefusal::RedirectMismatch),
            ),
            (
                "a redirect one character longer",
                other(|s| s.redirect_uri.push('/')),
                Some(CallbackRefusal::RedirectMismatch),
            ),
        ];
        for (what, row, want) in cases {
            let got = state_binding(&row, &github, &session(), &redirect()).err();
            assert_eq!(got.map(|r| r.code()), want.map(|r| r.code()), "{what}");
        }
    }

    #[test]
    fn an_unusable_state_is_told_apart_by_session_expiry_and_use() {
        let used = |s: &mut OauthStateRow| s.used_at = Some(now() - time::Duration::seconds(5));
        type Case = (&'static str, fn(&mut OauthStateRow), Option<&'static str>);
        let cases: [Case; 5] = [
            ("this session's, used: show the result again", used, None),
            ("another session's", |s| s.session_hash = vec![9; 32], Some("session_mismatch")),
            ("expired, unused", |s| s.expires_at = now(), Some("state_expired")),
            (
                "expired and used: used wins",
                |s| {
                    s.expires_at = now() - time::Duration::minutes(1);
                    s.used_at = Some(now() - time::Duration::minutes(2));
                },
                None,
            ),
            ("neither used nor expired (a concurrent consume)", |_| {}, None),
        ];
        for (what, change, want) in cases {
            let mut row = state_row();
            change(&mut row);
            assert_eq!(unusable_state(&row, &session(), now()).err().map(|r| r.code()), want, "{what}");
        }
    }

    #[test]
    fn only_states_and_codes_of_a_sane_shape_are_taken() {
        let token = "a".repeat(43);
        assert_eq!(raw_state(&query(Some(&token), None)).ok(), Some(token.as_str()));
        for bad in [None, Some(""), Some("short"), Some("not a token with spaces and more than enough length")] {
            assert_eq!(raw_state(&query(bad, None)).err().map(|r| r.code()), Some("missing_state"), "{bad:?}");
        }
        let long = "c".repeat(MAX_CODE_LEN + 1);
        let longest = "c".repeat(MAX_CODE_LEN);
        assert_eq!(code(&query(None, Some(&longest))).ok(), Some(longest.as_str()));
        for bad in [None, Some(""), Some(long.as_str())] {
            assert_eq!(code(&query(None, bad)).err().map(|r| r.code()), Some("missing_code"));
        }
    }

    #[test]
    fn a_provider_error_declines_only_for_access_denied_and_keeps_a_safe_code() {
        assert!(matches!(provider_answer("access_denied"), ProviderAnswer::Declined));
        let cases = [
            ("server_error", "server_error"),
            ("temporarily_unavailable", "temporarily_unavailable"),
            ("<script>alert(1)</script>", "scriptalert1script"),
            ("access_denied ", "access_denied"),
        ];
        for (raw, kept) in cases {
            match provider_answer(raw) {
                ProviderAnswer::Refused(CallbackRefusal::ProviderError(c)) => assert_eq!(c, kept, "{raw}"),
                other => panic!("{raw}: {other:?}"),
            }
        }
        assert_eq!(
            match provider_answer(&"x".repeat(500)) {
                ProviderAnswer::Refused(CallbackRefusal::ProviderError(c)) => c.len(),
                _ => 0,
            },
            64
        );
    }

    #[test]
    fn the_elicitation_must_be_the_states_own() {
        let e = |tenant: &str, subject: &str, provider: &str| ElicitationRow {
            id: crate::domain::ElicitationId::from_uuid(Uuid::nil()),
            tenant_id: TenantId::parse(tenant).unwrap(),
            subject: Subject::parse(subject).unwrap(),
            provider: ProviderId::parse(provider).unwrap(),
            scopes: Scopes::default(),
            status: crate::domain::ElicitationStatus::Pending,
            created_at: now(),
            expires_at: now() + time::Duration::minutes(10),
            completed_at: None,
            connection_id: None,
            cancel_reason: None,
            issuer: Some("https://idp.example".into()),
        };
        let st = state_row();
        assert!(elicitation_matches(&st, &e("acme", "alice", "github")).is_ok());
        for (what, row) in [
            ("tenant", e("other", "alice", "github")),
            ("subject", e("acme", "bob", "github")),
            ("provider", e("acme", "alice", "google")),
        ] {
            assert_eq!(
                elicitation_matches(&st, &row).err().map(|r| r.code()),
                Some("elicitation_not_pending"),
                "{what}"
            );
        }
    }

    #[test]
    fn account_pinning_refuses_only_another_account_over_a_held_grant() {
        let acct = |id: &str| Account { id: id.to_owned(), login: None };
        let (a, b) = (acct("1"), acct("2"));
        // What is held (status, account), the new grant's account, account changes
        // allowed, kept.
        type Case<'a> = (&'a str, Option<(ConnectionStatus, Option<&'a str>)>, Option<&'a Account>, bool, bool);
        let cases: [Case<'_>; 8] = [
            ("a first connection", None, Some(&a), false, true),
            ("the same account again", Some((ConnectionStatus::Active, Some("1"))), Some(&a), false, true),
            (
                "another account over an active grant",
                Some((ConnectionStatus::Active, Some("1"))),
                Some(&b),
                false,
                false,
            ),
            (
                "another account over one needing re-consent",
                Some((ConnectionStatus::NeedsReauth, Some("1"))),
                Some(&b),
                false,
                false,
            ),
            (
                "another account over a revoked grant",
                Some((ConnectionStatus::Revoked, Some("1"))),
                Some(&b),
                false,
                true,
            ),
            (
                "another account where the provider allows it",
                Some((ConnectionStatus::Active, Some("1"))),
                Some(&b),
                true,
                true,
            ),
            ("an old grant without an account", Some((ConnectionStatus::Active, None)), Some(&b), false, true),
            ("a new grant without an account", Some((ConnectionStatus::Active, Some("1"))), None, false, true),
        ];
        for (what, existing, new, allow, ok) in cases {
            let got = account_pinning(existing, new, allow);
            assert_eq!(got.is_ok(), ok, "{what}");
            if let Err(r) = got {
                assert_eq!(r.code(), "account_mismatch", "{what}");
            }
        }
    }

    #[test]
    fn granted_scopes_follow_the_response_when_it_is_well_formed() {
        let asked = Scopes::parse(&["read:user"]).unwrap();
        let cases: [(Option<&str>, &[&str]); 5] = [
            (None, &["read:user"]),
            (Some("repo read:user"), &["read:user", "repo"]),
            (Some("repo,read:user"), &["read:user", "repo"]),
            (Some(""), &[]),
            (Some("bad\u{7}scope"), &["read:user"]),
        ];
        for (response, want) in cases {
            assert_eq!(
                granted_scopes(response, &asked).as_slice(),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{response:?}"
            );
        }
    }
}
