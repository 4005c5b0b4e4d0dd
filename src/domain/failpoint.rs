//! Named points where the crash tests (`tests/api/crash.rs`) SIGKILL the real process: the
//! moments where a crash could lose or duplicate a grant. A point is armed by the `fail`
//! crate's `FAILPOINTS` environment variable (`FAILPOINTS=callback.before_commit=return`),
//! read once at start by [`setup`]. Without the `failpoints` cargo feature (release builds,
//! the image) both functions compile to nothing.

// A release build never carries them: an armed point parks a task that may hold a
// transaction open.
#[cfg(all(feature = "failpoints", not(debug_assertions)))]
compile_error!("the failpoints feature is for test builds only");

/// Keep the returned guard for the life of the process.
#[cfg(feature = "failpoints")]
pub fn setup() -> Option<fail::FailScenario<'static>> {
    Some(fail::FailScenario::setup())
}

#[cfg(not(feature = "failpoints"))]
pub fn setup() -> Option<()> {
    None
}

/// When `name` is armed: says so on stderr (`failpoint reached: <name>`, which the test
/// waits for) and parks the task for good, so that the test's SIGKILL lands exactly here.
#[cfg_attr(
    not(feature = "failpoints"),
    expect(clippy::unused_async, reason = "async for its callers: it awaits only with the failpoints feature")
)]
pub async fn stop_here(name: &'static str) {
    #[cfg(feature = "failpoints")]
    {
        fn armed(name: &str) -> bool {
            fail::fail_point!(name, |_| true);
            false
        }
        if armed(name) {
            eprintln!("failpoint reached: {name}");
            std::future::pending::<()>().await;
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}
