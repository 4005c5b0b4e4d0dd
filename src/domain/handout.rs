//! The hand-out as a decision (`POST /v1/token`, DESIGN.md invariant 7): given what is
//! known of a stored connection, what it asked for and when, may its token go out as it
//! is, must it be refreshed first, or can it not serve this request at all? Pure, so the
//! cached path and the database path ask the same question and a table test answers it.

use super::{ConnectionStatus, Scopes};
use time::{Duration, OffsetDateTime};

/// When a stored access token is refreshed before it is handed out
/// (`[refresh] margin_seconds`, `unknown_expiry_refresh_seconds`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshPolicy {
    /// A token expiring within this margin is refreshed first.
    pub margin: Duration,
    /// A token of unknown expiry is refreshed this long after it was issued or last
    /// refreshed, when there is a refresh token to do it with.
    pub unknown_expiry: Duration,
}

impl Default for RefreshPolicy {
    fn default() -> Self {
        Self { margin: Duration::MINUTE, unknown_expiry: Duration::HOUR }
    }
}

impl RefreshPolicy {
    /// Whether a token with these facts needs a refresh before it is handed out.
    pub fn needs_refresh(
        &self,
        access_expires_at: Option<OffsetDateTime>,
        has_refresh_token: bool,
        refreshed_at: Option<OffsetDateTime>,
        now: OffsetDateTime,
    ) -> bool {
        match access_expires_at {
            Some(exp) => exp <= now + self.margin,
            // Unknown expiry: refresh on a schedule when we can, rather than trusting it forever.
            None => has_refresh_token && refreshed_at.is_none_or(|t| t + self.unknown_expiry <= now),
        }
    }
}

/// What the hand-out looks at of a connection, whether it comes from the cache or a row.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionFacts<'a> {
    pub status: ConnectionStatus,
    /// The IdP the connection's subject belongs to.
    pub issuer: Option<&'a str>,
    /// The scopes granted (stored scopes that no longer parse count as none).
    pub scopes: &'a Scopes,
    pub access_expires_at: Option<OffsetDateTime>,
    pub has_refresh_token: bool,
    pub refreshed_at: Option<OffsetDateTime>,
}

/// What a request asks of the connection.
#[derive(Debug, Clone, Copy)]
pub struct HandOutRequest<'a> {
    /// The tenant's IdP now: a connection of another IdP's namesake is not this subject's.
    pub issuer: &'a str,
    /// `None`: whatever the connection has.
    pub scopes: Option<&'a Scopes>,
}

/// The decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandOut {
    /// The token goes out as it is.
    Serve,
    /// The token is near its expiry but there is nothing to refresh it with: it goes out
    /// for the little while it is still valid (never from the cache: the row is read).
    ServeNearExpiry,
    /// Refresh first, then hand out what the refresh stored.
    Refresh,
    /// Expired and nothing to refresh it with: the connection is marked for a new consent.
    Expire,
    /// This connection cannot serve the request (not active, another IdP's subject, too
    /// few scopes): a connect is needed.
    Reconnect,
}

/// Decides the hand-out of a connection for a request at `now`.
pub fn check_handout(
    c: ConnectionFacts<'_>,
    req: HandOutRequest<'_>,
    policy: RefreshPolicy,
    now: OffsetDateTime,
) -> HandOut {
    let covers = match req.scopes {
        None => true,
        Some(want) => c.scopes.covers(want),
    };
    if c.status != ConnectionStatus::Active || c.issuer != Some(req.issuer) || !covers {
        return HandOut::Reconnect;
    }
    if !policy.needs_refresh(c.access_expires_at, c.has_refresh_token, c.refreshed_at, now) {
        HandOut::Serve
    } else if c.has_refresh_token {
        HandOut::Refresh
    } else if c.access_expires_at.is_some_and(|t| t <= now) {
        HandOut::Expire
    } else {
        HandOut::ServeNearExpiry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (status, issuer, granted, expires, refresh token, refreshed at, asked, want)
    type Row<'a> = (
        ConnectionStatus,
        &'a str,
        &'a Scopes,
        Option<OffsetDateTime>,
        bool,
        Option<OffsetDateTime>,
        Option<&'a Scopes>,
        HandOut,
    );

    fn scopes(s: &[&str]) -> Scopes {
        Scopes::parse(s).unwrap()
    }

    #[test]
    fn the_hand_out_decides_by_status_idp_scopes_and_expiry() {
        let now = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let policy = RefreshPolicy { margin: Duration::seconds(60), unknown_expiry: Duration::HOUR };
        let (min, hour) = (Duration::MINUTE, Duration::HOUR);
        let (repo, user, both) = (scopes(&["repo"]), scopes(&["user"]), scopes(&["repo", "user"]));
        let none = Scopes::default();
        use ConnectionStatus::{Active, NeedsReauth, Revoked};
        use HandOut::*;
        // (status, issuer, granted, expires, refresh token, refreshed at, asked, want)
        #[rustfmt::skip]
        let table: &[Row<'_>] = &[
            // Usable as it is.
            (Active, "idp", &both, Some(now + hour), true, None, None, Serve),
            (Active, "idp", &both, Some(now + hour), false, None, Some(&repo), Serve),
            (Active, "idp", &both, Some(now + 2 * min), true, None, Some(&both), Serve),
            // Not this request's: status, IdP, scopes.
            (NeedsReauth, "idp", &both, Some(now + hour), true, None, None, Reconnect),
            (Revoked, "idp", &both, Some(now + hour), true, None, None, Reconnect),
            (Active, "other-idp", &both, Some(now + hour), true, None, None, Reconnect),
            (Active, "idp", &repo, Some(now + hour), true, None, Some(&user), Reconnect),
            (Active, "idp", &none, Some(now + hour), true, None, Some(&repo), Reconnect),
            // A connection with no scopes (a typed credential) serves a request naming none.
            (Active, "idp", &none, Some(now + hour), true, None, None, Serve),
            (Active, "idp", &none, Some(now + hour), false, None, Some(&none), Serve),
            // Inside the margin or expired: refresh when a refresh token is there.
            (Active, "idp", &repo, Some(now + 30 * Duration::SECOND), true, None, None, Refresh),
            (Active, "idp", &repo, Some(now - min), true, None, None, Refresh),
            (Active, "idp", &repo, Some(now + 60 * Duration::SECOND), true, None, None, Refresh),
            // Without one: served while valid, marked for a new consent once expired.
            (Active, "idp", &repo, Some(now + 30 * Duration::SECOND), false, None, None, ServeNearExpiry),
            (Active, "idp", &repo, Some(now), false, None, None, Expire),
            (Active, "idp", &repo, Some(now - hour), false, None, None, Expire),
            // Unknown expiry: refreshed on schedule where it can be, else trusted.
            (Active, "idp", &repo, None, true, Some(now - 5 * min), None, Serve),
            (Active, "idp", &repo, None, true, Some(now - 61 * min), None, Refresh),
            (Active, "idp", &repo, None, true, None, None, Refresh),
            (Active, "idp", &repo, None, false, Some(now - 48 * hour), None, Serve),
        ];
        for (i, &(status, issuer, granted, expires, has_refresh, refreshed_at, asked, want)) in table.iter().enumerate()
        {
            let facts = ConnectionFacts {
                status,
                issuer: Some(issuer),
                scopes: granted,
                access_expires_at: expires,
                has_refresh_token: has_refresh,
                refreshed_at,
            };
            let got = check_handout(facts, HandOutRequest { issuer: "idp", scopes: asked }, policy, now);
            assert_eq!(got, want, "row {i}: {facts:?} asked {asked:?}");
        }
        // A connection made before issuers were recorded is no one's now.
        let facts = ConnectionFacts {
            status: Active,
            issuer: None,
            scopes: &repo,
            access_expires_at: Some(now + hour),
            has_refresh_token: true,
            refreshed_at: None,
        };
        assert_eq!(check_handout(facts, HandOutRequest { issuer: "idp", scopes: None }, policy, now), Reconnect);
    }
}
