//! "Token handed out" audit, aggregated off the request path: a hand-out only counts itself
//! into the row of its instance, connection, API key and minute, held in memory (56 bytes
//! a row, `table`). The connection's tenant, subject, provider and issuer are filled in when it is
//! written: from the lookup cache's entry, which the row holds a reference to when every
//! use it counts came with that person's entry and [`Bounds::held_bytes`] had room
//! (`store::connections::packed`), or else from the connection's row. A call through the
//! proxy counts itself the same way, into a row of its own kind (`proxied_calls`) that
//! also names its method class and status class. A writer task
//! writes each minute's rows once that minute has closed (checked every second), spread
//! over the [`SPREAD`] after it (a minute's 90,000 rows written at once held a database
//! core for seconds: the half-rate p99 spikes of issue 46), and everything at once when
//! asked to drain (shutdown). A row is written once and never updated: the trail says who
//! used which connection, through which key, to the minute, and how often, at a fraction
//! of one row per hand-out.
//!
//! Rows are never dropped while the process lives: a failed write is retried (backing off
//! up to 5 s) until it succeeds, under the same batch id, so that a batch whose commit went
//! through unseen is not written twice (`store::audit::insert_handouts_paced`). Memory is
//! bounded ([`Bounds`], from the connections the instance is sized for): when the rows of
//! the open minute pass [`Bounds::early`] (a minute in which more connections were used on
//! this instance than its lookup cache holds, and at least 100,000) they are closed early,
//! so that minute then has two rows for a connection and key. When [`Bounds::capacity`]
//! rows wait (Postgres slow or unreachable for long), the rows waiting are folded into one
//! per connection, key and class, each spanning the minutes it covers (coarser, counted in
//! [`FOLDED`]; its `first_at` and `last_at` still say when), at most once a tick; only when
//! that frees too little (as many distinct connections and keys waiting as the capacity)
//! does a use that needs a new row wait for room, counted in [`QUEUE_WAIT`]. A wall clock
//! that steps back can likewise split a minute into two rows. None of it breaks the trail:
//! each row is a count of distinct hand-outs.
//!
//! Marking connections used (`last_used_at`, renewed at most every ten minutes; between
//! marks the last use is read from these rows) is a second task's job, told of a
//! connection the first time it is handed out in a minute, so that those row updates never
//! hold up the audit (or, through a full queue, the lookups).

use crate::domain::{ApiKeyId, ConnectionId, MethodClass, ProxiedCall, StatusClass};
use crate::store::{self, Db, audit::HandoutRow, connections::packed::PackedConnection};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use time::OffsetDateTime;
use tokio::sync::{Notify, mpsc};
use uuid::Uuid;

mod table;
use table::{Row, Table};

/// Rows per transaction (one WAL flush), written [`store::audit::CHUNK`] at a time.
const BATCH: usize = 2000;
/// Rows of the open minute past which it is closed (and written) before its end, at least
/// ([`Bounds::early`]).
pub const EARLY: usize = 100_000;
/// Rows waiting (open, closed and not yet written, or being written) past which a row
/// more folds them, at least ([`Bounds::capacity`]): about 56 bytes a row, 22 MB (and the
/// open minutes' indexes); a closed minute keeps its rows until its last is written, so
/// partly written ones can hold up to about twice that.
pub const CAPACITY: usize = 400_000;
/// The cache entries the rows waiting may keep alive, in bytes, at least
/// ([`Bounds::held_bytes`], [`PackedConnection::footprint`]). Usually the cache holds the
/// same entries and they cost nothing more; but one the cache lets go of (changed, idle,
/// the cache emptied when its listener is lost) lives on until its row is written. Past
/// this a row names no holder (it is named from the connection's row when written); a
/// fold, and a failed write, let go of them. Each row counts its entry whole, though rows
/// of one connection (minutes, proxied calls) share it: memory stays under this, and rows
/// fall back to reading sooner than needed.
pub const HELD_BYTES: usize = 128 << 20;
/// [`Bounds::held_bytes`] per connection the instance is sized for: two minutes of rows,
/// each keeping an entry of up to 320 bytes (an opaque token and short ids; the bench's
/// are 250-300).
const HELD_PER_CONNECTION: usize = 640;
/// The most rows an open minute may have, whatever the cache holds: 7/8 of 2^21, the most
/// an index of 2^21 slots takes (rows of 56 bytes, slots of 5: 113 MB). It bounds the
/// rest: at most 7,340,032 rows waiting (411 MB of rows) and 1.1 GiB of entries held.
const MAX_EARLY: usize = 1_835_008;

/// How much the rows waiting may hold, from the connections the instance is sized for
/// (`[cache] capacity`, the lookup cache's: as many may be used in a minute). A minute in
/// which each of them is used through one key is one row each; with the open minute
/// closed at a fixed 100,000 rows, an instance of a million connections wrote a row for
/// nearly every hand-out (580,257 rows for 650,588 hand-outs in the benchmark, against
/// about one for three a minute held whole), and its writer fell behind at saturation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Rows of the open minute past which it is closed early (that minute then has two
    /// rows for a connection and key).
    early: usize,
    /// Rows waiting past which a row more folds them: four minutes' worth.
    capacity: usize,
    /// Bytes of cache entries the rows waiting may keep alive.
    held_bytes: usize,
}

impl Bounds {
    /// For an instance sized for `connections`: never below [`EARLY`], [`CAPACITY`] and
    /// [`HELD_BYTES`], nor above [`MAX_EARLY`] connections' worth.
    pub fn for_connections(connections: usize) -> Self {
        let early = connections.clamp(EARLY, MAX_EARLY);
        Self { early, capacity: early * (CAPACITY / EARLY), held_bytes: (early * HELD_PER_CONNECTION).max(HELD_BYTES) }
    }
}

impl Default for Bounds {
    fn default() -> Self {
        Self::for_connections(0)
    }
}
/// How often the writer looks for closed minutes.
const TICK: Duration = Duration::from_secs(1);
/// A closed minute's rows are written within this long after it closes, a share each tick.
pub const SPREAD: Duration = Duration::from_secs(40);
/// Between statements of a batch (the timer's resolution: 1-2 ms).
const PAUSE: Duration = Duration::from_millis(1);
/// A connection's last-use mark is renewed at most this often (`store::connections::
/// touch_connections`); between marks its last use is read from the audit rows.
const TOUCH_EVERY: Duration = Duration::from_secs(600);

/// Metrics (catalogue: `telemetry::metrics`).
pub const QUEUE_DEPTH: &str = "mcp_connect_handout_queue_depth";
pub const QUEUE_WAIT: &str = "mcp_connect_handout_queue_wait_seconds";
pub const BATCH_FAILURES: &str = "mcp_connect_handout_batch_failures_total";
pub const FOLDED: &str = "mcp_connect_handout_rows_folded_total";

/// What time it is, for the minutes (tests move it).
pub type WallClock = Arc<dyn Fn() -> OffsetDateTime + Send + Sync>;

pub fn system_wall_clock() -> WallClock {
    Arc::new(OffsetDateTime::now_utc)
}

/// The hand-outs of one connection through one API key within a minute (times in Unix
/// microseconds), as taken out to be written; a minute keeps it and its key as one
/// 56-byte [`Row`], so that a minute in which 100,000 connections are used holds about
/// 5.6 MB and an index of 0.7 MB (and the cache entries it names, which the cache holds
/// anyway while they are in use).
#[derive(Clone)]
struct Tally {
    count: i32,
    first_us: i64,
    last_us: i64,
    /// The connection as cached, when every use counted came with that person's entry
    /// (the same id, key and issuer; a refreshed entry counts as the same) and
    /// [`Bounds::held_bytes`] had room: names who holds it when the row is written. `None`
    /// (named from the connection's row then): a use read from the database or with
    /// another person's entry, past the budget, folded, or after a failed write.
    holder: Option<PackedConnection>,
}

/// What a row counts: hand-outs (0), or proxied calls of one method and status class
/// (1 + method × 6 + status), a byte so that the rows waiting stay small.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Use(u8);

impl Use {
    const HAND_OUT: Use = Use(0);

    fn proxied(call: ProxiedCall) -> Use {
        let method = u8::from(call.method == MethodClass::Write);
        let status = StatusClass::ALL.iter().position(|s| *s == call.status).unwrap_or(0) as u8;
        Use(1 + method * 6 + status)
    }

    fn call(self) -> Option<ProxiedCall> {
        let code = self.0.checked_sub(1)?;
        let method = if code / 6 == 0 { MethodClass::Read } else { MethodClass::Write };
        Some(ProxiedCall { method, status: StatusClass::ALL[usize::from(code % 6)] })
    }
}

/// A row's key within its minute: connection, API key (its bits), what it counts.
type RowKey = (Uuid, u64, Use);

/// The rows waiting: open by minute (Unix time / 60), then [`RowKey`]; closed ones the
/// writer has not taken yet.
#[derive(Default)]
struct Minutes {
    by_minute: BTreeMap<i64, Table>,
    /// Rows in `by_minute`.
    rows: usize,
    /// Rows of closed minutes, oldest first, to be written by `due`: each minute's rows as
    /// they were open, without their index, taken from in place (copied into a queue, a
    /// minute's rows were held twice while they were written: 6 MB more at 100,000 rows).
    closed: VecDeque<(i64, Vec<Row>)>,
    /// Rows in `closed`.
    closed_rows: usize,
    /// Rows the last minute closed had: the next opens with room for as many (growing a
    /// map holds its old table and its new one at once).
    last_minute_rows: usize,
    due: Option<Instant>,
    /// The last fold: at most one a tick (a fold reads every row waiting).
    folded_at: Option<Instant>,
    /// Bytes of the holders kept by rows here and by rows taken and not yet written (at
    /// most `bounds.held_bytes`).
    held: usize,
    bounds: Bounds,
}

/// A row taken out of [`Minutes`], waiting to be written.
type Taken = (i64, RowKey, Tally);

/// A holder for a row, if `budget` has room for it (counted into `held`).
fn hold(held: &mut usize, budget: usize, holder: Option<&PackedConnection>) -> Option<PackedConnection> {
    let h = holder?;
    let after = *held + h.footprint();
    (after <= budget).then(|| {
        *held = after;
        h.clone()
    })
}

/// Lets go of the rows' holders; the bytes they were counted for in `held`.
fn let_go<'a>(holders: impl IntoIterator<Item = &'a mut Option<PackedConnection>>) -> usize {
    holders.into_iter().map(|h| h.take().map_or(0, |h| h.footprint())).sum()
}

fn micros(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1_000).unwrap_or(i64::MAX)
}

fn from_micros(us: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1_000).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// A minute as the rows key it: Unix time / 60.
fn minute_of(t: OffsetDateTime) -> i64 {
    t.unix_timestamp().div_euclid(60)
}

fn minute_of_us(us: i64) -> i64 {
    us.div_euclid(60_000_000)
}

impl Minutes {
    /// Rows waiting here: open, and closed not yet taken.
    fn waiting(&self) -> usize {
        self.rows + self.closed_rows
    }

    /// Closes one row of its own (one that counts no more, or that a fold kept apart).
    fn close_one(&mut self, (minute, key, t): Taken) {
        self.closed.push_back((minute, vec![Row::new(key, t)]));
        self.closed_rows += 1;
    }

    /// Counts a use at `now`; true when it opened a row.
    fn add(&mut self, now: OffsetDateTime, key: RowKey, holder: Option<&PackedConnection>) -> bool {
        let us = micros(now);
        let room = self.last_minute_rows;
        let rows = self.by_minute.entry(minute_of(now)).or_insert_with(|| Table::with_capacity(room));
        match rows.get_mut(&key) {
            Some(t) => {
                if t.count == i32::MAX {
                    // A row that counts no more (a folded one, after days): closed, and a
                    // new one opened.
                    let holder = hold(&mut self.held, self.bounds.held_bytes, holder);
                    let full =
                        Tally { count: t.count, first_us: t.first_us, last_us: t.last_us, holder: t.holder.take() };
                    (t.count, t.first_us, t.last_us, t.holder) = (1, us, us, holder);
                    self.close_one((minute_of(now), key, full));
                    return true;
                }
                t.count += 1;
                t.first_us = t.first_us.min(us);
                t.last_us = t.last_us.max(us);
                // A row names a holder only if every use it counts came with that one (the
                // same person: a re-connect through another IdP keeps the connection's id).
                if t.holder.as_ref() != holder {
                    self.held = self.held.saturating_sub(let_go([&mut t.holder]));
                }
                false
            }
            None => {
                let holder = hold(&mut self.held, self.bounds.held_bytes, holder);
                rows.insert_new(Row::new(key, Tally { count: 1, first_us: us, last_us: us, holder }));
                self.rows += 1;
                true
            }
        }
    }

    /// Whether the open minute has as many rows as it may (the writer closes it then).
    fn past_early(&self) -> bool {
        self.rows >= self.bounds.early
    }

    /// Whether `now`'s minute has a row for `key`.
    fn has(&self, now: OffsetDateTime, key: &RowKey) -> bool {
        self.by_minute.get(&minute_of(now)).is_some_and(|rows| rows.get(key).is_some())
    }

    /// Closes the minutes before `now`'s (all minutes when `all`): their rows wait for the
    /// writer, to be written within [`SPREAD`].
    fn close(&mut self, now: OffsetDateTime, all: bool) {
        let open = minute_of(now);
        let keep = if all { BTreeMap::new() } else { self.by_minute.split_off(&open) };
        let closed = std::mem::replace(&mut self.by_minute, keep);
        if closed.is_empty() {
            return;
        }
        for (minute, rows) in closed {
            self.rows -= rows.len();
            self.closed_rows += rows.len();
            // A folded minute holds up to the capacity: room for that many is not asked again.
            self.last_minute_rows = rows.len().min(self.bounds.early);
            self.closed.push_back((minute, rows.into_rows()));
        }
        self.due = Some(Instant::now() + SPREAD);
    }

    /// The closed rows to write now: all of them when `all` or when they are due, else
    /// an even share of what is left until they are (a batch at least: a quiet minute's
    /// rows go at once).
    fn take(&mut self, all: bool) -> Vec<Taken> {
        let ticks = self.due.map_or(0, |due| due.saturating_duration_since(Instant::now()).as_secs());
        let left = self.closed_rows;
        let share = if all || ticks <= 1 { left } else { left.div_ceil(ticks as usize) };
        let n = share.max(BATCH).min(left);
        let mut taken = Vec::with_capacity(n);
        while taken.len() < n {
            let Some((minute, rows)) = self.closed.front_mut() else { break };
            let minute = *minute;
            let want = n - taken.len();
            // From the end: the rest stays where it is.
            let from = rows.len().saturating_sub(want);
            taken.extend(rows.drain(from..).map(|row| {
                let (key, t) = row.into_parts();
                (minute, key, t)
            }));
            if rows.is_empty() {
                self.closed.pop_front();
            }
        }
        self.closed_rows -= taken.len();
        taken
    }

    /// Folds every row waiting here (open and closed) into one per [`RowKey`] in `now`'s
    /// minute, each spanning the uses it counts; the rows it merged away. The other tables
    /// are merged into the largest, each let go of once merged, instead of into a new table
    /// with room for every row waiting beside them all (at the largest bounds 411 MB more
    /// while Postgres is away). Where most rows merge (the same connections minute after
    /// minute), the largest table grows little; where few do, it grows to about the size
    /// the new table had.
    fn fold(&mut self, now: OffsetDateTime) -> usize {
        let before = self.waiting();
        let mut tables: Vec<Vec<Row>> = std::mem::take(&mut self.by_minute)
            .into_values()
            .map(Table::into_rows)
            .chain(self.closed.drain(..).map(|(_, rows)| rows))
            .collect();
        let largest = (0..tables.len()).max_by_key(|&i| tables[i].len());
        let mut merged = Table::from_rows(largest.map(|i| tables.swap_remove(i)).unwrap_or_default());
        // The entries the rows held go (memory first): folded rows, and any use counted
        // into them later, are named from the connection's row when written.
        let mut released = let_go(merged.rows_mut().map(|r| &mut r.holder));
        // Rows whose counts together pass what a row holds stay rows of their own.
        let mut apart = Vec::new();
        for rows in tables {
            for mut row in rows {
                released += let_go([&mut row.holder]);
                match merged.get_mut(&row.key()) {
                    Some(m) => match m.count.checked_add(row.count) {
                        Some(count) => {
                            m.count = count;
                            m.first_us = m.first_us.min(row.first_us);
                            m.last_us = m.last_us.max(row.last_us);
                        }
                        None => {
                            let (key, t) = row.into_parts();
                            apart.push((minute_of_us(t.first_us), key, t));
                        }
                    },
                    None => merged.insert_new(row),
                }
            }
        }
        // Most of the rows may have merged away, and the table may now wait closed for as
        // long as the database is away.
        merged.shrink_to_fit();
        self.held = self.held.saturating_sub(released);
        self.rows = merged.len();
        self.closed_rows = 0;
        for row in apart {
            self.close_one(row);
        }
        self.by_minute.insert(minute_of(now), merged);
        before - self.waiting()
    }
}

/// The holder only if it is `connection`'s: a row names who holds the connection it counts,
/// never another's (the connection's row names it then).
fn holder_of(connection: ConnectionId, holder: Option<&PackedConnection>) -> Option<&PackedConnection> {
    holder.filter(|h| h.id() == connection)
}

fn handout_row((minute, (connection_id, key, what), t): &Taken) -> HandoutRow {
    // A folded row spans minutes: it is the row of the minute of its first use.
    let minute = (*minute).min(minute_of_us(t.first_us));
    HandoutRow {
        minute: from_micros(minute.saturating_mul(60_000_000)),
        connection_id: *connection_id,
        api_key_id: ApiKeyId::from_bits(*key),
        proxied: what.call(),
        count: t.count,
        first_at: from_micros(t.first_us),
        last_at: from_micros(t.last_us),
        holder: t.holder.clone(),
    }
}

struct Shared {
    minutes: Mutex<Minutes>,
    /// Rows taken out of `minutes` and not yet written.
    in_flight: AtomicUsize,
    /// Write every row now, the open minute's too (drain).
    write_all: AtomicBool,
    /// Close the open minute now (it passed [`Bounds::early`] rows); written spread as any.
    close_early: AtomicBool,
    wake: Notify,
    /// The writer took rows out.
    room: Notify,
    clock: WallClock,
    instance: String,
}

impl Shared {
    /// Lets go of the holders of rows taken out of `minutes` (written, or kept after a
    /// failed write), uncounting them.
    fn let_go<'a>(&self, rows: impl IntoIterator<Item = &'a mut Tally>) {
        let held = let_go(rows.into_iter().map(|t| &mut t.holder));
        if held > 0
            && let Ok(mut m) = self.minutes.lock()
        {
            m.held = m.held.saturating_sub(held);
        }
    }
}

#[derive(Clone)]
pub struct HandoutAudit {
    shared: Arc<Shared>,
    touch: mpsc::UnboundedSender<Uuid>,
}

impl HandoutAudit {
    /// Starts the writer and the toucher. `instance` names this process in the rows.
    pub fn spawn(pool: Db, instance: String, clock: WallClock, bounds: Bounds) -> Self {
        let shared = Arc::new(Shared {
            minutes: Mutex::new(Minutes { bounds, ..Minutes::default() }),
            in_flight: AtomicUsize::new(0),
            write_all: AtomicBool::new(false),
            close_early: AtomicBool::new(false),
            wake: Notify::new(),
            room: Notify::new(),
            clock,
            instance,
        });
        // Unbounded, but it carries an id only when a connection's row of a minute opens,
        // and the toucher takes them off far faster than that.
        let (touch, touch_rx) = mpsc::unbounded_channel();
        tokio::spawn(writer(pool.clone(), shared.clone()));
        tokio::spawn(toucher(pool, touch_rx));
        Self { shared, touch }
    }

    /// [`Self::spawn`] with another bound on the rows waiting (tests).
    pub fn spawn_with_capacity(pool: Db, instance: String, clock: WallClock, capacity: usize) -> Self {
        Self::spawn(pool, instance, clock, Bounds { capacity: capacity.max(1), ..Bounds::default() })
    }

    pub fn instance(&self) -> &str {
        &self.shared.instance
    }

    /// Counts a hand-out of `connection` through `api_key` into this minute's row;
    /// `holder`: the connection as cached, when it was served from the lookup cache.
    pub async fn record(&self, connection: ConnectionId, api_key: &ApiKeyId, holder: Option<&PackedConnection>) {
        self.count((connection.as_uuid(), api_key.to_bits(), Use::HAND_OUT), holder_of(connection, holder)).await;
    }

    /// Counts a call through the proxy with `connection`'s credential into this minute's
    /// row of its method and status class.
    pub async fn record_proxied(
        &self,
        connection: ConnectionId,
        api_key: &ApiKeyId,
        call: ProxiedCall,
        holder: Option<&PackedConnection>,
    ) {
        self.count((connection.as_uuid(), api_key.to_bits(), Use::proxied(call)), holder_of(connection, holder)).await;
    }

    /// [`Self::record_proxied`] if there is room now, without waiting; `false` when the
    /// rows waiting are at their bound (nothing counted).
    pub fn try_record_proxied(
        &self,
        connection: ConnectionId,
        api_key: &ApiKeyId,
        call: ProxiedCall,
        holder: Option<&PackedConnection>,
    ) -> bool {
        self.try_count((connection.as_uuid(), api_key.to_bits(), Use::proxied(call)), holder_of(connection, holder))
    }

    async fn count(&self, key: RowKey, holder: Option<&PackedConnection>) {
        // The common case: there is room, and nothing to register for.
        if self.try_count(key, holder) {
            return;
        }
        let waited = Instant::now();
        loop {
            // Registered before looking again, so that room made in between is not missed.
            let room = self.shared.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if self.try_count(key, holder) {
                metrics::histogram!(QUEUE_WAIT).record(waited.elapsed().as_secs_f64());
                return;
            }
            room.await;
        }
    }

    /// Counts the hand-out if there is room; `false` when it needs a row and the rows
    /// waiting are at the capacity even folded. (A poisoned lock counts nothing and waits
    /// for nothing, as before.)
    fn try_count(&self, key: RowKey, holder: Option<&PackedConnection>) -> bool {
        let (opened, early) = {
            let Ok(mut m) = self.shared.minutes.lock() else { return true };
            // Read under the lock: once the writer has closed a minute, no hand-out can
            // still count itself into it.
            let now = (self.shared.clock)();
            let in_flight = self.shared.in_flight.load(Ordering::Acquire);
            if m.waiting() + in_flight >= m.bounds.capacity && !m.has(now, &key) {
                if m.folded_at.is_some_and(|at| at.elapsed() < TICK) {
                    return false;
                }
                let folded = m.fold(now);
                m.folded_at = Some(Instant::now());
                metrics::counter!(FOLDED).increment(folded as u64);
                let waiting = m.waiting() + in_flight;
                if waiting >= m.bounds.capacity && !m.has(now, &key) {
                    tracing::warn!(
                        waiting,
                        "the hand-out audit backlog is at its bound even folded: a hand-out that needs a new row waits for the writer"
                    );
                    return false;
                }
            }
            let opened = m.add(now, key, holder);
            (opened, m.past_early())
        };
        if opened {
            let _ = self.touch.send(key.0);
        }
        if early {
            self.shared.close_early.store(true, Ordering::Release);
            self.shared.wake.notify_one();
        }
        true
    }

    /// Rows not yet written: open, closed, or taken out and being written (or retried).
    pub fn pending(&self) -> usize {
        let waiting = self.shared.minutes.lock().map(|m| m.waiting()).unwrap_or(0);
        waiting + self.shared.in_flight.load(Ordering::Acquire)
    }

    /// Writes every row now, the open minute's too, and waits until they are written, for at
    /// most `within`. Used at shutdown (and by tests). Returns whether all were written.
    pub async fn drain(&self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while self.pending() > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            self.shared.write_all.store(true, Ordering::Release);
            self.shared.wake.notify_one();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }
}

/// Connections this instance marked as used lately: marking them again would change
/// nothing (a mark is renewed every [`TOUCH_EVERY`]) and cost a database round each. Two
/// generations of ids, [`TOUCH_EVERY`] each: an id is sent again one to two of them after
/// it was last sent.
/// Kept as 64 bits of each id (half the memory); two ids sharing them would only mean one
/// mark skipped for a generation, and the audit events hold every use anyway.
struct RecentlyTouched {
    current: HashSet<u64>,
    previous: HashSet<u64>,
    since: Instant,
}

fn short(id: &Uuid) -> u64 {
    id.as_u64_pair().0 ^ id.as_u64_pair().1
}

impl RecentlyTouched {
    fn new() -> Self {
        Self { current: HashSet::new(), previous: HashSet::new(), since: Instant::now() }
    }

    fn fresh(&mut self, ids: impl Iterator<Item = Uuid>) -> Vec<Uuid> {
        // Turned once per generation past, whenever ids next come: an id sent before a
        // quiet hour is sent again at its next use.
        let elapsed = self.since.elapsed();
        if elapsed >= 2 * TOUCH_EVERY {
            self.previous.clear();
            self.current.clear();
            self.since = Instant::now();
        } else if elapsed >= TOUCH_EVERY {
            self.previous = std::mem::take(&mut self.current);
            self.since = Instant::now();
        }
        let mut out: Vec<Uuid> = ids
            .filter(|id| {
                let s = short(id);
                !self.current.contains(&s) && !self.previous.contains(&s)
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        self.current.extend(out.iter().map(short));
        out
    }
}

/// Writes closed minutes (every row when asked, or when the backlog is half full: then the
/// open minute's too), a share each tick so that a minute's rows are written within
/// [`SPREAD`], in batches; keeps what failed for the next round (never folded: it may have
/// been written), backing off while Postgres refuses. A batch keeps its id until written,
/// so that one whose commit went through unseen is not written twice.
async fn writer(pool: Db, shared: Arc<Shared>) {
    let mut unwritten: VecDeque<Taken> = VecDeque::new();
    // The id and size of the batch at the front of `unwritten`, once it has been tried: it
    // stays the same rows until written (nothing joins `unwritten` before it is empty, and
    // only a written batch leaves it).
    let mut batch: Option<(Uuid, usize)> = None;
    let mut failures: u32 = 0;
    loop {
        let backoff = Duration::from_millis(200 * 2u64.pow(failures.min(5))).min(Duration::from_secs(5));
        let wait = if failures > 0 { backoff } else { TICK };
        let _ = tokio::time::timeout(wait, shared.wake.notified()).await;
        let all = shared.write_all.swap(false, Ordering::AcqRel);
        let early = shared.close_early.swap(false, Ordering::AcqRel);
        if let Ok(mut m) = shared.minutes.lock() {
            let waiting = m.waiting() + unwritten.len();
            // Crowded and the database takes rows: the open minute too, all at once, so
            // that those waiting for room get it.
            let crowded = waiting >= m.bounds.capacity / 2;
            m.close((shared.clock)(), all || early || (crowded && unwritten.is_empty()));
            if unwritten.is_empty() {
                let taken = m.take(all || crowded);
                // Counted while locked: `pending` never sees these rows in neither place.
                shared.in_flight.fetch_add(taken.len(), Ordering::AcqRel);
                // Its own buffer, not copied into the last one: a drain's hundreds of
                // thousands of rows are not held for good once written.
                unwritten = VecDeque::from(taken);
            }
            metrics::gauge!(QUEUE_DEPTH).set(waiting as f64);
        }
        shared.room.notify_waiters();
        while !unwritten.is_empty() {
            let n = unwritten.len().min(BATCH);
            let rows: Vec<HandoutRow> = unwritten.range(..n).map(handout_row).collect();
            let pause = || tokio::time::sleep(PAUSE);
            let (id, size) = *batch.get_or_insert_with(|| (Uuid::new_v4(), n));
            debug_assert_eq!(size, n, "a batch id names the same rows on every try");
            match store::audit::insert_handouts_paced(&pool, &shared.instance, id, &rows, pause).await {
                Ok(()) => {
                    batch = None;
                    drop(rows);
                    shared.let_go(unwritten.range_mut(..n).map(|(_, _, t)| t));
                    unwritten.drain(..n);
                    shared.in_flight.fetch_sub(n, Ordering::AcqRel);
                    failures = 0;
                    shared.room.notify_waiters();
                }
                Err(e) => {
                    metrics::counter!(BATCH_FAILURES).increment(1);
                    failures += 1;
                    // The database may be away for long: the rows let go of the entries
                    // they keep, and are named from the connections' rows when written.
                    drop(rows);
                    shared.let_go(unwritten.iter_mut().map(|(_, _, t)| t));
                    tracing::warn!(error = %e, rows = unwritten.len(), attempt = failures, "hand-out audit write failed; will retry");
                    break;
                }
            }
        }
        shared.room.notify_waiters();
    }
}

/// Marks connections used, in batches, as fast as the database takes it.
async fn toucher(pool: Db, mut rx: mpsc::UnboundedReceiver<Uuid>) {
    let mut touched = RecentlyTouched::new();
    while let Some(first) = rx.recv().await {
        // Ids come one by one (a connection's first hand-out of a minute): gather them.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let ids = touched.fresh(gather(first, &mut rx).into_iter());
        for chunk in ids.chunks(BATCH) {
            for attempt in 1..=5u64 {
                match store::connections::touch_connections(&pool, chunk).await {
                    Ok(()) => break,
                    Err(e) => {
                        metrics::counter!(BATCH_FAILURES).increment(1);
                        tracing::warn!(error = %e, attempt, "marking connections used failed");
                        tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                    }
                }
            }
        }
    }
}

/// Every id waiting after `first`. Taking a batch at most a round (2,000 every 100 ms)
/// fell behind once more rows opened than 20,000 a second (at a million connections the
/// benchmark opens 45,000): the channel, unbounded, then grew for as long as that lasted.
fn gather(first: Uuid, rx: &mut mpsc::UnboundedReceiver<Uuid>) -> Vec<Uuid> {
    let mut ids = vec![first];
    while let Ok(more) = rx.try_recv() {
        ids.push(more);
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::{BATCH, Bounds, CAPACITY, EARLY, HELD_BYTES, Minutes, Use, minute_of};
    use crate::domain::{MethodClass, ProxiedCall, StatusClass};
    use crate::store::connections::packed::PackedConnection;
    use time::OffsetDateTime;
    use uuid::Uuid;

    #[test]
    fn closed_minutes_are_taken_in_place_oldest_first_each_row_once() {
        let mut m = Minutes::default();
        let t0 = OffsetDateTime::from_unix_timestamp(1_796_000_040).unwrap();
        let t1 = t0 + time::Duration::minutes(1);
        let row = |i: u64, minute: u64| (Uuid::from_u64_pair(i, minute), 7, Use::HAND_OUT);
        for i in 0..BATCH as u64 + 1000 {
            assert!(m.add(t0, row(i, 0), None));
        }
        for i in 0..10 {
            assert!(m.add(t1, row(i, 1), None));
        }
        m.close(t1 + time::Duration::minutes(1), false);
        assert_eq!((m.waiting(), m.rows, m.closed.len()), (BATCH + 1010, 0, 2));
        // Spread: a batch now (the share of 40 ticks is less), all of the older minute's.
        let first = m.take(false);
        assert_eq!(first.len(), BATCH);
        assert!(first.iter().all(|(minute, _, _)| *minute == minute_of(t0)));
        let rest = m.take(true);
        assert_eq!(rest.len(), 1010);
        assert_eq!(rest.iter().filter(|(minute, _, _)| *minute == minute_of(t1)).count(), 10);
        assert_eq!((m.waiting(), m.closed.len()), (0, 0), "an emptied minute is dropped");
        let keys: std::collections::HashSet<_> = first.iter().chain(&rest).map(|(_, key, _)| key.0).collect();
        assert_eq!(keys.len(), BATCH + 1010, "each row once");
        // The next minute opens with room for as many rows as the last one closed had.
        m.add(t1 + time::Duration::minutes(1), row(0, 2), None);
        assert!(m.by_minute.values().all(|rows| rows.capacity() >= 10));
    }

    #[test]
    fn a_fold_is_written_from_a_table_of_its_size_and_a_minute_asks_room_for_early_rows_at_most() {
        let mut m = Minutes::default();
        let t0 = OffsetDateTime::from_unix_timestamp(1_796_000_040).unwrap();
        let at = |minutes: i64| t0 + time::Duration::minutes(minutes);
        let row = |i: u64| (Uuid::from_u64_pair(i, 0), 7, Use::HAND_OUT);
        for minute in 0..3 {
            for i in 0..50 {
                m.add(at(minute), row(i), None);
            }
        }
        m.close(at(2), false);
        assert_eq!((m.waiting(), m.closed.len()), (150, 2));
        assert_eq!(m.fold(at(3)), 100, "three minutes of 50 connections: 50 rows");
        assert!(m.by_minute.values().all(|rows| rows.capacity() < 150), "the table shrunk to its rows");
        m.close(at(4), false);
        let taken = m.take(true);
        assert_eq!(taken.len(), 50);
        assert_eq!(taken.iter().map(|(_, _, t)| t.count).sum::<i32>(), 150, "every use counted");
        assert_eq!(m.waiting(), 0);
        // A minute of more rows than EARLY: the next asks room for EARLY.
        for i in 0..EARLY as u64 + 5 {
            m.add(at(5), row(i), None);
        }
        m.close(at(6), false);
        assert_eq!(m.last_minute_rows, EARLY);
    }

    #[test]
    fn a_fold_merges_into_its_largest_table_whichever_minute_that_is_and_keeps_every_count_and_span() {
        let t0 = OffsetDateTime::from_unix_timestamp(1_796_000_040).unwrap();
        let at = |minutes: i64| t0 + time::Duration::minutes(minutes);
        let row = |i: u64| (Uuid::from_u64_pair(i, 0), 7, Use::HAND_OUT);
        // The largest table closed, a smaller one closed, the open one smallest; and the
        // other way round.
        for sizes in [[100u64, 15, 3], [3, 15, 100]] {
            let mut m = Minutes::default();
            for (minute, n) in sizes.iter().enumerate() {
                // Minute 1's rows are 90-104: ten of them also in minute 0's when that has 100.
                let first = if minute == 1 { 90 } else { 0 };
                for i in first..first + n {
                    m.add(at(minute as i64), row(i), None);
                }
            }
            m.close(at(2), false);
            let waiting = m.waiting();
            let distinct = 105;
            assert_eq!(m.fold(at(2)), waiting - distinct, "{sizes:?}");
            assert_eq!((m.rows, m.closed_rows, m.by_minute.len()), (distinct, 0, 1));
            let open = &m.by_minute[&minute_of(at(2))];
            assert_eq!(open.rows().iter().map(|t| i64::from(t.count)).sum::<i64>(), sizes.iter().sum::<u64>() as i64);
            // Connection 0 was used in minutes 0 and 2: its row spans both.
            let zero = open.get(&row(0)).unwrap();
            assert_eq!((zero.count, zero.first_us, zero.last_us), (2, super::micros(at(0)), super::micros(at(2))));
        }
    }

    #[test]
    fn a_minute_of_as_many_connections_as_the_instance_is_sized_for_stays_one_row_each() {
        assert_eq!(
            Bounds::for_connections(1_000),
            Bounds { early: EARLY, capacity: CAPACITY, held_bytes: HELD_BYTES },
            "never below the floors"
        );
        let sized = Bounds::for_connections(1_100_000);
        assert_eq!(sized, Bounds { early: 1_100_000, capacity: 4_400_000, held_bytes: 704_000_000 });
        assert_eq!(
            Bounds::for_connections(100_000_000),
            Bounds { early: 1_835_008, capacity: 7_340_032, held_bytes: 1_174_405_120 },
            "never above one table of 2^21 slots a minute, whatever the cache holds"
        );
        let t0 = OffsetDateTime::from_unix_timestamp(1_796_000_040).unwrap();
        let row = |i: u64| (Uuid::from_u64_pair(i, 0), 7, Use::HAND_OUT);
        let mut m = Minutes { bounds: sized, ..Minutes::default() };
        for i in 0..EARLY as u64 + 5 {
            m.add(t0, row(i), None);
        }
        assert!(!m.past_early(), "a minute of more rows than EARLY, fewer than the instance holds, stays open");
        m.close(t0 + time::Duration::minutes(1), false);
        assert_eq!(m.last_minute_rows, EARLY + 5, "the next minute asks room for as many");
        let mut small = Minutes { bounds: Bounds { early: 10, ..sized }, ..Minutes::default() };
        for i in 0..10 {
            assert!(!small.past_early());
            small.add(t0, row(i), None);
        }
        assert!(small.past_early(), "closed early at its own bound");
        small.add(t0, row(10), None);
        small.close(t0 + time::Duration::minutes(1), false);
        assert_eq!(small.last_minute_rows, 10, "the next minute asks room for its bound at most");
        // The entries rows keep: within the instance's budget, through `add`.
        let [alice, bob] = ["alice", "bob"].map(|s| crate::store::connections::packed::tests::packed(s, None).1);
        let budget = alice.footprint() + bob.footprint() - 1;
        let mut m = Minutes { bounds: Bounds { held_bytes: budget, ..sized }, ..Minutes::default() };
        let row_of = |p: &PackedConnection| (p.id().as_uuid(), 7, Use::HAND_OUT);
        m.add(t0, row_of(&alice), Some(&alice));
        m.add(t0, row_of(&bob), Some(&bob));
        assert_eq!(m.held, alice.footprint(), "bob's entry is past the budget: his row keeps none");
        m.close(t0 + time::Duration::minutes(1), false);
        let kept: Vec<bool> =
            m.take(true).iter().map(|(_, (id, _, _), t)| t.holder.is_some() == (*id == alice.id().as_uuid())).collect();
        assert_eq!(kept, [true, true]);
    }

    #[test]
    fn a_row_names_a_holder_only_if_every_use_came_with_it_within_the_budget_and_a_fold_lets_go() {
        use crate::store::connections::packed::tests::{packed, packed_as};
        let mut m = Minutes::default();
        let t0 = OffsetDateTime::from_unix_timestamp(1_796_000_040).unwrap();
        let [alice, bob, carol, dave] = ["alice", "bob", "carol", "dave"].map(|s| packed(s, None).1);
        let row = |p: &PackedConnection| (p.id().as_uuid(), 7, Use::HAND_OUT);
        // Served from the cache every time: the row names its holder.
        assert!(m.add(t0, row(&alice), Some(&alice)));
        assert!(!m.add(t0, row(&alice), Some(&alice)));
        assert!(m.add(t0, row(&bob), Some(&bob)));
        assert_eq!(m.held, alice.footprint() + bob.footprint());
        // A use read from the database, or one with another person's entry (re-granted
        // through another IdP: the same id), and the row is named from the connection's row.
        let (_, regranted) = packed_as(alice.id(), "alice", "https://other-idp.example", None);
        m.add(t0, row(&carol), None);
        m.add(t0, row(&carol), Some(&carol));
        m.add(t0, row(&dave), Some(&dave));
        m.add(t0, row(&dave), None);
        let t1 = t0 + time::Duration::minutes(1);
        m.add(t1, row(&alice), Some(&alice));
        m.add(t1, row(&alice), Some(&regranted));
        assert_eq!(m.held, alice.footprint() + bob.footprint(), "carol, dave and alice's second row hold none");
        // A refreshed entry (another allocation, another ciphertext) is the same person's.
        let (_, refreshed) = packed_as(bob.id(), "bob", "https://idp.example", Some("octo"));
        assert!(!m.add(t0, row(&bob), Some(&refreshed)));
        m.close(t1, false);
        let mut taken = m.take(true);
        let named: std::collections::HashMap<_, _> =
            taken.iter().map(|(_, key, t)| (key.0, t.holder.as_ref().map(|h| h.id().as_uuid()))).collect();
        assert_eq!(named.len(), 4);
        for p in [&alice, &bob] {
            assert_eq!(named[&p.id().as_uuid()], Some(p.id().as_uuid()), "each row names its own holder");
        }
        for p in [&carol, &dave] {
            assert_eq!(named[&p.id().as_uuid()], None);
        }
        // Written: the writer lets go of them, and the count is back where it began.
        m.held -= super::let_go(taken.iter_mut().map(|(_, _, t)| &mut t.holder));
        assert_eq!(m.held, 0);
        // Folded (memory first): the rows let go of the entries, and a later use's entry
        // does not name the folded row.
        m.fold(t1);
        assert_eq!(m.held, 0, "the only row left (alice's second) held nothing");
        m.add(t1, row(&bob), Some(&bob));
        m.add(t1, row(&bob), Some(&bob));
        assert_eq!(m.held, bob.footprint());
        assert_eq!(m.fold(t1), 0);
        assert_eq!(m.held, 0);
        m.add(t1, row(&bob), Some(&bob));
        m.close(t1 + time::Duration::minutes(1), false);
        assert!(m.take(true).iter().all(|(_, _, t)| t.holder.is_none()));
        // An entry of another connection never names a row; past the budget, none does.
        assert!(super::holder_of(bob.id(), Some(&alice)).is_none());
        assert_eq!(super::holder_of(alice.id(), Some(&alice)), Some(&alice));
        let budget = m.bounds.held_bytes;
        let mut full = budget - alice.footprint() + 1;
        assert!(super::hold(&mut full, budget, Some(&alice)).is_none());
        let mut room = budget - alice.footprint();
        assert!(super::hold(&mut room, budget, Some(&alice)).is_some() && room == budget);
    }

    #[test]
    fn the_toucher_takes_every_id_waiting_not_a_batch_a_round() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for i in 0..3 * BATCH as u64 + 7 {
            tx.send(Uuid::from_u64_pair(i, 1)).unwrap();
        }
        let first = rx.try_recv().unwrap();
        let ids = super::gather(first, &mut rx);
        assert_eq!(ids.len(), 3 * BATCH + 7);
        assert!(rx.try_recv().is_err(), "nothing left behind");
    }

    #[test]
    fn every_proxied_call_class_has_its_own_code_and_comes_back_as_it_went() {
        assert_eq!(Use::HAND_OUT.call(), None);
        let mut seen = std::collections::HashSet::new();
        for method in [MethodClass::Read, MethodClass::Write] {
            for status in StatusClass::ALL {
                let call = ProxiedCall { method, status };
                let code = Use::proxied(call);
                assert!(code != Use::HAND_OUT && seen.insert(code.0), "{call:?}");
                assert_eq!(code.call(), Some(call));
            }
        }
    }
}
