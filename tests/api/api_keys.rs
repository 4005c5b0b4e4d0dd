//! Every way a request can fail to authenticate, and the cache that makes a good key cheap.

use crate::support::{TestApp, assert_error, eventually, spawn_app};
use mcp_connect::api_keys::NewApiKey;
use secrecy::ExposeSecret;
use serde_json::json;

/// The real key's id with another (random) secret: a wrong secret for a known id.
fn forged(real: &str) -> String {
    let other = NewApiKey::generate();
    format!("{}{}", &real[..22], &other.key.expose_secret()[22..])
}

/// Stores a server key of tenant acme made beforehand (so a test can present it first).
async fn store_acme_key(pool: &mcp_connect::store::Db, key: &NewApiKey) {
    let acme = mcp_connect::domain::TenantId::parse("acme").unwrap();
    mcp_connect::flows::api_keys::store_api_key(pool, key, &acme, mcp_connect::domain::KeyScope::Server, None)
        .await
        .unwrap();
}

/// Makes a key as the previous release did: without a fast verifier (argon2 checks it
/// until its first success).
async fn without_verifier(pool: &mcp_connect::store::Db, key: &str) {
    let id = mcp_connect::api_keys::parse_key(key).unwrap();
    sqlx::query("UPDATE api_keys SET verifier = NULL WHERE id = $1").bind(id.as_str()).execute(pool).await.unwrap();
}

/// `n` live server keys of tenant acme made without a verifier, so that argon2 checks
/// them (a flood of wrong secrets spread over many ids: one id is verified one at a time
/// and throttled after a few failures).
async fn live_keys(pool: &mcp_connect::store::Db, n: usize) -> Vec<String> {
    let mut keys = Vec::new();
    for _ in 0..n {
        let k = NewApiKey::generate();
        store_acme_key(pool, &k).await;
        without_verifier(pool, k.key.expose_secret()).await;
        keys.push(k.key.expose_secret().to_owned());
    }
    keys
}

fn body() -> serde_json::Value {
    json!({"subject": "alice", "provider": "github"})
}

async fn post_with_header(app: &TestApp, header: Option<&str>) -> reqwest::Response {
    let mut r = app.client.post(format!("{}/v1/token", app.base)).json(&body());
    if let Some(h) = header {
        r = r.header("authorization", h);
    }
    r.send().await.unwrap()
}

fn www_authenticate(r: &reqwest::Response) -> String {
    r.headers().get("www-authenticate").expect("WWW-Authenticate is set").to_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_request_without_a_key_is_401_with_a_bare_challenge() {
    let app = spawn_app().await;
    let r = post_with_header(&app, None).await;
    assert_eq!(www_authenticate(&r), "Bearer realm=\"mcp-connect\"");
    assert_error(r, 401, "invalid_api_key").await;
}

#[tokio::test]
async fn a_key_in_another_scheme_is_401() {
    let app = spawn_app().await;
    let r = post_with_header(&app, Some(&format!("Basic {}", app.key))).await;
    assert!(www_authenticate(&r).contains("invalid_token"));
    assert_error(r, 401, "invalid_api_key").await;
}

#[tokio::test]
async fn a_malformed_key_is_401() {
    let app = spawn_app().await;
    for bad in ["Bearer", "Bearer ", "Bearer nonsense", "Bearer mcpc_", &format!("Bearer {}x", app.key)] {
        let r = post_with_header(&app, Some(bad)).await;
        assert!(www_authenticate(&r).contains("invalid_token"), "{bad}");
        assert_error(r, 401, "invalid_api_key").await;
    }
}

#[tokio::test]
async fn an_unknown_key_is_401_and_costs_no_hash() {
    let app = spawn_app().await;
    let before = app.state.api_keys.hash_verifications();
    let unknown = NewApiKey::generate();
    let r = app.token(unknown.key.expose_secret(), body()).await;
    assert_error(r, 401, "invalid_api_key").await;
    // The id is not a secret (64 random bits, no use without the 256-bit secret): an id
    // that does not exist is refused after one read, without argon2.
    assert_eq!(app.state.api_keys.hash_verifications(), before);
}

#[tokio::test]
async fn a_flood_of_well_formed_unknown_keys_causes_zero_argon2_runs() {
    let app = spawn_app().await;
    assert!(app.state.caches.barrier(&app.pool).await, "listener up");
    let before = app.state.api_keys.hash_verifications();
    let one = NewApiKey::generate();
    let app = &app;
    let calls = (0..200).map(|i| {
        let key = if i % 2 == 0 { NewApiKey::generate().key } else { one.key.clone() };
        async move { app.token(key.expose_secret(), body()).await }
    });
    for r in futures_util::future::join_all(calls).await {
        assert_error(r, 401, "invalid_api_key").await;
    }
    assert_eq!(app.state.api_keys.hash_verifications(), before);
    // A valid key is still served at once.
    assert_eq!(app.token(&app.key, body()).await.status(), 200);
}

#[tokio::test]
async fn a_revocation_of_key_a_leaves_key_b_cached() {
    let app = spawn_app().await;
    assert!(app.state.caches.barrier(&app.pool).await, "listener up");
    let b_key = mcp_connect::flows::api_keys::create_api_key(
        &app.pool,
        &mcp_connect::domain::TenantId::parse("acme").unwrap(),
        mcp_connect::domain::KeyScope::Server,
        None,
    )
    .await
    .unwrap();
    let b_key = b_key.key.expose_secret();
    assert_eq!(app.token(&app.key, body()).await.status(), 200);
    assert_eq!(app.token(b_key, body()).await.status(), 200);
    let verified = app.state.api_keys.hash_verifications();
    let id = mcp_connect::domain::ApiKeyId::parse(&app.key[5..21]).unwrap();
    mcp_connect::store::api_keys::revoke_api_key(&app.pool, &id).await.unwrap().unwrap();
    assert!(app.state.caches.barrier(&app.pool).await, "the revocation's notification arrived");
    // A at once (the notification named it), B untouched: no new argon2 run.
    assert_error(app.token(&app.key, body()).await, 401, "invalid_api_key").await;
    assert_eq!(app.token(b_key, body()).await.status(), 200);
    assert_eq!(app.state.api_keys.hash_verifications(), verified);
}

#[tokio::test]
async fn a_key_created_on_instance_a_works_at_once_on_instance_b() {
    let a = spawn_app().await;
    let b = crate::support::spawn_on(&a, &crate::support::Options::default()).await;
    assert!(b.state.caches.barrier(&b.pool).await, "listener up");
    let key = NewApiKey::generate();
    // B sees the id before it exists and remembers it as unknown.
    assert_error(b.token(key.key.expose_secret(), body()).await, 401, "invalid_api_key").await;
    store_acme_key(&a.pool, &key).await;
    assert!(b.state.caches.barrier(&b.pool).await, "the creation's notification arrived");
    assert_eq!(b.token(key.key.expose_secret(), body()).await.status(), 200);
}

#[tokio::test]
async fn waiting_for_an_argon2_slot_is_bounded_and_answers_503_with_retry_after() {
    let app = spawn_app().await;
    // Wrong secrets for 40 live ids: each needs its own argon2 run (2 slots, 32 may wait).
    let keys = live_keys(&app.pool, 40).await;
    let app = &app;
    let calls = (0..120).map(|i| {
        let forged = forged(&keys[i % keys.len()]);
        async move { app.token(&forged, body()).await }
    });
    let mut busy = 0;
    for r in futures_util::future::join_all(calls).await {
        match r.status().as_u16() {
            401 => {}
            503 => {
                assert_eq!(r.headers().get("retry-after").unwrap(), "1");
                assert_error(r, 503, "temporarily_unavailable").await;
                busy += 1;
            }
            other => panic!("unexpected status {other}"),
        }
    }
    assert!(busy > 0, "a queue of 120 behind 2 slots and 32 places must be cut short");
}

#[tokio::test]
async fn a_wrong_secret_for_a_known_id_is_401() {
    let app = spawn_app().await;
    let before = app.state.api_keys.hash_verifications();
    // Keep the real id, swap in another secret: refused by the fast verifier, no argon2.
    let forged = forged(&app.key);
    assert_ne!(forged, app.key);
    let r = app.token(&forged, body()).await;
    assert_error(r, 401, "invalid_api_key").await;
    assert_eq!(app.state.api_keys.hash_verifications(), before);
    // A key of the previous release (no verifier) is checked by argon2, and gets its
    // verifier at its first success.
    without_verifier(&app.pool, &app.beta_key).await;
    assert_error(app.token(&forged_beta(&app), body()).await, 401, "invalid_api_key").await;
    assert_eq!(app.state.api_keys.hash_verifications(), before + 1);
    assert_eq!(app.token(&app.beta_key, body()).await.status(), 200);
    let id = mcp_connect::api_keys::parse_key(&app.beta_key).unwrap();
    let filled: bool = sqlx::query_scalar("SELECT verifier IS NOT NULL FROM api_keys WHERE id = $1")
        .bind(id.as_str())
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(filled, "the verifier is filled in");
}

fn forged_beta(app: &TestApp) -> String {
    forged(&app.beta_key)
}

#[tokio::test]
async fn a_revoked_key_is_401() {
    let app = spawn_app().await;
    let id = mcp_connect::domain::ApiKeyId::parse(&app.key[5..21]).unwrap();
    mcp_connect::store::api_keys::revoke_api_key(&app.pool, &id).await.unwrap().unwrap();
    let r = app.token(&app.key, body()).await;
    assert_error(r, 401, "invalid_api_key").await;
}

/// The backstop behind both: a key revoked while neither its notification arrives nor the
/// change log can be read (cache::a_key_revoked_with_its_notification_lost_… covers the log)
/// is refused once its cache interval has passed.
#[tokio::test]
async fn a_key_revoked_after_use_stops_working_within_the_cache_interval() {
    let clock = std::sync::Arc::new(mcp_connect::domain::ManualClock::default());
    let app =
        crate::support::spawn_app_with(crate::support::Options { clock: Some(clock.clone()), ..Default::default() })
            .await;
    assert_eq!(app.token(&app.key, body()).await.status(), 200);
    // Revoked without the change notification (as if it were lost) and with the change log
    // out of the confirmer's reach (its reads fail): only the re-check interval (the tests
    // configure cache_seconds = 1) bounds it.
    for sql in [
        "ALTER TABLE api_keys DISABLE TRIGGER api_keys_notify",
        "ALTER TABLE api_keys DISABLE TRIGGER api_keys_log",
        "ALTER TABLE cache_change_log RENAME TO cache_change_log_away",
    ] {
        sqlx::query(sql).execute(&app.pool).await.unwrap();
    }
    let id = mcp_connect::domain::ApiKeyId::parse(&app.key[5..21]).unwrap();
    mcp_connect::store::api_keys::revoke_api_key(&app.pool, &id).await.unwrap().unwrap();
    assert_eq!(app.token(&app.key, body()).await.status(), 200, "still within the interval");
    clock.advance(std::time::Duration::from_millis(1_100));
    assert_error(app.token(&app.key, body()).await, 401, "invalid_api_key").await;
}

#[tokio::test]
async fn a_cached_key_is_not_hashed_again() {
    let app = spawn_app().await;
    without_verifier(&app.pool, &app.key).await;
    assert_eq!(app.token(&app.key, body()).await.status(), 200);
    let after_first = app.state.api_keys.hash_verifications();
    for _ in 0..5 {
        assert_eq!(app.token(&app.key, body()).await.status(), 200);
    }
    assert_eq!(app.state.api_keys.hash_verifications(), after_first);
}

#[tokio::test]
async fn an_admin_key_on_the_server_api_is_403_insufficient_scope() {
    let app = spawn_app().await;
    let r = app.token(&app.admin_key, body()).await;
    assert!(www_authenticate(&r).contains("insufficient_scope"));
    assert_error(r, 403, "insufficient_scope").await;
}

#[tokio::test]
async fn a_right_key_of_a_deactivated_tenant_is_403_tenant_disabled_and_a_wrong_one_401() {
    let app = spawn_app().await;
    sqlx::query("UPDATE tenants SET active = false WHERE id = 'beta'").execute(&app.pool).await.unwrap();
    let e = assert_error(app.token(&app.beta_key, body()).await, 403, "tenant_disabled").await;
    assert!(e["error_description"].as_str().unwrap().contains("switched off"), "{e}");
    // The same id with another secret: nothing said about the tenant.
    let mut wrong = app.beta_key.clone();
    let last = if wrong.ends_with('A') { 'B' } else { 'A' };
    wrong.pop();
    wrong.push(last);
    assert_error(app.token(&wrong, body()).await, 401, "invalid_api_key").await;
    // A key made before verifiers (argon2 only) of such a tenant: refused without argon2.
    without_verifier(&app.pool, &app.beta_key).await;
    let other = crate::support::spawn_on(&app, &crate::support::Options::default()).await;
    assert_error(other.token(&app.beta_key, body()).await, 401, "invalid_api_key").await;
}

#[tokio::test]
async fn a_burst_of_first_requests_with_a_new_key_costs_few_hashes() {
    let app = spawn_app().await;
    without_verifier(&app.pool, &app.key).await;
    let before = app.state.api_keys.hash_verifications();
    let calls = (0..16).map(|_| app.token(&app.key, body()));
    for r in futures_util::future::join_all(calls).await {
        assert_eq!(r.status(), 200);
    }
    // At most one per argon2 slot (2), not one per request.
    assert!(app.state.api_keys.hash_verifications() - before <= 2);
}

#[tokio::test]
async fn verifications_given_up_while_waiting_for_a_slot_give_their_place_back() {
    let app = spawn_app().await;
    let verifier =
        mcp_connect::api_keys::ApiKeyVerifier::new(app.pool.clone(), std::time::Duration::from_secs(5), 100, 8);
    // Wrong secrets for 24 live ids, each request dropped after 40 ms: most while they
    // wait for one of the two argon2 slots.
    let keys = live_keys(&app.pool, 24).await;
    let calls = keys.iter().map(|k| {
        let forged = forged(k);
        let verifier = verifier.clone();
        async move { tokio::time::timeout(std::time::Duration::from_millis(40), verifier.verify(&forged)).await }
    });
    let outcomes = futures_util::future::join_all(calls).await;
    assert!(outcomes.iter().any(Result::is_err), "some were dropped mid-wait");
    assert_eq!(verifier.hash_waiters(), 0, "a dropped waiter no longer counts against the queue");
    // And the queue still takes callers: the real key verifies (after the at most two
    // argon2 runs still going, well within the 2 s a caller may wait).
    assert!(verifier.verify(&app.key).await.is_ok());
}

#[tokio::test]
async fn an_unknown_id_is_remembered_for_a_few_seconds_only() {
    let clock = std::sync::Arc::new(mcp_connect::domain::ManualClock::default());
    let app =
        crate::support::spawn_app_with(crate::support::Options { clock: Some(clock.clone()), ..Default::default() })
            .await;
    assert!(app.state.caches.barrier(&app.pool).await, "listener up");
    let key = NewApiKey::generate();
    assert_error(app.token(key.key.expose_secret(), body()).await, 401, "invalid_api_key").await;
    // Stored without its notification (as if it were lost): the memory of the id being
    // unknown hides it, but only for the negative cache's 5 s.
    sqlx::query("ALTER TABLE api_keys DISABLE TRIGGER api_keys_notify").execute(&app.pool).await.unwrap();
    store_acme_key(&app.pool, &key).await;
    assert_error(app.token(key.key.expose_secret(), body()).await, 401, "invalid_api_key").await;
    clock.advance(std::time::Duration::from_secs(5));
    assert_eq!(app.token(key.key.expose_secret(), body()).await.status(), 200);
}

#[tokio::test]
async fn a_flood_of_wrong_secrets_for_a_live_id_costs_a_handful_of_argon2_runs_and_holds_up_no_other_key() {
    use futures_util::StreamExt;
    let app = spawn_app().await;
    // Keys of the previous release, checked by argon2 (see the next test for today's).
    without_verifier(&app.pool, &app.key).await;
    without_verifier(&app.pool, &app.beta_key).await;
    let before = app.state.api_keys.hash_verifications();
    let started = std::time::Instant::now();
    let app = &app;
    let flood = futures_util::stream::iter(0..300)
        .map(|_| async move {
            let r = app.token(&forged(&app.key), body()).await;
            let status = r.status().as_u16();
            if status == 429 {
                assert!(r.headers().get("retry-after").is_some(), "429 says when");
                assert_error(r, 429, "too_many_attempts").await;
            }
            status
        })
        .buffer_unordered(16)
        .collect::<Vec<u16>>();
    // Meanwhile (once the flood has had argon2 run), a key of another tenant never used
    // before (argon2 must run for it).
    let other = async {
        eventually(std::time::Duration::from_secs(5), "the flood has had argon2 run", || async {
            app.state.api_keys.hash_verifications() > before
        })
        .await;
        let t = std::time::Instant::now();
        let r = app.token(&app.beta_key, body()).await;
        (r.status().as_u16(), t.elapsed())
    };
    let (statuses, (other_status, other_took)) = tokio::join!(flood, other);
    let took = started.elapsed();
    let runs = app.state.api_keys.hash_verifications() - before;
    let refused = statuses.iter().filter(|s| **s == 429).count();
    eprintln!(
        "300 wrong secrets: {runs} argon2 runs (1 for the other key), {refused} x 429, in {took:?}; other key in {other_took:?}"
    );
    assert!(statuses.iter().all(|s| *s == 401 || *s == 429), "{statuses:?}");
    assert!(runs <= 7, "{runs} argon2 runs for 300 wrong secrets of one id");
    assert!(took < std::time::Duration::from_secs(3), "the flood was answered in {took:?}");
    assert_eq!(other_status, 200);
    assert!(other_took < std::time::Duration::from_secs(1), "the other tenant's key waited {other_took:?}");
    // The right secret of the flooded id, cached before or not, still gets through (one
    // verification per second is let through for it).
    let verifier =
        mcp_connect::api_keys::ApiKeyVerifier::new(app.pool.clone(), std::time::Duration::from_secs(5), 100, 8);
    for _ in 0..3 {
        assert!(verifier.verify(&forged(&app.key)).await.is_err());
    }
    let mut ok = false;
    for _ in 0..30 {
        match verifier.verify(&app.key).await {
            Ok(_) => {
                ok = true;
                break;
            }
            // Fixed sleep kept: it waits out the Retry-After the verifier gave, which is what
            // this part is about (the right secret gets through once the throttle allows).
            Err(mcp_connect::api_keys::KeyRejection::Throttled(wait)) => tokio::time::sleep(wait).await,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(ok, "the right secret verified within the throttle");
}

#[tokio::test]
async fn a_flood_of_wrong_secrets_for_a_key_with_a_verifier_runs_no_argon2_and_locks_nobody_out() {
    use futures_util::StreamExt;
    let app = spawn_app().await;
    let before = app.state.api_keys.hash_verifications();
    let app = &app;
    let flood = futures_util::stream::iter(0..300)
        .map(|_| async move { app.token(&forged(&app.key), body()).await.status().as_u16() })
        .buffer_unordered(16)
        .collect::<Vec<u16>>();
    // Meanwhile the right key, on an instance that never verified it (nothing cached): it
    // works at once, every time, however many wrong secrets its id gets.
    let fresh = mcp_connect::api_keys::ApiKeyVerifier::new(app.pool.clone(), std::time::Duration::from_secs(5), 100, 8);
    let right = async {
        for _ in 0..20 {
            let fresh =
                mcp_connect::api_keys::ApiKeyVerifier::new(app.pool.clone(), std::time::Duration::from_secs(5), 100, 8);
            assert!(fresh.verify(&app.key).await.is_ok(), "the right key during the flood");
        }
        fresh.verify(&app.key).await.is_ok()
    };
    let (statuses, ok) = tokio::join!(flood, right);
    assert!(ok);
    assert!(statuses.iter().all(|s| *s == 401), "{statuses:?}");
    assert_eq!(app.state.api_keys.hash_verifications(), before, "no argon2 run for any of it");
}
