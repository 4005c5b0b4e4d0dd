//! Key stores where the key-encryption key never leaves: PKCS#11 (SoftHSM2, Debian's). The
//! data keys the service makes are wrapped inside the HSM; a restart unwraps them there; a
//! database and the instance's keyring without the HSM open nothing.

use crate::support::hsm::{destroy_key, token_with_kek};
use crate::support::{KEY_A, Options, spawn_app_with, spawn_on};
use mcp_connect::domain::{ManualClock, TenantId};
use mcp_connect::keys::{CacheBound, Keys, KeysError, Scope};
use mcp_connect::vault::Keyring;
use mcp_connect::vault::kek::pkcs11::Pkcs11KeyStore;
use mcp_connect::vault::kek::{KeyStoreError, LocalKeyStore};
use serde_json::json;
use std::sync::Arc;

#[tokio::test]
async fn a_token_sealed_under_pkcs11_opens_after_a_restart_and_not_once_the_kek_is_gone() {
    let hsm = token_with_kek("kek-1").await;
    let opts = || Options { extra_toml: hsm.toml(), ..Options::default() };
    let app = spawn_app_with(opts()).await;
    app.insert_connection("acme", "alice", "github", "gho_in_the_hsm", &["read:user"], None).await;
    let (key_id, store, kek): (String, String, String) = sqlx::query_as(
        "SELECT c.key_id, d.kek_store, d.kek_id FROM connections c
           JOIN data_keys d ON c.key_id = 'dk:' || replace(d.id::text, '-', '')",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((store.as_str(), kek.as_str()), ("pkcs11", "kek-1"), "wrapped inside the HSM");
    assert_eq!(app.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"], "gho_in_the_hsm");
    // A restart: nothing cached, the HSM unwraps it again.
    let restarted = spawn_on(&app, &opts()).await;
    let b = restarted.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(b["access_token"], "gho_in_the_hsm");

    // The KEK destroyed in the HSM: an instance that had not unwrapped the key cannot, and
    // a start names what is missing.
    let store = Pkcs11KeyStore::open(hsm.settings.clone()).await.unwrap();
    let keyring = Arc::new(Keyring::parse(KEY_A).unwrap());
    let cold =
        Keys::new(app.pool.clone(), Arc::new(store), keyring, Arc::new(ManualClock::default()), CacheBound::default());
    destroy_key(&hsm, "kek-1");
    let acme = TenantId::parse("acme").unwrap();
    let e = cold.opening(&key_id, Scope::Tenant(&acme)).await.unwrap_err();
    assert!(matches!(&e, KeysError::Store(KeyStoreError::Refused { .. })), "{e}");
    assert!(e.to_string().contains("no key labelled \"kek-1\""), "{e}");
    let e = Pkcs11KeyStore::open(hsm.settings.clone()).await.unwrap_err();
    assert!(e.to_string().contains("mcp-connect keystore create-kek"), "{e}");
}

#[tokio::test]
async fn a_database_and_the_instances_keyring_open_nothing_without_the_hsm() {
    let hsm = token_with_kek("kek-1").await;
    let app = spawn_app_with(Options { extra_toml: hsm.toml(), ..Options::default() }).await;
    app.insert_connection("acme", "alice", "github", "gho_DUMP_MARKER", &["read:user"], None).await;
    // What a dump holds: the rows, and the data keys only wrapped.
    let (key_id, kek, wrapped): (String, String, Vec<u8>) = sqlx::query_as(
        "SELECT c.key_id, d.kek_id, d.wrapped FROM connections c
           JOIN data_keys d ON c.key_id = 'dk:' || replace(d.id::text, '-', '')",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let dump: Vec<String> = sqlx::query_scalar(
        "SELECT t::text FROM (SELECT * FROM connections) t UNION ALL SELECT d::text FROM data_keys d",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(dump.iter().all(|row| !row.contains("gho_DUMP_MARKER")));
    // The instance's environment: its keyring. It unwraps nothing the HSM wrapped, neither
    // as the service reads it nor handed the wrapped bytes directly.
    let acme = TenantId::parse("acme").unwrap();
    let e = app.keys_of(KEY_A).opening(&key_id, Scope::Tenant(&acme)).await.unwrap_err();
    assert!(matches!(&e, KeysError::Store(KeyStoreError::Refused { .. })), "{e}");
    let local = LocalKeyStore::new(Arc::new(Keyring::parse(KEY_A).unwrap()));
    let ctx = mcp_connect::vault::kek::WrapContext {
        data_key: uuid::Uuid::parse_str(key_id.trim_start_matches("dk:")).unwrap(),
        scope: "acme",
    };
    use mcp_connect::vault::kek::KeyStore;
    for kek_id in [kek.as_str(), "k-old"] {
        assert!(local.unwrap(kek_id, &ctx, &wrapped).await.is_err(), "{kek_id}");
    }
}

#[tokio::test]
async fn an_install_moves_from_the_keyring_to_the_hsm_with_rotate_key_and_a_moved_wrapping_opens_nothing() {
    use mcp_connect::vault::kek::{KeyStore, WrapContext};
    let hsm = token_with_kek("kek-1").await;
    // Data keys wrapped by the keyring first (the local store).
    let app = crate::support::spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_moved", &["read:user"], None).await;
    // The same database served with the HSM: the keyring's wrappings still open.
    let hsm_app = spawn_on(&app, &Options { extra_toml: hsm.toml(), ..Options::default() }).await;
    assert_eq!(hsm_app.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"], "gho_moved");
    // rotate-key re-wraps them inside the HSM; no row is re-sealed.
    let store = Pkcs11KeyStore::open(hsm.settings.clone()).await.unwrap();
    let keyring = Arc::new(Keyring::parse(KEY_A).unwrap());
    let keys = Keys::new(
        app.pool.clone(),
        Arc::new(store.clone()),
        keyring,
        Arc::new(ManualClock::default()),
        CacheBound::default(),
    );
    let r = mcp_connect::flows::rotate::rotate_keys(&app.pool, &keys, 10, |_, _| {}).await.unwrap();
    assert_eq!((r.rewrapped, r.resealed, r.remaining), (1, 0, 0), "{r:?}");
    let stores: Vec<String> =
        sqlx::query_scalar("SELECT DISTINCT kek_store FROM data_keys").fetch_all(&app.pool).await.unwrap();
    assert_eq!(stores, vec!["pkcs11".to_owned()]);
    let fresh = spawn_on(&app, &Options { extra_toml: hsm.toml(), ..Options::default() }).await;
    assert_eq!(fresh.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"], "gho_moved");
    // What the HSM wrapped for one data key and tenant unwraps for no other, and not altered.
    let (id, other) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let ctx = WrapContext { data_key: id, scope: "acme" };
    let w = store.wrap(&ctx, &[7u8; 32]).await.unwrap();
    assert_eq!(*store.unwrap(&w.kek_id, &ctx, &w.blob).await.unwrap(), [7u8; 32]);
    for moved in [WrapContext { data_key: other, scope: "acme" }, WrapContext { data_key: id, scope: "beta" }] {
        let e = store.unwrap(&w.kek_id, &moved, &w.blob).await.unwrap_err();
        assert!(matches!(e, KeyStoreError::Refused { .. }), "{e}");
    }
    let mut altered = w.blob.clone();
    *altered.last_mut().unwrap() ^= 1;
    assert!(matches!(store.unwrap(&w.kek_id, &ctx, &altered).await, Err(KeyStoreError::Refused { .. })));
    assert!(!w.blob.windows(32).any(|x| x == [7u8; 32]), "never stored in clear");
}
