//! The vault against the real database: what a dump shows, rows moved, keys rotated.

use crate::support::{KEY_A, KEY_B, Options, spawn_app, spawn_on};
use serde_json::json;

#[tokio::test]
async fn a_dump_of_the_connections_table_holds_no_plaintext_token() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_PLAINTEXT_MARKER_123", &["read:user"], None).await;
    // Every column, as text and as raw bytes, the way pg_dump would see it.
    let rows: Vec<String> = sqlx::query_scalar("SELECT c::text FROM connections c").fetch_all(&app.pool).await.unwrap();
    assert_eq!(rows.len(), 1);
    assert!(!rows[0].contains("gho_PLAINTEXT_MARKER_123"));
    assert!(!rows[0].contains(&hex("gho_PLAINTEXT_MARKER_123")));
    assert!(!rows[0].contains("refresh-gho_PLAINTEXT"));
    let blobs: Vec<Vec<u8>> =
        sqlx::query_scalar("SELECT access_token_ct FROM connections").fetch_all(&app.pool).await.unwrap();
    assert!(!blobs[0].windows(8).any(|w| w == b"gho_PLAI"));
    // ...and the real lookup still opens it.
    let b = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(b["access_token"], "gho_PLAINTEXT_MARKER_123");
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn a_ciphertext_moved_to_another_row_is_never_handed_out() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_alice", &["read:user"], None).await;
    app.insert_connection("acme", "mallory", "github", "gho_mallory", &["read:user"], None).await;
    // Both rows are at the same seal generation: with the guard on new ciphertexts switched
    // off (someone who can change the schema), the row binding alone must refuse it.
    sqlx::raw_sql(
        "ALTER TABLE connections DISABLE TRIGGER connections_seal_version_guard;
         UPDATE connections SET access_token_ct = (SELECT access_token_ct FROM connections WHERE subject = 'alice')
         WHERE subject = 'mallory'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let r = app.token(&app.key, json!({"subject": "mallory", "provider": "github"})).await;
    let text = r.text().await.unwrap();
    assert!(!text.contains("gho_alice"), "{text}");
    assert!(text.contains("internal_error"));
    // Alice's own row is untouched and still opens.
    let b = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(b["access_token"], "gho_alice");
}

#[tokio::test]
async fn a_tampered_ciphertext_is_never_handed_out() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_alice", &["read:user"], None).await;
    // The database refuses a changed ciphertext without a new generation; past that guard
    // (switched off), the vault's tag refuses it.
    let refused = sqlx::query(
        "UPDATE connections SET access_token_ct = set_byte(access_token_ct, 30, get_byte(access_token_ct, 30) # 1)",
    )
    .execute(&app.pool)
    .await;
    assert!(refused.expect_err("the guard").to_string().contains("need a new seal_version"));
    sqlx::raw_sql(
        "ALTER TABLE connections DISABLE TRIGGER connections_seal_version_guard;
         UPDATE connections SET access_token_ct = set_byte(access_token_ct, 30, get_byte(access_token_ct, 30) # 1)",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let r = app.token(&app.key, json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(r.status(), 500);
    assert!(!r.text().await.unwrap().contains("gho_alice"));
}

#[tokio::test]
async fn rows_sealed_under_an_old_key_open_after_a_new_key_is_added() {
    let app = spawn_app().await; // keyring: KEY_A only
    app.insert_connection("acme", "alice", "github", "gho_old_key", &["read:user"], None).await;
    let rotated = spawn_on(&app, &Options { vault_keys: format!("{KEY_B},{KEY_A}"), ..Options::default() }).await;
    let b = rotated.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(b["access_token"], "gho_old_key");
    // New data keys are wrapped under the current key; acme's stays under the old one until
    // rotate-key re-wraps it.
    rotated.insert_connection("beta", "bob", "github", "gho_new_key", &["read:user"], None).await;
    let keks: Vec<(String, String)> = sqlx::query_as("SELECT tenant_id, kek_id FROM data_keys ORDER BY tenant_id")
        .fetch_all(&rotated.pool)
        .await
        .unwrap();
    assert_eq!(keks, vec![("acme".into(), "k-old".into()), ("beta".into(), "k-new".into())]);
}

#[tokio::test]
async fn a_row_under_a_key_no_longer_in_the_keyring_is_not_handed_out() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_old_key", &["read:user"], None).await;
    let only_new = spawn_on(&app, &Options { vault_keys: KEY_B.to_owned(), ..Options::default() }).await;
    let r = only_new.token(&only_new.key, json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(r.status(), 500);
    assert!(!r.text().await.unwrap().contains("gho_old_key"));
}

#[tokio::test]
async fn a_rotated_out_refresh_token_put_back_into_its_row_no_longer_opens() {
    let app = spawn_app().await;
    let past = time::OffsetDateTime::now_utc() - time::Duration::minutes(1);
    app.insert_provider_grant("alice", "octo-alice", Some(past)).await;
    let (old_at, old_rt, old_gen): (Vec<u8>, Vec<u8>, i64) =
        sqlx::query_as("SELECT access_token_ct, refresh_token_ct, seal_version FROM connections")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    // The provider rotates the refresh token at this refresh.
    let first = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(first["status"], "connected");
    let refreshes = app.provider.stats().refresh_calls;
    assert_eq!(refreshes, 1);
    let now_gen: i64 = sqlx::query_scalar("SELECT seal_version FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(now_gen, old_gen + 1, "a write of new ciphertexts raises the generation");

    // Someone who can write rows puts the rotated-out tokens back (expired, so the next call
    // would refresh with the old refresh token, which the provider treats as a replay).
    let put_back = |sql: &'static str| {
        let (at, rt) = (old_at.clone(), old_rt.clone());
        let pool = app.pool.clone();
        async move { sqlx::query(sql).bind(at).bind(rt).bind(old_gen).execute(&pool).await }
    };
    let e = put_back(
        "UPDATE connections SET access_token_ct = $1, refresh_token_ct = $2,
                access_expires_at = now() - interval '1 minute' WHERE $3::bigint IS NOT NULL",
    )
    .await
    .expect_err("new sealed values without a new generation");
    assert!(e.to_string().contains("need a new seal_version"), "{e}");
    let e = put_back(
        "UPDATE connections SET access_token_ct = $1, refresh_token_ct = $2,
                access_expires_at = now() - interval '1 minute', seal_version = $3",
    )
    .await
    .expect_err("the generation set back");
    assert!(e.to_string().contains("may only grow"), "{e}");
    // A later generation is accepted by the database, and the old ciphertexts do not open.
    put_back(
        "UPDATE connections SET access_token_ct = $1, refresh_token_ct = $2,
                access_expires_at = now() - interval '1 minute', seal_version = seal_version + 1
         WHERE $3::bigint IS NOT NULL",
    )
    .await
    .unwrap();
    let r = app.token(&app.key, json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(r.status(), 500);
    let text = r.text().await.unwrap();
    assert!(text.contains("internal_error") && !text.contains(first["access_token"].as_str().unwrap()), "{text}");
    assert_eq!(
        app.provider.stats().refresh_calls,
        refreshes,
        "the rotated-out refresh token never reached the provider"
    );
}

#[tokio::test]
async fn a_webhook_secret_dropped_at_rotation_and_put_back_signs_nothing() {
    use crate::support::receiver::{Receiver, register};
    let app = spawn_app().await;
    let receiver = Receiver::start().await;
    let (webhook, leaked) = register(&app, &app.admin_key, &receiver.url, &["elicitation.cancelled"]).await;
    let (old_sealed, key_id): (Vec<u8>, String) =
        sqlx::query_as("SELECT secret_sealed, key_id FROM webhooks").fetch_one(&app.pool).await.unwrap();
    // The secret leaked: rotated with keep_previous=false, it stops at once.
    let r =
        app.admin(reqwest::Method::POST, &format!("/webhooks/{webhook}/rotate-secret?keep_previous=false"), None).await;
    assert_eq!(r.status(), 200);
    // Put back as it was, the database refuses; with a later generation, in either slot, it
    // does not open.
    let e = sqlx::query("UPDATE webhooks SET secret_sealed = $1").bind(&old_sealed).execute(&app.pool).await;
    assert!(e.expect_err("same generation").to_string().contains("need a new secret_version"));
    for statement in [
        "UPDATE webhooks SET secret_sealed = $1, secret_version = secret_version + 1 WHERE $2::text IS NOT NULL",
        "UPDATE webhooks SET previous_secret_sealed = $1, previous_key_id = $2,
                previous_until = now() + interval '1 hour', secret_version = secret_version + 1",
    ] {
        sqlx::query(statement).bind(&old_sealed).bind(&key_id).execute(&app.pool).await.unwrap();
        let (id, _) = app.elicit("alice", "testp").await;
        let r = app
            .client
            .post(format!("{}/v1/elicitations/{id}/cancel", app.base))
            .bearer_auth(&app.key)
            .json(&json!({"reason": "cancel"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        crate::support::eventually(std::time::Duration::from_secs(20), "an attempt is recorded", || async {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries WHERE last_error IS NOT NULL")
                .fetch_one(&app.pool)
                .await
                .unwrap();
            n >= 1
        })
        .await;
        sqlx::query("DELETE FROM webhook_deliveries").execute(&app.pool).await.unwrap();
    }
    // Nothing the receiver got verifies under the leaked secret: it got nothing at all.
    assert!(receiver.all().is_empty(), "{} deliveries", receiver.all().len());
    let _ = leaked;
}

#[tokio::test]
async fn rotate_key_gives_rows_sealed_before_generations_one_and_then_refuses_any_without() {
    use mcp_connect::domain::{ConnectionId, ProviderId, Subject, TenantId};
    use mcp_connect::vault::{Field, RowBinding};
    let app = spawn_app().await;
    // A row as the previous release wrote it: sealed under the first associated-data
    // format, no generation.
    let (t, s, p) =
        (TenantId::parse("acme").unwrap(), Subject::parse("alice").unwrap(), ProviderId::parse("github").unwrap());
    let id = ConnectionId::generate();
    let row = RowBinding { tenant: &t, subject: &s, provider: &p, connection: id, generation: None, issuer: None };
    let legacy = |token: &str| {
        let ring = app.state.keys.keyring().current();
        ring.seal(&row, Field::AccessToken, &secrecy::SecretString::from(token.to_owned())).unwrap()
    };
    // (Its issuer is the one the upgraded binary's start records for rows without one.)
    let insert = "INSERT INTO connections (id, tenant_id, subject, provider, scopes, status, key_id, access_token_ct, token_type, issuer)
                  VALUES ($1, 'acme', $2, 'github', '{}', 'active', 'k-old', $3, 'Bearer', $4)";
    sqlx::query(insert)
        .bind(id.as_uuid())
        .bind("alice")
        .bind(legacy("gho_legacy"))
        .bind(app.idp.issuer())
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(app.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"], "gho_legacy");

    let report = mcp_connect::flows::rotate::rotate_keys(&app.pool, &app.state.keys, 100, |_, _| {}).await.unwrap();
    assert_eq!((report.resealed, report.remaining, report.legacy_closed), (1, 0, true), "{report:?}");
    let (generation, key_id): (Option<i64>, String) =
        sqlx::query_as("SELECT seal_version, key_id FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(generation, Some(1));
    assert!(key_id.starts_with("dk:"), "moved under the tenant's data key: {key_id}");
    app.state.caches.forget_connection(&mcp_connect::domain::ConnectionKey {
        tenant: mcp_connect::domain::TenantId::parse("acme").unwrap(),
        subject: mcp_connect::domain::Subject::parse("alice").unwrap(),
        provider: mcp_connect::domain::ProviderId::parse("github").unwrap(),
    });
    assert_eq!(app.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"], "gho_legacy");

    // From now on a row without a generation is refused, and so is taking one out to put
    // it back with its generations started over.
    let e = sqlx::query(insert)
        .bind(uuid::Uuid::new_v4())
        .bind("bob")
        .bind(legacy("gho_bob"))
        .bind(app.idp.issuer())
        .execute(&app.pool)
        .await
        .expect_err("a sealed value without a generation");
    assert!(e.to_string().contains("rotate-key closed legacy writes"), "{e}");
    let e = sqlx::query("DELETE FROM connections").execute(&app.pool).await.expect_err("a delete");
    assert!(e.to_string().contains("never deleted"), "{e}");
    // Nor can the switch, the tombstones or whole tables be undone with plain statements.
    sqlx::query("INSERT INTO webhooks_deleted (id) VALUES (gen_random_uuid())").execute(&app.pool).await.unwrap();
    for (statement, why) in [
        ("UPDATE vault_state SET legacy_open = true", "stay closed"),
        ("DELETE FROM vault_state", "its one row"),
        ("TRUNCATE connections CASCADE", "never deleted"),
        ("TRUNCATE webhooks CASCADE", "remembered"),
        ("DELETE FROM webhooks_deleted", "remembered"),
    ] {
        let e = sqlx::query(statement).execute(&app.pool).await.expect_err(statement);
        assert!(e.to_string().contains(why), "{statement}: {e}");
    }
}

#[tokio::test]
async fn rotate_key_binds_the_issuer_into_rows_sealed_before_and_then_refuses_unbound_ones() {
    use mcp_connect::domain::{ConnectionId, ProviderId, Subject, TenantId};
    use mcp_connect::vault::{Field, RowBinding, is_issuer_bound};
    let app = spawn_app().await;
    // A row as the release before wrote it: a generation, no issuer in the seal.
    let (t, s, p) =
        (TenantId::parse("acme").unwrap(), Subject::parse("alice").unwrap(), ProviderId::parse("github").unwrap());
    let id = ConnectionId::generate();
    let unbound =
        RowBinding { tenant: &t, subject: &s, provider: &p, connection: id, generation: Some(1), issuer: None };
    let seal = |token: &str| {
        let ring = app.state.keys.keyring().current();
        ring.seal(&unbound, Field::AccessToken, &secrecy::SecretString::from(token.to_owned())).unwrap()
    };
    let insert = "INSERT INTO connections (id, tenant_id, subject, provider, scopes, status, key_id, access_token_ct, token_type, issuer, seal_version)
                  VALUES ($1, 'acme', $2, 'github', '{}', 'active', $3, $4, 'Bearer', $5, 1)";
    let key = app.state.keys.keyring().current().key_id().to_owned();
    sqlx::query(insert)
        .bind(id.as_uuid())
        .bind("alice")
        .bind(&key)
        .bind(seal("gho_unbound"))
        .bind(app.idp.issuer())
        .execute(&app.pool)
        .await
        .unwrap();
    assert_eq!(app.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"], "gho_unbound");

    // Re-sealed under the tenant's data key, with its issuer bound.
    let report = mcp_connect::flows::rotate::rotate_keys(&app.pool, &app.state.keys, 100, |_, _| {}).await.unwrap();
    assert_eq!((report.resealed, report.remaining, report.unbound_closed), (1, 0, true), "{report:?}");
    let (ct, generation): (Vec<u8>, i64) =
        sqlx::query_as("SELECT access_token_ct, seal_version FROM connections").fetch_one(&app.pool).await.unwrap();
    assert!(is_issuer_bound(&ct));
    assert_eq!(generation, 2);
    app.state.caches.forget_connection(&mcp_connect::domain::ConnectionKey {
        tenant: t.clone(),
        subject: s.clone(),
        provider: p.clone(),
    });
    assert_eq!(app.token_ok(json!({"subject": "alice", "provider": "github"})).await["access_token"], "gho_unbound");

    // From now on an unbound value is refused for a row that names an issuer: written anew,
    // or put back.
    let e = sqlx::query(insert)
        .bind(uuid::Uuid::new_v4())
        .bind("bob")
        .bind(&key)
        .bind(seal("gho_bob"))
        .bind(app.idp.issuer())
        .execute(&app.pool)
        .await
        .expect_err("an unbound sealed value");
    assert!(e.to_string().contains("rotate-key closed unbound writes"), "{e}");
    let e = sqlx::query("UPDATE connections SET access_token_ct = $1, seal_version = 3")
        .bind(seal("gho_again"))
        .execute(&app.pool)
        .await
        .expect_err("an unbound value put back");
    assert!(e.to_string().contains("rotate-key closed unbound writes"), "{e}");
    let e = sqlx::query("UPDATE vault_state SET unbound_open = true").execute(&app.pool).await.expect_err("reopened");
    assert!(e.to_string().contains("stay closed"), "{e}");
}
