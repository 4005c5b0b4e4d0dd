//! The audit trail at volume: monthly partitions made ahead and dropped whole, hand-outs
//! counted per minute and written once it closes, and paging that a late commit cannot
//! slip behind.

use crate::support::spawn_app;
use mcp_connect::domain::ApiKeyId;
use mcp_connect::store::audit::{drop_partitions_before, ensure_partitions};
use mcp_connect::store::handouts::{HandoutAudit, WallClock};
use reqwest::Method;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use time::OffsetDateTime;
use time::macros::datetime;

async fn partitions(pool: &mcp_connect::store::Db) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'audit_events'::regclass ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn partition_of(pool: &mcp_connect::store::Db, kind: &str) -> Vec<String> {
    sqlx::query_scalar("SELECT tableoid::regclass::text FROM audit_events WHERE kind = $1")
        .bind(kind)
        .fetch_all(pool)
        .await
        .unwrap()
}

async fn insert_at(pool: &mcp_connect::store::Db, kind: &str, at: OffsetDateTime) {
    sqlx::query("INSERT INTO audit_events (kind, at) VALUES ($1, $2)").bind(kind).bind(at).execute(pool).await.unwrap();
}

#[tokio::test]
async fn partitions_are_made_ahead_and_retention_drops_whole_months_only() {
    let app = spawn_app().await;
    let pool = &app.pool;
    // A row of a month that has no partition yet lands in the default partition...
    insert_at(pool, "early", datetime!(2031-03-15 12:00 UTC)).await;
    assert_eq!(partition_of(pool, "early").await, ["audit_events_default"]);
    // ...and moves into its month's partition when the clean-up makes it ahead.
    assert_eq!(ensure_partitions(pool, datetime!(2031-02-28 23:59:59 UTC)).await.unwrap(), 3);
    assert_eq!(partition_of(pool, "early").await, ["audit_events_2031_03"]);
    assert_eq!(ensure_partitions(pool, datetime!(2031-02-01 00:00 UTC)).await.unwrap(), 0, "already made");
    let names = partitions(pool).await;
    for m in ["2031_02", "2031_03", "2031_04"] {
        assert!(names.contains(&format!("audit_events_{m}")), "{m} missing: {names:?}");
    }
    // Month bounds are UTC: the last microsecond of February is February's.
    insert_at(pool, "feb", datetime!(2031-02-28 23:59:59.999999 UTC)).await;
    insert_at(pool, "mar", datetime!(2031-03-01 00:00 UTC)).await;
    assert_eq!(partition_of(pool, "feb").await, ["audit_events_2031_02"]);
    assert_eq!(partition_of(pool, "mar").await, ["audit_events_2031_03"]);

    // A cutoff inside March drops February (it ended before) and keeps March whole.
    let dropped = drop_partitions_before(pool, datetime!(2031-03-20 00:00 UTC)).await.unwrap();
    let names = partitions(pool).await;
    assert!(!names.contains(&"audit_events_2031_02".to_owned()), "{names:?}");
    assert!(names.contains(&"audit_events_2031_03".to_owned()), "{names:?}");
    assert!(dropped >= 1, "February and the months before it");
    assert!(partition_of(pool, "feb").await.is_empty());
    assert_eq!(partition_of(pool, "mar").await.len(), 1, "March's rows stay until March has ended");
    assert_eq!(partition_of(pool, "early").await.len(), 1);
    assert!(names.contains(&"audit_events_default".to_owned()), "the default partition is never dropped");
}

/// Every instance runs the clean-up: at once, they make each partition once, drop each
/// once, and none of them fails.
#[tokio::test]
async fn every_instance_may_run_partition_upkeep_at_the_same_time() {
    let app = spawn_app().await;
    // Eight instances make the coming months at once, then four drop the past at once (a
    // make after a drop would rightly make June again: the two steps are not raced here).
    let makes = (0..8).map(|_| ensure_partitions(&app.pool, datetime!(2032-06-10 00:00 UTC)));
    let made: u64 = futures_util::future::join_all(makes).await.into_iter().map(Result::unwrap).sum();
    assert_eq!(made, 3, "June, July and August, each made once");
    let drops = (0..4).map(|_| drop_partitions_before(&app.pool, datetime!(2032-07-01 00:00 UTC)));
    let dropped: u64 = futures_util::future::join_all(drops).await.into_iter().map(Result::unwrap).sum();
    let names = partitions(&app.pool).await;
    assert!(names.contains(&"audit_events_2032_08".to_owned()), "{names:?}");
    assert!(!names.contains(&"audit_events_2032_06".to_owned()), "June ended before the cutoff: {names:?}");
    assert!(dropped >= 1, "dropped {dropped}");
}

/// A wall clock the test moves, and how many times it was read.
fn manual_clock(start: OffsetDateTime) -> (WallClock, Arc<Mutex<OffsetDateTime>>, Arc<AtomicUsize>) {
    let (now, reads) = (Arc::new(Mutex::new(start)), Arc::new(AtomicUsize::new(0)));
    let (read, counted) = (now.clone(), reads.clone());
    let clock = move || {
        counted.fetch_add(1, Ordering::SeqCst);
        *read.lock().unwrap()
    };
    (Arc::new(clock), now, reads)
}

type Tally = (OffsetDateTime, uuid::Uuid, String, i32, OffsetDateTime, OffsetDateTime, String, String);

async fn tallies(pool: &mcp_connect::store::Db) -> Vec<Tally> {
    sqlx::query_as(
        "SELECT at, connection_id, api_key_id, count, first_at, last_at, instance, subject
         FROM audit_events WHERE kind = 'token_handed_out' ORDER BY at, subject, api_key_id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn handouts_are_one_row_per_connection_key_and_minute_written_once_the_minute_closes() {
    let app = spawn_app().await;
    let alice = app.insert_connection("acme", "alice", "github", "gho_a", &["read:user"], None).await.as_uuid();
    let bob = app.insert_connection("acme", "bob", "github", "gho_b", &["read:user"], None).await.as_uuid();
    let minute = datetime!(2026-12-01 10:07 UTC);
    let (clock, now, reads) = manual_clock(minute + Duration::from_secs(5));
    let audit = HandoutAudit::spawn(app.pool.clone(), "host-test0001".to_owned(), clock, Default::default());
    let (k1, k2) = (ApiKeyId::parse("00000000000000a1").unwrap(), ApiKeyId::parse("00000000000000a2").unwrap());
    for (i, (id, key)) in [(alice, &k1); 5].into_iter().chain([(alice, &k2); 2]).chain([(bob, &k1); 3]).enumerate() {
        *now.lock().unwrap() = minute + Duration::from_secs(5 + i as u64);
        audit.record(mcp_connect::domain::ConnectionId::from_uuid(id), key, None).await;
    }
    assert_eq!(audit.pending(), 3, "three rows open: alice by two keys, bob by one");
    // The writer looks every second; the minute is still open, so it writes nothing. Each
    // look reads the clock once (as each hand-out does), so two reads after the last
    // hand-out mean that a whole look happened since.
    let read = reads.load(Ordering::SeqCst);
    crate::support::eventually(Duration::from_secs(5), "the writer looks twice more", || async {
        reads.load(Ordering::SeqCst) >= read + 2
    })
    .await;
    assert!(tallies(&app.pool).await.is_empty(), "nothing is written while its minute is open");

    // The minute closes (a hand-out of the next minute comes in, and time moves on).
    *now.lock().unwrap() = minute + Duration::from_secs(61);
    audit.record(mcp_connect::domain::ConnectionId::from_uuid(alice), &k1, None).await;
    // Written, and no longer counted as pending (the writer counts them off right after
    // its commit, so a reader of the table can be a moment ahead of it).
    crate::support::eventually(Duration::from_secs(5), "the closed minute's rows", || async {
        tallies(&app.pool).await.len() == 3 && audit.pending() == 1
    })
    .await;
    let s = |n: u64| minute + Duration::from_secs(n);
    let host = "host-test0001".to_owned();
    assert_eq!(
        tallies(&app.pool).await,
        vec![
            (minute, alice, "00000000000000a1".into(), 5, s(5), s(9), host.clone(), "alice".into()),
            (minute, alice, "00000000000000a2".into(), 2, s(10), s(11), host.clone(), "alice".into()),
            (minute, bob, "00000000000000a1".into(), 3, s(12), s(14), host.clone(), "bob".into()),
        ]
    );
    assert_eq!(audit.pending(), 1, "the next minute's row stays open");
    let written: Vec<(String, String)> =
        sqlx::query_as("SELECT ctid::text, xmin::text FROM audit_events WHERE kind = 'token_handed_out' ORDER BY 1")
            .fetch_all(&app.pool)
            .await
            .unwrap();

    // Drain writes the open minute; the rows already written are never touched again.
    assert!(audit.drain(Duration::from_secs(5)).await);
    let rows = tallies(&app.pool).await;
    assert_eq!(rows.len(), 4);
    assert_eq!(
        rows[3],
        (minute + Duration::from_secs(60), alice, "00000000000000a1".into(), 1, s(61), s(61), host, "alice".into())
    );
    let after: Vec<(String, String)> = sqlx::query_as(
        "SELECT ctid::text, xmin::text FROM audit_events WHERE kind = 'token_handed_out' AND at = $1 ORDER BY 1",
    )
    .bind(minute)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(after, written, "a written row is never updated");
}

/// The events of this test (not the tenant's own, written at start).
fn ours(page: &serde_json::Value) -> Vec<String> {
    let kinds = page["events"].as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap().to_owned());
    kinds.filter(|k| ["slow", "quick", "old", "young"].contains(&k.as_str())).collect()
}

/// One page after `from`: this test's events on it, and where to ask next.
async fn follow(app: &crate::support::TestApp, from: &str) -> (Vec<String>, String) {
    let page: serde_json::Value =
        app.admin(Method::GET, &format!("/audit?after={from}&limit=100"), None).await.json().await.unwrap();
    (ours(&page), page["next_after"].as_str().unwrap().to_owned())
}

/// Follows the trail from `from`, page after page, until it has seen `n` of this test's
/// events or 5 s have passed: what it saw, in order, and where it stopped.
async fn follow_until(app: &crate::support::TestApp, from: &str, n: usize) -> (Vec<String>, String) {
    // What the reader has seen and where it is, carried from one look to the next.
    let trail = std::cell::RefCell::new((Vec::new(), from.to_owned()));
    let _ = crate::support::poll(Duration::from_secs(5), || async {
        let cursor = trail.borrow().1.clone();
        let (kinds, next) = follow(app, &cursor).await;
        let mut t = trail.borrow_mut();
        t.0.extend(kinds);
        t.1 = next;
        if t.0.len() >= n { Ok(()) } else { Err(()) }
    })
    .await;
    trail.into_inner()
}

/// Row ids and commit order can cross: a transaction that took its id first may commit
/// last. Paging by id would skip such a row for good; the trail's cursor does not: a reader
/// that follows it sees every event once, whatever the order of commits.
#[tokio::test]
async fn a_reader_following_the_trail_misses_no_event_that_commits_late() {
    let app = spawn_app().await;
    let insert = "INSERT INTO audit_events (tenant_id, kind) VALUES ('acme', $1)";
    // `slow` takes its row id first and commits last.
    let mut slow = app.pool.begin().await.unwrap();
    sqlx::query(insert).bind("slow").execute(&mut *slow).await.unwrap();
    sqlx::query(insert).bind("quick").execute(&app.pool).await.unwrap();
    let (seen, _) = follow(&app, "0-0").await;
    assert!(seen.is_empty(), "nothing is listed while an older transaction may still add a row: {seen:?}");
    slow.commit().await.unwrap();
    let (all, cursor) = follow_until(&app, "0-0", 2).await;
    assert_eq!(all, ["slow", "quick"], "each event once, in commit-safe order");

    // The other crossing: a transaction with the older transaction id takes the newer row
    // id and commits last.
    let mut old = app.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()").execute(&mut *old).await.unwrap();
    sqlx::query(insert).bind("young").execute(&app.pool).await.unwrap();
    sqlx::query(insert).bind("old").execute(&mut *old).await.unwrap();
    let (seen, same) = follow(&app, &cursor).await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(same, cursor, "with nothing new listable, the reader asks again from where it was");
    old.commit().await.unwrap();
    let (more, _) = follow_until(&app, &cursor, 2).await;
    assert_eq!(more, ["old", "young"]);
    // Newest-first pages see the same events, in the reverse order.
    let page: serde_json::Value = app.admin(Method::GET, "/audit?limit=100", None).await.json().await.unwrap();
    assert_eq!(ours(&page), ["young", "old", "quick", "slow"]);
}

/// The hand-out rows of `instance`: minute, connection, count, first and last use.
async fn rows_of(
    pool: &mcp_connect::store::Db,
    instance: &str,
) -> Vec<(OffsetDateTime, uuid::Uuid, i32, OffsetDateTime, OffsetDateTime)> {
    sqlx::query_as(
        "SELECT at, connection_id, count, first_at, last_at FROM audit_events
         WHERE kind = 'token_handed_out' AND instance = $1 ORDER BY at, first_at",
    )
    .bind(instance)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Postgres takes no row (a transaction holds the trail in SHARE mode) while the minutes
/// pass: at the bound the rows waiting are folded into one per connection spanning the
/// minutes, counted in the metric, and once Postgres takes rows again every hand-out is
/// in the trail (a drain with the backlog at its bound writes it all).
#[tokio::test]
async fn a_backlog_at_its_bound_is_folded_into_coarser_rows_and_loses_no_hand_out() {
    let app = crate::support::spawn_app_with(crate::metrics::with_metrics()).await;
    let a = app.insert_connection("acme", "alice", "github", "gho_a", &["read:user"], None).await;
    let b = app.insert_connection("acme", "bob", "github", "gho_b", &["read:user"], None).await;
    let minute = datetime!(2026-12-01 11:00 UTC);
    let (clock, now, _) = manual_clock(minute + Duration::from_secs(1));
    // The writer on a pool of its own, to be told apart in pg_stat_activity.
    let opts: sqlx::postgres::PgConnectOptions = app.db_url.parse().unwrap();
    let own = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect_with(opts.application_name("handout-fold-test"))
        .await
        .unwrap();
    let db = mcp_connect::store::Db::direct(own);
    let audit = HandoutAudit::spawn_with_capacity(db, "host-fold0001".to_owned(), clock, 5);
    let key = ApiKeyId::parse("00000000000000f1").unwrap();
    let mut blocker = app.pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE audit_events IN SHARE MODE").execute(&mut *blocker).await.unwrap();
    let at = |m: u64| minute + Duration::from_secs(60 * m + 1);
    for c in [a, b] {
        audit.record(c, &key, None).await;
    }
    // The minute closes; the writer takes its rows and waits on the lock (from then on it
    // takes nothing more: what follows does not race it).
    *now.lock().unwrap() = at(1);
    crate::support::eventually(Duration::from_secs(10), "the writer waits on the lock", || async {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = 'handout-fold-test' AND wait_event_type = 'Lock'",
        )
        .fetch_one(&app.pool)
        .await
        .unwrap();
        waiting > 0
    })
    .await;
    // Two more minutes of alice and bob: 6 rows where 5 may wait.
    for m in 1..3 {
        *now.lock().unwrap() = at(m);
        for c in [a, b] {
            audit.record(c, &key, None).await;
        }
    }
    assert!(audit.pending() <= 5, "{} rows wait where 5 may", audit.pending());
    let (_, scrape) = crate::metrics::scrape(&app).await;
    assert_eq!(crate::metrics::value(&scrape, "mcp_connect_handout_rows_folded_total", &[]), 1.0);

    blocker.rollback().await.unwrap();
    assert!(audit.drain(Duration::from_secs(10)).await, "{} rows still wait", audit.pending());
    let rows = rows_of(&app.pool, "host-fold0001").await;
    assert_eq!(rows.iter().map(|r| r.2).sum::<i32>(), 6, "every hand-out is counted: {rows:?}");
    // Minute 0 as it was; minutes 1 and 2 folded into one row per connection, the row of
    // its first use's minute, spanning the next.
    let whole = |m: u64| minute + Duration::from_secs(60 * m);
    for c in [a, b] {
        let mine: Vec<_> = rows.iter().filter(|r| r.1 == c.as_uuid()).map(|r| (r.0, r.2, r.3, r.4)).collect();
        assert_eq!(mine, vec![(whole(0), 1, at(0), at(0)), (whole(1), 2, at(1), at(2))], "{rows:?}");
    }
}

/// More distinct connections than the bound in one minute: folding frees nothing, so the
/// hand-out that needs a new row waits (counted) until the writer has written the rest,
/// and is then counted too.
#[tokio::test]
async fn a_backlog_that_folding_cannot_shrink_makes_a_new_row_wait_for_room() {
    let app = crate::support::spawn_app_with(crate::metrics::with_metrics()).await;
    let mut connections = Vec::new();
    for s in ["c1", "c2", "c3", "c4", "c5"] {
        connections.push(app.insert_connection("acme", s, "github", "gho_x", &["read:user"], None).await);
    }
    let minute = datetime!(2026-12-01 12:00 UTC);
    let (clock, _, _) = manual_clock(minute + Duration::from_secs(1));
    let audit = HandoutAudit::spawn_with_capacity(app.pool.clone(), "host-wait0001".to_owned(), clock, 4);
    let key = ApiKeyId::parse("00000000000000f2").unwrap();
    for c in &connections[..4] {
        audit.record(*c, &key, None).await;
    }
    // A fifth connection: no room, and folding one minute's distinct rows frees none. The
    // writer closes the open minute to make room, so the wait ends.
    let fifth = connections[4];
    let waiting = {
        let audit = audit.clone();
        tokio::spawn(async move { audit.record(fifth, &key, None).await })
    };
    tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("room came").unwrap();
    assert!(audit.drain(Duration::from_secs(10)).await);
    let rows = rows_of(&app.pool, "host-wait0001").await;
    assert_eq!(rows.iter().map(|r| r.2).sum::<i32>(), 5, "{rows:?}");
    let (_, scrape) = crate::metrics::scrape(&app).await;
    assert_eq!(crate::metrics::value(&scrape, "mcp_connect_handout_queue_wait_seconds_count", &[]), 1.0);
}
