//! Waiting for what happens off the request path (batched audit writes, a detached task, a
//! terminated backend, a child process, a page in a browser): look again every 10 ms until
//! it holds or the time given is up, instead of sleeping a guessed time. One loop, written
//! once; the tests say what they wait for and how long it may take.

use std::fmt::Display;
use std::future::Future;
use std::time::{Duration, Instant};

/// How long a wait rests between two looks.
const EVERY: Duration = Duration::from_millis(10);

/// Calls `check` until it returns `Ok`, every 10 ms, for at most `within`: its value, or
/// the last `Err` it returned once `within` has passed. For a wait that does not end the
/// test when it runs out (a retry elsewhere, a wait that is not fatal); a test that must
/// see the thing happen calls [`eventually`] or [`eventually_ok`].
pub async fn poll<T, E, F, Fut>(within: Duration, mut check: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = Instant::now() + within;
    loop {
        match check().await {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => tokio::time::sleep(EVERY).await,
        }
    }
}

/// Waits until `check` holds, and panics naming `what` if it does not within `within`.
pub async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let held = poll(within, || {
        let holds = check();
        async move { if holds.await { Ok(()) } else { Err(()) } }
    })
    .await;
    assert!(held.is_ok(), "not within {within:?}: {what}");
}

/// [`eventually`] for a check that has something to show: waits until `check` returns
/// `Ok` and gives its value; if it does not within `within`, panics naming `what` and the
/// last `Err` (what the check saw instead).
#[expect(clippy::panic, reason = "a wait that runs out fails the test that asked for it, as an assertion does")]
pub async fn eventually_ok<T, E, F, Fut>(within: Duration, what: &str, check: F) -> T
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    match poll(within, check).await {
        Ok(v) => v,
        Err(last) => panic!("not within {within:?}: {what}; last seen: {last}"),
    }
}

/// [`poll`] for code that cannot await (a `Drop`, a wait for a child process in a
/// blocking task): the thread sleeps between looks.
pub fn poll_blocking<T, E>(within: Duration, mut check: impl FnMut() -> Result<T, E>) -> Result<T, E> {
    let deadline = Instant::now() + within;
    loop {
        match check() {
            Ok(v) => return Ok(v),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => std::thread::sleep(EVERY),
        }
    }
}
