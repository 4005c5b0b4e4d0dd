//! Time as a dependency: what reads "now" for ages and intervals takes a [`Clock`], so a
//! test moves time forward instead of sleeping.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub trait Clock: Send + Sync {
    fn now(&self) -> Instant;

    /// Time since `then` (zero if `then` is in the future).
    fn since(&self, then: Instant) -> Duration {
        self.now().saturating_duration_since(then)
    }

    /// The time of day, for what is scheduled in the database (webhook retries): the real
    /// one, moved forward as far as the clock was.
    fn wall(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc()
    }
}

/// The real clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A clock that moves only when told to (for tests).
#[derive(Debug)]
pub struct ManualClock {
    start: Instant,
    offset: Mutex<Duration>,
}

impl Default for ManualClock {
    fn default() -> Self {
        Self { start: Instant::now(), offset: Mutex::new(Duration::ZERO) }
    }
}

impl ManualClock {
    pub fn advance(&self, by: Duration) {
        let mut o = self.offset.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *o += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.start + *self.offset.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn wall(&self) -> time::OffsetDateTime {
        time::OffsetDateTime::now_utc() + *self.offset.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_advanced() {
        let c = ManualClock::default();
        let t0 = c.now();
        assert_eq!(c.since(t0), Duration::ZERO);
        c.advance(Duration::from_secs(5));
        assert_eq!(c.since(t0), Duration::from_secs(5));
        assert_eq!(c.since(t0 + Duration::from_secs(60)), Duration::ZERO, "a future instant is zero ago");
        let ahead = c.wall() - time::OffsetDateTime::now_utc();
        assert!(ahead > time::Duration::seconds(4) && ahead <= time::Duration::seconds(5), "{ahead}");
    }
}
