//! Envelope encryption against the real database: data keys made per tenant, wrapped by the
//! key store, unwrapped into a bounded cache; rows of the releases before moved under them
//! while the service serves; a destroyed key opening nothing.

use crate::support::{KEY_A, spawn_app};
use mcp_connect::domain::{ManualClock, TenantId};
use mcp_connect::keys::{CacheBound, Keys, KeysError, Scope};
use mcp_connect::vault::kek::{KeyStore, KeyStoreError, LocalKeyStore, WrapContext, Wrapped};
use mcp_connect::vault::{Keyring, VaultError};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The local key store, counting its calls (a real store: the keyring wraps and unwraps).
#[derive(Debug)]
struct Counting {
    inner: LocalKeyStore,
    wraps: AtomicUsize,
    unwraps: AtomicUsize,
}

impl Counting {
    fn new(spec: &str) -> Arc<Self> {
        let inner = LocalKeyStore::new(Arc::new(Keyring::parse(spec).unwrap()));
        Arc::new(Self { inner, wraps: AtomicUsize::new(0), unwraps: AtomicUsize::new(0) })
    }
}

#[async_trait::async_trait]
impl KeyStore for Counting {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn current_kek(&self) -> &str {
        self.inner.current_kek()
    }
    async fn wrap(&self, ctx: &WrapContext<'_>, key: &[u8; 32]) -> Result<Wrapped, KeyStoreError> {
        self.wraps.fetch_add(1, Ordering::SeqCst);
        self.inner.wrap(ctx, key).await
    }
    async fn unwrap(
        &self,
        kek_id: &str,
        ctx: &WrapContext<'_>,
        blob: &[u8],
    ) -> Result<zeroize::Zeroizing<[u8; 32]>, KeyStoreError> {
        self.unwraps.fetch_add(1, Ordering::SeqCst);
        self.inner.unwrap(kek_id, ctx, blob).await
    }
}

fn keys_on(app: &crate::support::TestApp, store: Arc<Counting>, clock: Arc<ManualClock>, ttl: Duration) -> Keys {
    let keyring = Arc::new(Keyring::parse(KEY_A).unwrap());
    Keys::new(app.pool.clone(), store, keyring, clock, CacheBound { ttl, capacity: 100 })
}

#[tokio::test]
async fn a_new_database_seals_under_a_data_key_per_tenant_and_no_row_names_the_keyring() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_acme", &["read:user"], None).await;
    app.insert_connection("beta", "alice", "github", "gho_beta", &["read:user"], None).await;
    let on: bool = sqlx::query_scalar("SELECT data_keys_on FROM vault_state").fetch_one(&app.pool).await.unwrap();
    assert!(on, "a database with nothing sealed turns data keys on at start");
    let level: i32 =
        sqlx::query_scalar("SELECT oldest_binary_level FROM schema_compat").fetch_one(&app.pool).await.unwrap();
    assert_eq!(level, 2, "binaries that cannot open data-key rows refuse this schema");
    let rows: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT c.tenant_id, c.key_id, d.kek_id FROM connections c
           LEFT JOIN data_keys d ON c.key_id = 'dk:' || replace(d.id::text, '-', '') ORDER BY c.tenant_id",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2);
    assert_ne!(rows[0].1, rows[1].1, "one data key per tenant");
    for (tenant, key_id, kek) in &rows {
        assert!(key_id.starts_with("dk:"), "{tenant}: {key_id}");
        assert_eq!(kek.as_deref(), Some("k-old"), "{tenant}: wrapped under the keyring's key");
    }
    let b = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(b["access_token"], "gho_acme");
}

#[tokio::test]
async fn a_cached_data_key_opens_without_a_key_store_call_until_its_time_is_up() {
    let app = spawn_app().await;
    let (store, clock) = (Counting::new(KEY_A), Arc::new(ManualClock::default()));
    let keys = keys_on(&app, store.clone(), clock.clone(), Duration::from_secs(60));
    let acme = TenantId::parse("acme").unwrap();
    let made = keys.sealing(Scope::Tenant(&acme)).await.unwrap();
    let id = made.key_id().to_owned();
    // Made here: wrapped once, and held unwrapped (the one it made, not unwrapped again).
    assert_eq!((store.wraps.load(Ordering::SeqCst), store.unwraps.load(Ordering::SeqCst)), (1, 0));
    for _ in 0..100 {
        keys.opening(&id, Scope::Tenant(&acme)).await.unwrap();
        keys.sealing(Scope::Tenant(&acme)).await.unwrap();
    }
    assert_eq!(store.unwraps.load(Ordering::SeqCst), 0, "a cached key makes no key-store call");
    // Another instance: one unwrap, then none.
    let (other_store, other_clock) = (Counting::new(KEY_A), Arc::new(ManualClock::default()));
    let other = keys_on(&app, other_store.clone(), other_clock.clone(), Duration::from_secs(60));
    for _ in 0..100 {
        assert_eq!(other.opening(&id, Scope::Tenant(&acme)).await.unwrap().key_id(), id);
    }
    assert_eq!(other_store.unwraps.load(Ordering::SeqCst), 1);
    // Past the bound it is unwrapped again (and only then).
    other_clock.advance(Duration::from_secs(59));
    other.opening(&id, Scope::Tenant(&acme)).await.unwrap();
    assert_eq!(other_store.unwraps.load(Ordering::SeqCst), 1);
    other_clock.advance(Duration::from_secs(2));
    other.opening(&id, Scope::Tenant(&acme)).await.unwrap();
    assert_eq!(other_store.unwraps.load(Ordering::SeqCst), 2);
    assert_eq!(other_store.wraps.load(Ordering::SeqCst), 0, "the active key is the first instance's");
}

#[tokio::test]
async fn a_destroyed_data_key_opens_nothing_once_the_cache_bound_has_passed_and_at_once_where_it_was_destroyed() {
    let app = spawn_app().await;
    let acme = TenantId::parse("acme").unwrap();
    let (clock_a, clock_b) = (Arc::new(ManualClock::default()), Arc::new(ManualClock::default()));
    let a = keys_on(&app, Counting::new(KEY_A), clock_a, Duration::from_secs(30));
    let b = keys_on(&app, Counting::new(KEY_A), clock_b.clone(), Duration::from_secs(30));
    let id = a.sealing(Scope::Tenant(&acme)).await.unwrap().key_id().to_owned();
    let beta = a.sealing(Scope::Tenant(&TenantId::parse("beta").unwrap())).await.unwrap().key_id().to_owned();
    b.opening(&id, Scope::Tenant(&acme)).await.unwrap();
    let destroyed = mcp_connect::store::data_keys::destroy_tenant(&app.pool, &acme).await.unwrap();
    assert_eq!(destroyed, 1);
    a.forget_tenant(&acme);
    let shredded = |r: Result<_, KeysError>| matches!(r, Err(KeysError::Vault(VaultError::Shredded(_))));
    assert!(shredded(a.opening(&id, Scope::Tenant(&acme)).await), "where it was destroyed: at once");
    // Another instance holds it until its bound, not a moment longer.
    assert!(b.opening(&id, Scope::Tenant(&acme)).await.is_ok());
    clock_b.advance(Duration::from_secs(31));
    assert!(shredded(b.opening(&id, Scope::Tenant(&acme)).await), "past the bound: gone everywhere");
    // Another tenant's key is untouched.
    assert!(b.opening(&beta, Scope::Tenant(&TenantId::parse("beta").unwrap())).await.is_ok());
    // The wrapped bytes are gone from the row, and the destruction cannot be undone.
    let wrapped: Option<Vec<u8>> = sqlx::query_scalar("SELECT wrapped FROM data_keys WHERE tenant_id = 'acme'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(wrapped.is_none());
    for (statement, why) in [
        (
            "UPDATE data_keys SET state = 'active', wrapped = '\\x00', destroyed_at = NULL WHERE tenant_id = 'acme'",
            "stays destroyed",
        ),
        ("DELETE FROM data_keys", "never deleted"),
        ("TRUNCATE data_keys CASCADE", "never deleted"),
        ("UPDATE data_keys SET tenant_id = 'acme' WHERE tenant_id = 'beta'", "identity does not change"),
        ("UPDATE data_keys SET wrapped = '\\x00' WHERE tenant_id = 'beta'", "next wrap_version"),
        ("UPDATE vault_state SET data_keys_on = false", "stay on"),
    ] {
        let e = sqlx::query(statement).execute(&app.pool).await.expect_err(statement);
        assert!(e.to_string().contains(why), "{statement}: {e}");
    }
}

#[tokio::test]
async fn a_data_key_whose_wrapped_bytes_are_moved_to_another_scope_does_not_unwrap() {
    let app = spawn_app().await;
    let keys = keys_on(&app, Counting::new(KEY_A), Arc::new(ManualClock::default()), Duration::from_secs(60));
    let acme = keys.sealing(Scope::Tenant(&TenantId::parse("acme").unwrap())).await.unwrap().key_id().to_owned();
    let beta = keys.sealing(Scope::Tenant(&TenantId::parse("beta").unwrap())).await.unwrap().key_id().to_owned();
    // A database writer gives beta's key acme's wrapped bytes (at the next wrap version).
    sqlx::query(
        "UPDATE data_keys b SET wrapped = a.wrapped, wrap_version = b.wrap_version + 1
           FROM data_keys a WHERE a.tenant_id = 'acme' AND b.tenant_id = 'beta'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let fresh = keys_on(&app, Counting::new(KEY_A), Arc::new(ManualClock::default()), Duration::from_secs(60));
    assert!(fresh.opening(&acme, Scope::Tenant(&TenantId::parse("acme").unwrap())).await.is_ok());
    let e = fresh.opening(&beta, Scope::Tenant(&TenantId::parse("beta").unwrap())).await.unwrap_err();
    assert!(matches!(e, KeysError::Store(KeyStoreError::Refused { .. })), "{e}");
}

#[tokio::test]
async fn rotate_key_moves_rows_from_the_keyring_under_data_keys_while_the_service_serves() {
    let app = spawn_app().await;
    app.seal_as_before_data_keys();
    let subjects: Vec<String> = (0..5).map(|i| format!("s{i}")).collect();
    for s in &subjects {
        app.insert_connection("acme", s, "github", &format!("gho_{s}"), &["read:user"], None).await;
    }
    let before: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT key_id FROM connections").fetch_all(&app.pool).await.unwrap();
    assert_eq!(before, vec!["k-old".to_owned()]);
    assert!(app.state.caches.barrier(&app.pool).await, "listener up");
    // Hand-outs all along, each checked.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (app_key, base, client, stop, subjects) =
            (app.key.clone(), app.base.clone(), app.client.clone(), stop.clone(), subjects.clone());
        tokio::spawn(async move {
            let mut served = 0u32;
            while !stop.load(Ordering::SeqCst) {
                for s in &subjects {
                    let r = client
                        .post(format!("{base}/v1/token"))
                        .bearer_auth(&app_key)
                        .json(&json!({"subject": s, "provider": "github"}))
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(r.status(), 200);
                    let b: serde_json::Value = r.json().await.unwrap();
                    assert_eq!(b["access_token"], format!("gho_{s}"), "{b}");
                    served += 1;
                }
            }
            served
        })
    };
    let keys = app.keys_of(KEY_A);
    let mut seen = Vec::new();
    let r = mcp_connect::flows::rotate::rotate_keys(&app.pool, &keys, 2, |done, total| seen.push((done, total)))
        .await
        .unwrap();
    assert_eq!((r.resealed, r.remaining), (5, 0), "{r:?}");
    assert_eq!(seen, vec![(2, 5), (4, 5), (5, 5)]);
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    assert!(load.await.unwrap() > 0);
    let after: Vec<(String, Option<String>)> = sqlx::query_as(
        "SELECT DISTINCT c.key_id, d.kek_id FROM connections c
           LEFT JOIN data_keys d ON c.key_id = 'dk:' || replace(d.id::text, '-', '')",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(after.len(), 1, "{after:?}");
    assert!(after[0].0.starts_with("dk:"));
    assert_eq!(after[0].1.as_deref(), Some("k-old"), "the data key wrapped under the keyring's key");
    // Rerun: nothing left.
    assert_eq!(mcp_connect::flows::rotate::rotate_keys(&app.pool, &keys, 2, |_, _| {}).await.unwrap().resealed, 0);
}

#[tokio::test]
async fn a_shredded_tenants_tokens_open_on_no_instance_no_row_is_deleted_and_other_tenants_are_untouched() {
    use mcp_connect_testkit::assert_error;
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_acme", &["read:user"], None).await;
    app.insert_connection("beta", "alice", "github", "gho_beta", &["read:user"], None).await;
    let second = crate::support::spawn_on(&app, &crate::support::Options::default()).await;
    for a in [&app, &second] {
        assert!(a.state.caches.barrier(&a.pool).await, "listener up");
    }
    let acme = TenantId::parse("acme").unwrap();
    // The second instance holds acme's data key unwrapped (it handed out acme's token).
    assert_eq!(second.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"], "gho_acme");
    let dk: String = sqlx::query_scalar("SELECT key_id FROM connections WHERE tenant_id = 'acme'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(second.state.keys.opening(&dk, Scope::Tenant(&acme)).await.is_ok());
    let counts = |pool: mcp_connect::store::Db| async move {
        let n: (i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM connections), (SELECT count(*) FROM data_keys), (SELECT count(*) FROM tenants)",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        n
    };
    let before = counts(app.pool.clone()).await;

    let op = app.operator_key().await;
    let wrong = app.operator(&op, reqwest::Method::POST, "/tenants/acme/end", Some(json!({"confirm": "beta"}))).await;
    assert_error(wrong, 400, "invalid_request").await;
    let r = app.operator(&op, reqwest::Method::POST, "/tenants/acme/end", Some(json!({"confirm": "acme"}))).await;
    assert_eq!(r.status(), 200);
    let ended: serde_json::Value = r.json().await.unwrap();
    assert_eq!(ended, json!({"tenant_id": "acme", "ended_now": true, "data_keys_destroyed": 1, "connections": 1}));
    for a in [&app, &second] {
        assert!(a.state.caches.barrier(&a.pool).await, "the change heard");
    }
    // Unreadable everywhere: on the instance that held the key, and for any vault built
    // from the instances' configuration; nothing was deleted.
    let shredded = |r: Result<_, KeysError>| matches!(r, Err(KeysError::Vault(VaultError::Shredded(_))));
    assert!(shredded(second.state.keys.opening(&dk, Scope::Tenant(&acme)).await), "the second instance forgot it");
    assert!(
        shredded(app.keys_of(KEY_A).opening(&dk, Scope::Tenant(&acme)).await),
        "the keyring alone opens nothing of acme's"
    );
    assert_eq!(counts(app.pool.clone()).await, before, "no row deleted");
    let r = second.token(&second.key, json!({"subject": "alice", "provider": "github"})).await;
    assert_ne!(r.status(), 200);
    // Another tenant is served as before, on both.
    for a in [&app, &second] {
        let r = a.token(&a.beta_key, json!({"subject": "alice", "provider": "github"})).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.json::<serde_json::Value>().await.unwrap()["access_token"], "gho_beta");
    }
    // Audited; once more changes nothing; it is never switched on again.
    let detail: serde_json::Value =
        sqlx::query_scalar("SELECT detail FROM audit_events WHERE kind = 'tenant_ended' AND tenant_id = 'acme'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(detail["data_keys_destroyed"], 1);
    assert!(detail["by"].as_str().unwrap().starts_with("operator key "), "{detail}");
    let again = app.operator(&op, reqwest::Method::POST, "/tenants/acme/end", Some(json!({"confirm": "acme"}))).await;
    assert_eq!(again.json::<serde_json::Value>().await.unwrap()["ended_now"], false);
    let on = app.operator(&op, reqwest::Method::PATCH, "/tenants/acme", Some(json!({"active": true}))).await;
    assert_error(on, 409, "tenant_ended").await;
    let e = sqlx::query("UPDATE tenants SET active = true WHERE id = 'acme'").execute(&app.pool).await.unwrap_err();
    assert!(e.to_string().contains("tenants_ended_stay_inactive"), "{e}");
    let e = sqlx::query("UPDATE tenants SET ended_at = NULL WHERE id = 'acme'").execute(&app.pool).await.unwrap_err();
    assert!(e.to_string().contains("stays ended"), "{e}");
    // No new data key is made for it.
    let e = app.state.keys.sealing(Scope::Tenant(&acme)).await.unwrap_err();
    assert!(e.to_string().contains("tenant acme was ended"), "{e}");
}

#[tokio::test]
async fn a_tenant_holding_values_sealed_before_data_keys_is_not_ended_until_rotate_key_moved_them() {
    use mcp_connect_testkit::assert_error;
    let app = spawn_app().await;
    app.seal_as_before_data_keys();
    app.insert_connection("acme", "alice", "github", "gho_acme", &["read:user"], None).await;
    let op = app.operator_key().await;
    let r = app.operator(&op, reqwest::Method::POST, "/tenants/acme/end", Some(json!({"confirm": "acme"}))).await;
    let body = assert_error(r, 409, "tenant_not_under_data_keys").await;
    assert!(body["error_description"].as_str().unwrap().contains("rotate-key"), "{body}");
    let active: bool =
        sqlx::query_scalar("SELECT active FROM tenants WHERE id = 'acme'").fetch_one(&app.pool).await.unwrap();
    assert!(active, "nothing changed");
    mcp_connect::flows::rotate::rotate_keys(&app.pool, &app.keys_of(KEY_A), 10, |_, _| {}).await.unwrap();
    let r = app.operator(&op, reqwest::Method::POST, "/tenants/acme/end", Some(json!({"confirm": "acme"}))).await;
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["connections"], 1);
}

#[tokio::test]
async fn a_data_key_opens_only_for_its_own_scope_and_a_tenants_key_is_never_unwrapped_for_another() {
    let app = spawn_app().await;
    let store = Counting::new(KEY_A);
    let keys = keys_on(&app, store.clone(), Arc::new(ManualClock::default()), Duration::from_secs(60));
    let (acme, beta) = (TenantId::parse("acme").unwrap(), TenantId::parse("beta").unwrap());
    let id = keys.sealing(Scope::Tenant(&acme)).await.unwrap().key_id().to_owned();
    fn refused<T>(r: Result<T, KeysError>) -> bool {
        matches!(r, Err(KeysError::Vault(VaultError::Open)))
    }
    // Held: refused for another tenant and for the service (a login cookie naming it).
    assert!(refused(keys.opening(&id, Scope::Tenant(&beta)).await));
    assert!(refused(keys.opening(&id, Scope::Service).await));
    assert!(keys.opening(&id, Scope::Tenant(&acme)).await.is_ok());
    // The same on the key as held, without a clone (the cached hand-out's path).
    let held = |scope| keys.with_held(&id, scope, |k| k.key_id().to_owned());
    assert!(matches!(held(Scope::Tenant(&beta)), Some(Err(VaultError::Open))));
    assert!(matches!(held(Scope::Service), Some(Err(VaultError::Open))));
    assert_eq!(held(Scope::Tenant(&acme)).map(|r| r.ok()), Some(Some(id.clone())));
    // Not held: refused before anything is unwrapped.
    let cold_store = Counting::new(KEY_A);
    let cold = keys_on(&app, cold_store.clone(), Arc::new(ManualClock::default()), Duration::from_secs(60));
    assert!(refused(cold.opening(&id, Scope::Service).await));
    assert!(refused(cold.opening(&id, Scope::Tenant(&beta)).await));
    assert!(cold.with_held(&id, Scope::Tenant(&acme), |_| ()).is_none(), "not held: nothing at hand");
    // `using` (both hand-outs' way in: as held, else unwrapped) refuses the same, held or not.
    let name = |k: &mcp_connect::vault::SealKey| k.key_id().to_owned();
    assert!(refused(keys.using(&id, Scope::Tenant(&beta), name).await));
    assert!(refused(cold.using(&id, Scope::Service, name).await));
    assert!(refused(cold.using(&id, Scope::Tenant(&beta), name).await));
    assert_eq!(cold_store.unwraps.load(Ordering::SeqCst), 0);
    // Its own scope: unwrapped once, then at hand.
    assert_eq!(cold.using(&id, Scope::Tenant(&acme), name).await.unwrap(), id);
    assert_eq!(cold_store.unwraps.load(Ordering::SeqCst), 1);
    assert_eq!(cold.using(&id, Scope::Tenant(&acme), name).await.unwrap(), id);
    assert_eq!(cold_store.unwraps.load(Ordering::SeqCst), 1, "held after the first");
}

#[tokio::test]
async fn rotate_key_after_a_tenant_ended_leaves_its_rows_be_and_finishes() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_acme", &["read:user"], None).await;
    app.seal_as_before_data_keys();
    app.insert_connection("beta", "alice", "github", "gho_beta", &["read:user"], None).await;
    let acme = TenantId::parse("acme").unwrap();
    mcp_connect::flows::tenants::end_tenant(&app.pool, &acme, "acme", "test").await.unwrap();
    // An ended tenant takes no value under the keyring either.
    let e = sqlx::query(
        "UPDATE connections SET key_id = 'k-old', seal_version = seal_version + 1 WHERE tenant_id = 'acme'",
    )
    .execute(&app.pool)
    .await
    .unwrap_err();
    assert!(e.to_string().contains("tenant acme was ended"), "{e}");
    let r = mcp_connect::flows::rotate::rotate_keys(&app.pool, &app.keys_of(KEY_A), 10, |_, _| {}).await.unwrap();
    assert_eq!((r.resealed, r.remaining), (1, 0), "beta's row moved, acme's left be: {r:?}");
    let again = mcp_connect::flows::rotate::rotate_keys(&app.pool, &app.keys_of(KEY_A), 10, |_, _| {}).await.unwrap();
    assert_eq!((again.resealed, again.remaining), (0, 0), "{again:?}");
}

#[tokio::test]
async fn a_tenants_rotated_data_key_seals_new_values_the_old_one_opens_until_rotate_key_reseals_and_destroys_it() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_before", &["read:user"], None).await;
    app.insert_connection("beta", "alice", "github", "gho_beta", &["read:user"], None).await;
    let acme = TenantId::parse("acme").unwrap();
    let old: String = sqlx::query_scalar("SELECT key_id FROM connections WHERE tenant_id = 'acme'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let beta_before: (String, i64) =
        sqlx::query_as("SELECT key_id, xmin::text::bigint FROM connections WHERE tenant_id = 'beta'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    let new = app.state.keys.rotate_tenant(&acme).await.unwrap();
    assert_ne!(new, old);
    let states: Vec<(i32, String)> =
        sqlx::query_as("SELECT generation, state FROM data_keys WHERE tenant_id = 'acme' ORDER BY generation")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(states, vec![(1, "retired".to_owned()), (2, "active".to_owned())]);
    // New values under the new key; the old row still opens.
    assert_eq!(app.state.keys.sealing(Scope::Tenant(&acme)).await.unwrap().key_id(), new);
    app.insert_connection("acme", "bob", "github", "gho_after", &["read:user"], None).await;
    assert_eq!(app.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"], "gho_before");
    // rotate-key re-seals acme's old row (only it); the retired key is kept while an
    // instance may still seal with it, then destroyed.
    let r = mcp_connect::flows::rotate::rotate_keys(&app.pool, &app.keys_of(KEY_A), 10, |_, _| {}).await.unwrap();
    assert_eq!((r.resealed, r.remaining, r.retired_destroyed), (1, 0, 0), "{r:?}");
    sqlx::query("UPDATE data_keys SET retired_at = now() - interval '2 hours 1 minute' WHERE state = 'retired'")
        .execute(&app.pool)
        .await
        .unwrap();
    let r = mcp_connect::flows::rotate::rotate_keys(&app.pool, &app.keys_of(KEY_A), 10, |_, _| {}).await.unwrap();
    assert_eq!((r.resealed, r.retired_destroyed), (0, 1), "{r:?}");
    let keys: Vec<String> = sqlx::query_scalar("SELECT DISTINCT key_id FROM connections WHERE tenant_id = 'acme'")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(keys, vec![new.clone()]);
    let beta_after: (String, i64) =
        sqlx::query_as("SELECT key_id, xmin::text::bigint FROM connections WHERE tenant_id = 'beta'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(beta_after, beta_before, "another tenant's row is not touched");
    let state: String = sqlx::query_scalar("SELECT state FROM data_keys WHERE tenant_id = 'acme' AND generation = 1")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(state, "destroyed");
    app.state.caches.forget_connection(&mcp_connect::domain::ConnectionKey {
        tenant: acme.clone(),
        subject: mcp_connect::domain::Subject::parse("alice").unwrap(),
        provider: mcp_connect::domain::ProviderId::parse("github").unwrap(),
    });
    assert_eq!(app.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"], "gho_before");
    // A retired key is never made active again.
    app.state.keys.rotate_tenant(&acme).await.unwrap();
    let e = sqlx::query("UPDATE data_keys SET state = 'active' WHERE tenant_id = 'acme' AND generation = 2")
        .execute(&app.pool)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("not made active again"), "{e}");
}

#[tokio::test]
async fn a_tenants_rotated_data_key_has_its_values_resealed_in_the_background_past_one_that_does_not_open() {
    use crate::metrics::{scrape, value, with_metrics};
    let mut opts = with_metrics();
    opts.env.push(("MCP_CONNECT_VAULT_RESEAL_INTERVAL_SECONDS", "1".to_owned()));
    let app = crate::support::spawn_app_with(opts).await;
    for subject in ["alice", "bob", "carol", "dave"] {
        app.insert_connection("acme", subject, "github", &format!("gho_{subject}"), &["read:user"], None).await;
    }
    // carol's token was tampered with: it opens under no key.
    sqlx::query(
        "UPDATE connections SET access_token_ct = access_token_ct || '\\x00'::bytea, seal_version = seal_version + 1
          WHERE subject = 'carol'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let acme = TenantId::parse("acme").unwrap();
    let new = app.state.keys.rotate_tenant(&acme).await.unwrap();
    // No rotate-key: the instance moves the rows under the new key by itself, past carol's.
    let under_new = || async {
        let subjects: Vec<String> = sqlx::query_scalar(
            "SELECT subject FROM connections WHERE tenant_id = 'acme' AND key_id = $1 ORDER BY subject",
        )
        .bind(&new)
        .fetch_all(&app.pool)
        .await
        .unwrap();
        subjects
    };
    crate::support::eventually(Duration::from_secs(20), "acme's rows under its new key", || async {
        under_new().await == ["alice", "bob", "dave"]
    })
    .await;
    crate::support::eventually(Duration::from_secs(10), "the pass counted", || async {
        let (_, s) = scrape(&app).await;
        value(&s, "mcp_connect_vault_reseal_remaining", &[]) == 1.0
            && value(&s, "mcp_connect_vault_resealed_total", &[]) == 3.0
            && value(&s, "mcp_connect_vault_reseal_failures_total", &[]) >= 1.0
    })
    .await;
    assert_eq!(app.token_ok(json!({"subject": "bob", "provider": "github"})).await["access_token"], "gho_bob");
}
