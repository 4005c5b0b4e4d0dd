//! The events webhooks report, and their payloads. A payload names ids, the subject, the
//! provider, the upstream account login, the time and a reason: never a token, a code or a
//! secret (no field here could hold one).

use crate::domain::{ProviderId, Subject, TenantId};
use time::OffsetDateTime;
use uuid::Uuid;

/// The kinds of event an endpoint can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub enum EventKind {
    /// A person connected an account for the first time (or again after a revocation).
    #[serde(rename = "connection.created")]
    ConnectionCreated,
    /// A person connected again while a connection was held (`active` or `needs_reauth`):
    /// its grant was replaced.
    #[serde(rename = "connection.reconnected")]
    ConnectionReconnected,
    /// The provider refused the refresh token (`invalid_grant`, e.g. the person revoked the
    /// app at the provider): the connection needs a new link.
    #[serde(rename = "connection.needs_reauth")]
    ConnectionNeedsReauth,
    /// The connection was ended, `by` an operator (`admin`), the person (`subject`) or
    /// off-boarding (`offboarding`).
    #[serde(rename = "connection.revoked")]
    ConnectionRevoked,
    /// The person declined on our consent page (`by: consent_page`) or at the provider
    /// (`by: provider`, its `access_denied`).
    #[serde(rename = "elicitation.declined")]
    ElicitationDeclined,
    /// A link passed its deadline unused.
    #[serde(rename = "elicitation.expired")]
    ElicitationExpired,
    /// A link was closed: by the MCP client (`by: mcp_client`, `reason` its answer
    /// `cancel` or `decline`), an operator (`by: admin`), or with a revocation.
    #[serde(rename = "elicitation.cancelled")]
    ElicitationCancelled,
    /// A kill switch was set or lifted; a global one (`tenant: null`) reaches every tenant.
    #[serde(rename = "kill_switch.changed")]
    KillSwitchChanged,
}

impl EventKind {
    pub const ALL: &[EventKind] = &[
        EventKind::ConnectionCreated,
        EventKind::ConnectionReconnected,
        EventKind::ConnectionNeedsReauth,
        EventKind::ConnectionRevoked,
        EventKind::ElicitationDeclined,
        EventKind::ElicitationExpired,
        EventKind::ElicitationCancelled,
        EventKind::KillSwitchChanged,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            EventKind::ConnectionCreated => "connection.created",
            EventKind::ConnectionReconnected => "connection.reconnected",
            EventKind::ConnectionNeedsReauth => "connection.needs_reauth",
            EventKind::ConnectionRevoked => "connection.revoked",
            EventKind::ElicitationDeclined => "elicitation.declined",
            EventKind::ElicitationExpired => "elicitation.expired",
            EventKind::ElicitationCancelled => "elicitation.cancelled",
            EventKind::KillSwitchChanged => "kill_switch.changed",
        }
    }

    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.iter().copied().find(|k| k.as_str() == s)
    }
}

/// What an event is about. Fields that do not apply are `null`, so every payload has the
/// same shape.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct EventData {
    /// The tenant (`null`: a global kill switch).
    #[schema(example = "acme")]
    pub tenant: Option<String>,
    /// The MCP subject.
    pub subject: Option<String>,
    /// The issuer of the identity provider whose `sub` the subject is: the person is the
    /// pair (`issuer`, `subject`), so two tenants' IdPs may each have an `alice` (`null`:
    /// no subject, or a row written before issuers were recorded).
    #[schema(example = "https://login.acme.example")]
    pub issuer: Option<String>,
    #[schema(example = "github")]
    pub provider: Option<String>,
    pub connection_id: Option<Uuid>,
    pub elicitation_id: Option<Uuid>,
    /// The upstream account's login, where the provider named one.
    pub account_login: Option<String>,
    /// Who did it: `admin`, `subject`, `offboarding`, `consent_page`, `provider`,
    /// `mcp_client`, `cli`, `service`.
    pub by: Option<String>,
    /// Why, as a stable word: e.g. `connected`, `invalid_grant`, `revoked`, `declined`,
    /// `expired`, `cancel`, `decline`, `revocation`, `no_token_handouts`, `off`.
    pub reason: String,
    /// The scopes granted (connection events).
    pub scopes: Option<Vec<String>>,
    /// What the provider said to our revocation (`connection.revoked`): `revoked`,
    /// `no_revocation_endpoint` or `failed` (the reason is in the audit trail).
    pub provider_result: Option<String>,
    /// The tenant operator's note on its kill switch (`null` for a global one).
    pub note: Option<String>,
}

/// The body of a delivery: `{"id", "type", "timestamp", "data"}`. `id` is also the
/// `webhook-id` header and stays the same on every retry (receivers drop duplicates by it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[schema(example = json!({
    "id": "evt_0193a0c4e1b27c5e8f0a1b2c3d4e5f60",
    "type": "connection.revoked",
    "timestamp": "2026-12-01T14:03:00Z",
    "data": {
        "tenant": "acme", "subject": "user-42", "issuer": "https://login.acme.example", "provider": "github",
        "connection_id": "0193a0c4-e1b2-7c5e-8f0a-1b2c3d4e5f60", "elicitation_id": null,
        "account_login": "octocat", "by": "subject", "reason": "revoked",
        "scopes": ["repo"], "provider_result": "revoked", "note": null
    }
}))]
pub struct Payload {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: EventKind,
    #[serde(with = "time::serde::rfc3339")]
    pub timestamp: OffsetDateTime,
    pub data: EventData,
}

/// An event to record: its kind, the tenant whose endpoints hear it (`None`: every
/// tenant's), the stream it is ordered in, and its data.
#[derive(Debug, Clone)]
pub struct Event {
    pub kind: EventKind,
    pub tenant: Option<TenantId>,
    pub stream: String,
    pub data: EventData,
}

impl Event {
    /// An event of one subject's connection to one provider, ordered with every other of
    /// that connection (and of the links that lead to it).
    pub fn connection(
        kind: EventKind,
        tenant: &TenantId,
        subject: &Subject,
        provider: &ProviderId,
        data: EventData,
    ) -> Self {
        Self {
            kind,
            tenant: Some(tenant.clone()),
            // The subject last: tenant and provider ids hold no `/`, so the key is unique.
            stream: format!("conn/{tenant}/{provider}/{subject}"),
            data: EventData {
                tenant: Some(tenant.to_string()),
                subject: Some(subject.to_string()),
                provider: Some(provider.to_string()),
                ..data
            },
        }
    }

    /// A kill switch changed (`tenant: None`: the global one, whose operator's note is not
    /// sent: it was written for the operators of every tenant, not to each).
    pub fn kill_switch(
        tenant: Option<&TenantId>,
        provider: &ProviderId,
        mode: &str,
        by: &str,
        note: Option<&str>,
    ) -> Self {
        let note = if tenant.is_some() { note } else { None };
        Self {
            kind: EventKind::KillSwitchChanged,
            tenant: tenant.cloned(),
            stream: format!("kill/{}/{provider}", tenant.map_or("*", TenantId::as_str)),
            data: EventData {
                tenant: tenant.map(ToString::to_string),
                provider: Some(provider.to_string()),
                by: Some(by.to_owned()),
                reason: mode.to_owned(),
                note: note.map(str::to_owned),
                ..EventData::default()
            },
        }
    }

    /// The body, under a new id, at `now`.
    pub fn payload(&self, id: Uuid, now: OffsetDateTime) -> Payload {
        Payload {
            id: format!("evt_{}", id.simple()),
            kind: self.kind,
            timestamp: now.replace_nanosecond(0).unwrap_or(now),
            data: self.data.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_named_as_documented_and_parse_back() {
        for k in EventKind::ALL {
            let json = serde_json::to_value(k).unwrap();
            assert_eq!(json, serde_json::json!(k.as_str()));
            assert_eq!(EventKind::parse(k.as_str()), Some(*k));
        }
        assert_eq!(EventKind::parse("connection.*"), None);
        assert_eq!(EventKind::parse("Connection.Created"), None);
    }

    #[test]
    fn streams_keep_subjects_apart_and_payloads_have_one_shape() {
        let (acme, github) = (TenantId::parse("acme").unwrap(), ProviderId::parse("github").unwrap());
        let (ab, b) = (Subject::parse("a/b").unwrap(), Subject::parse("b").unwrap());
        let a = Event::connection(EventKind::ConnectionRevoked, &acme, &ab, &github, EventData::default());
        let b = Event::connection(EventKind::ConnectionRevoked, &acme, &b, &github, EventData::default());
        assert_ne!(a.stream, b.stream);
        assert_eq!(a.stream, "conn/acme/github/a/b");
        let global = Event::kill_switch(None, &github, "no_token_handouts", "cli", Some("incident"));
        assert_eq!(global.stream, "kill/*/github");
        assert_eq!(global.data.note, None, "a global switch's note stays with the operators");
        let own = Event::kill_switch(Some(&acme), &github, "off", "admin", Some("done"));
        assert_eq!(own.data.note.as_deref(), Some("done"));
        let p = serde_json::to_value(global.payload(Uuid::nil(), OffsetDateTime::UNIX_EPOCH)).unwrap();
        assert_eq!(p["type"], "kill_switch.changed");
        assert_eq!(p["id"], "evt_00000000000000000000000000000000");
        assert_eq!(p["timestamp"], "1970-01-01T00:00:00Z");
        assert_eq!(p["data"]["tenant"], serde_json::Value::Null);
        let keys: Vec<_> = p["data"].as_object().unwrap().keys().cloned().collect();
        let other = serde_json::to_value(a.payload(Uuid::nil(), OffsetDateTime::UNIX_EPOCH)).unwrap();
        let other_keys: Vec<_> = other["data"].as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys, other_keys, "every payload has the same fields");
    }
}
