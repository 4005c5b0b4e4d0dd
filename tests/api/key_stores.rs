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

/// `[7; 32]` wrapped by `store` for a new data key of tenant `acme`: it unwraps in that
/// context and in no other (another data key, another tenant).
async fn wrapped_for_its_own_id_and_scope(
    store: &dyn mcp_connect::vault::kek::KeyStore,
) -> (mcp_connect::vault::kek::WrapContext<'static>, mcp_connect::vault::kek::Wrapped) {
    use mcp_connect::vault::kek::WrapContext;
    let (id, other) = (uuid::Uuid::new_v4(), uuid::Uuid::new_v4());
    let ctx = WrapContext { data_key: id, scope: "acme" };
    let w = store.wrap(&ctx, &[7u8; 32]).await.unwrap();
    assert_eq!(*store.unwrap(&w.kek_id, &ctx, &w.blob).await.unwrap(), [7u8; 32]);
    for moved in [WrapContext { data_key: other, scope: "acme" }, WrapContext { data_key: id, scope: "beta" }] {
        let e = store.unwrap(&w.kek_id, &moved, &w.blob).await.unwrap_err();
        assert!(matches!(e, KeyStoreError::Refused { .. }), "{e}");
    }
    (ctx, w)
}

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
    use mcp_connect::vault::kek::KeyStore;
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
    let (ctx, w) = wrapped_for_its_own_id_and_scope(&store).await;
    let mut altered = w.blob.clone();
    *altered.last_mut().unwrap() ^= 1;
    assert!(matches!(store.unwrap(&w.kek_id, &ctx, &altered).await, Err(KeyStoreError::Refused { .. })));
    assert!(!w.blob.windows(32).any(|x| x == [7u8; 32]), "never stored in clear");
}

// --- aws-kms (moto's KMS on loopback) ----------------------------------------------------

use crate::support::kms::Kms;
use mcp_connect::vault::kek::aws_kms::AwsKmsKeyStore;

fn with_kms(kms: &Kms, extra: &str) -> Options {
    Options { extra_toml: format!("{extra}{}", kms.toml()), ..Options::default() }
}

#[tokio::test]
async fn a_token_sealed_under_aws_kms_opens_after_a_restart_and_nothing_opens_once_the_key_is_gone() {
    let kms = Kms::start().await;
    let app = spawn_app_with(with_kms(&kms, "")).await;
    app.insert_connection("acme", "alice", "github", "gho_in_kms", &["read:user"], None).await;
    let (key_id, store, kek, wrapped): (String, String, String, Vec<u8>) = sqlx::query_as(
        "SELECT c.key_id, d.kek_store, d.kek_id, d.wrapped FROM connections c
           JOIN data_keys d ON c.key_id = 'dk:' || replace(d.id::text, '-', '')",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((store.as_str(), kek.as_str()), ("aws-kms", kms.arn.as_str()), "wrapped by the key the alias names");
    let restarted = spawn_on(&app, &with_kms(&kms, "")).await;
    assert_eq!(
        restarted.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"],
        "gho_in_kms"
    );
    // What a dump and the instance's environment hold: the keyring unwraps nothing KMS wrapped.
    let acme = TenantId::parse("acme").unwrap();
    let e = app.keys_of(KEY_A).opening(&key_id, Scope::Tenant(&acme)).await.unwrap_err();
    assert!(matches!(&e, KeysError::Store(KeyStoreError::Refused { .. })), "{e}");
    let local = LocalKeyStore::new(Arc::new(Keyring::parse(KEY_A).unwrap()));
    let ctx = mcp_connect::vault::kek::WrapContext {
        data_key: uuid::Uuid::parse_str(key_id.trim_start_matches("dk:")).unwrap(),
        scope: "acme",
    };
    use mcp_connect::vault::kek::KeyStore;
    assert!(local.unwrap("k1", &ctx, &wrapped).await.is_err());
    // KMS's key gone: an instance that had not unwrapped the data key cannot, and a start
    // names the key it cannot find.
    let store = AwsKmsKeyStore::open(kms.settings()).await.unwrap();
    let keyring = Arc::new(Keyring::parse(KEY_A).unwrap());
    let cold =
        Keys::new(app.pool.clone(), Arc::new(store), keyring, Arc::new(ManualClock::default()), CacheBound::default());
    kms.remove_every_key().await;
    let e = cold.opening(&key_id, Scope::Tenant(&acme)).await.unwrap_err();
    assert!(matches!(&e, KeysError::Store(KeyStoreError::Refused { store: "aws-kms", .. })), "{e}");
    let e = AwsKmsKeyStore::open(kms.settings()).await.unwrap_err();
    assert!(matches!(&e, KeyStoreError::Refused { .. }) && e.to_string().contains("NotFound"), "{e}");
}

#[tokio::test]
async fn a_wrapping_kms_made_unwraps_for_no_other_data_key_scope_or_key() {
    use mcp_connect::vault::kek::KeyStore;
    let kms = Kms::start().await;
    let store = AwsKmsKeyStore::open(kms.settings()).await.unwrap();
    assert_eq!(store.current_kek(), kms.arn, "the alias resolved to its key's ARN");
    let (ctx, w) = wrapped_for_its_own_id_and_scope(&store).await;
    // A row naming a key of another account (or region) is not sent to KMS at all.
    let foreign = w.kek_id.replace("123456789012", "999999999999");
    let e = store.unwrap(&foreign, &ctx, &w.blob).await.unwrap_err();
    assert!(e.to_string().contains("not a key of this store's account and region"), "{e}");
    // Decrypt names the key it expects: a blob another key wrapped is refused.
    let newer = kms.rotate_alias().await;
    let e = store.unwrap(&newer, &ctx, &w.blob).await.unwrap_err();
    assert!(matches!(e, KeyStoreError::Refused { .. }), "{e}");
    assert!(!w.blob.windows(32).any(|x| x == [7u8; 32]), "never stored in clear");
}

#[tokio::test]
async fn a_kms_outage_keeps_cached_hand_outs_gives_503_for_a_cold_unwrap_and_service_resumes() {
    use crate::metrics::{scrape, value, with_metrics};
    let kms = Kms::start().await;
    let metrics = with_metrics().extra_toml;
    let warm = spawn_app_with(with_kms(&kms, &metrics)).await;
    warm.insert_connection("acme", "alice", "github", "gho_cached", &["read:user"], None).await;
    let alice = json!({"subject": "alice", "provider": "github"});
    assert_eq!(warm.token_ok(alice.clone()).await["access_token"], "gho_cached");
    // A second instance, started while KMS answered, has unwrapped nothing yet.
    let cold = spawn_on(&warm, &with_kms(&kms, &metrics)).await;

    kms.stop();
    for _ in 0..3 {
        assert_eq!(warm.token_ok(alice.clone()).await["access_token"], "gho_cached", "served from the cache");
    }
    let r = cold.token(&cold.key, alice.clone()).await;
    assert_eq!(r.status(), 503);
    assert!(r.headers().contains_key("retry-after"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"], "temporarily_unavailable", "{body}");
    let (_, s) = scrape(&cold).await;
    let failed = [("store", "aws-kms"), ("op", "unwrap"), ("result", "unavailable")];
    assert_eq!(value(&s, "mcp_connect_key_store_seconds_count", &failed), 1.0);
    // An instance started while KMS does not answer starts, not ready: /readyz names the
    // store, its key and why; what needs a key answers 503.
    let unready = crate::support::TestApp::start_on(
        &warm.db_url,
        warm.db.clone(),
        warm.idp.clone(),
        warm.provider.clone(),
        &with_kms(&kms, ""),
    )
    .await
    .expect("it starts");
    let readiness = || async {
        let r = unready.client.get(format!("{}/readyz", unready.base)).send().await.unwrap();
        (r.status().as_u16(), r.json::<serde_json::Value>().await.unwrap())
    };
    let (status, body) = readiness().await;
    assert_eq!((status, body["status"].as_str()), (503, Some("key_store_unavailable")), "{body}");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("aws-kms") && !detail.contains("alias/") && !detail.contains("127.0.0.1"), "{detail}");
    crate::support::assert_error(unready.token(&unready.key, alice.clone()).await, 503, "temporarily_unavailable")
        .await;

    kms.resume();
    assert_eq!(cold.token_ok(alice.clone()).await["access_token"], "gho_cached", "service resumes with KMS");
    // The instance that started without it opens it in the background and becomes ready.
    crate::support::eventually(std::time::Duration::from_secs(30), "ready once KMS answers", || async {
        readiness().await.0 == 200
    })
    .await;
    assert_eq!(unready.token_ok(alice).await["access_token"], "gho_cached");
}

#[tokio::test]
async fn a_kek_rotation_in_kms_rewraps_every_data_key_and_reseals_no_row() {
    let kms = Kms::start().await;
    let app = spawn_app_with(with_kms(&kms, "")).await;
    for (tenant, token) in [("acme", "gho_a"), ("beta", "gho_b")] {
        app.insert_connection(tenant, "alice", "github", token, &["read:user"], None).await;
    }
    let versions = || async {
        let v: Vec<(String, String)> =
            sqlx::query_as("SELECT tenant_id, xmin::text FROM connections ORDER BY tenant_id")
                .fetch_all(&app.pool)
                .await
                .unwrap();
        v
    };
    let before = versions().await;
    let newer = kms.rotate_alias().await;
    // The alias now names a new key: rotate-key re-wraps under it, row versions unchanged.
    let store = AwsKmsKeyStore::open(kms.settings()).await.unwrap();
    let keyring = Arc::new(Keyring::parse(KEY_A).unwrap());
    let keys =
        Keys::new(app.pool.clone(), Arc::new(store), keyring, Arc::new(ManualClock::default()), CacheBound::default());
    let r = mcp_connect::flows::rotate::rotate_keys(&app.pool, &keys, 10, |_, _| {}).await.unwrap();
    assert!(r.rewrapped >= 2 && (r.resealed, r.remaining) == (0, 0), "{r:?}");
    assert_eq!(versions().await, before, "no row re-sealed");
    let keks: Vec<String> = sqlx::query_scalar("SELECT DISTINCT kek_id FROM data_keys WHERE state <> 'destroyed'")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(keks, vec![newer]);
    let fresh = spawn_on(&app, &with_kms(&kms, "")).await;
    let beta_key = fresh.beta_key.clone();
    assert_eq!(fresh.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"], "gho_a");
    let r = fresh.token(&beta_key, json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["access_token"], "gho_b");
}
