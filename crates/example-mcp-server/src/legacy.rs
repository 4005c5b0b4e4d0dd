//! 2025-11-25 has no `requestState`: after a `-32042` the client simply repeats the call.
//! To reconcile that retry with the elicitation it answered (and so not prompt again
//! after a decline), the server remembers, per MCP session, subject and tool call, the
//! elicitation it handed out. The entry is taken by the next identical call. Bounded and
//! in memory: 2025-11-25 sessions live in one instance anyway (or in rmcp's session store).

use mcp_connect_client::ElicitationId;
use std::collections::HashMap;
use std::sync::Mutex;
use time::OffsetDateTime;

const CAPACITY: usize = 10_000;

/// (MCP session id, subject, tool name, digest of the arguments).
pub type CallKey = (String, String, String, [u8; 32]);

#[derive(Default)]
pub struct PendingElicitations {
    map: Mutex<HashMap<CallKey, (ElicitationId, OffsetDateTime)>>,
}

impl PendingElicitations {
    /// Remembers the elicitation handed out for `key` until `expires_at`. When full even
    /// after dropping expired entries, remembers nothing: the retry then starts anew.
    pub fn remember(&self, key: CallKey, id: ElicitationId, expires_at: OffsetDateTime, now: OffsetDateTime) {
        let Ok(mut map) = self.map.lock() else { return };
        if map.len() >= CAPACITY {
            map.retain(|_, (_, exp)| *exp > now);
        }
        if map.len() < CAPACITY {
            map.insert(key, (id, expires_at));
        }
    }

    /// The elicitation of an earlier round of this call, if still current; forgets it.
    pub fn take(&self, key: &CallKey, now: OffsetDateTime) -> Option<ElicitationId> {
        let (id, exp) = self.map.lock().ok()?.remove(key)?;
        (exp > now).then_some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> CallKey {
        ("session-1".into(), s.into(), "whoami_on".into(), [0u8; 32])
    }

    #[test]
    fn an_entry_is_taken_once_and_only_by_the_same_call() {
        let p = PendingElicitations::default();
        let now = OffsetDateTime::now_utc();
        let id = ElicitationId::parse("e-1").unwrap();
        p.remember(key("alice"), id.clone(), now + time::Duration::minutes(5), now);
        assert_eq!(p.take(&key("bob"), now), None);
        assert_eq!(p.take(&key("alice"), now), Some(id));
        assert_eq!(p.take(&key("alice"), now), None);
    }

    #[test]
    fn an_expired_entry_is_not_returned() {
        let p = PendingElicitations::default();
        let now = OffsetDateTime::now_utc();
        p.remember(key("alice"), ElicitationId::parse("e-1").unwrap(), now, now);
        assert_eq!(p.take(&key("alice"), now), None);
    }
}
