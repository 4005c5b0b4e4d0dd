//! The admin API: connections, revocation (invariant 9), off-boarding, cancellation,
//! kill switches, the audit trail.

use crate::support::browser::{Browser, location};
use crate::support::{Options, assert_error, eventually_ok, spawn_app, spawn_on};
use mcp_connect_devproviders::TokenKind;
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn admin_calls_need_an_admin_key() {
    let app = spawn_app().await;
    let r = app.client.get(format!("{}/admin/v1/connections", app.base)).bearer_auth(&app.key).send().await.unwrap();
    assert_error(r, 403, "insufficient_scope").await;
    let r = app.client.get(format!("{}/admin/v1/connections", app.base)).send().await.unwrap();
    assert_error(r, 401, "invalid_api_key").await;
}

#[tokio::test]
async fn connections_are_listed_with_metadata_only_and_per_tenant() {
    let app = spawn_app().await;
    for s in ["alice", "bob", "carol"] {
        app.insert_connection("acme", s, "github", &format!("gho_secret_{s}"), &["read:user"], None).await;
    }
    app.insert_connection("beta", "dave", "github", "gho_beta", &["read:user"], None).await;
    let r = app.admin(Method::GET, "/connections?limit=2", None).await;
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(!text.contains("gho_secret"), "{text}");
    let page: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(page["connections"].as_array().unwrap().len(), 2);
    let next = page["next"].as_str().unwrap();
    let page2: serde_json::Value =
        app.admin(Method::GET, &format!("/connections?limit=2&after={next}"), None).await.json().await.unwrap();
    let subjects: Vec<&str> =
        page2["connections"].as_array().unwrap().iter().map(|c| c["subject"].as_str().unwrap()).collect();
    assert_eq!(subjects, vec!["carol"]);
    let id = page["connections"][0]["id"].as_str().unwrap();
    let one: serde_json::Value =
        app.admin(Method::GET, &format!("/connections/{id}"), None).await.json().await.unwrap();
    assert_eq!(one["subject"], "alice");
    assert_eq!(one["account_login"], "octo-alice");
    // Tenant beta's row is invisible to acme's admin.
    let beta_id: uuid::Uuid =
        sqlx::query_scalar("SELECT id FROM connections WHERE tenant_id = 'beta'").fetch_one(&app.pool).await.unwrap();
    assert_error(app.admin(Method::GET, &format!("/connections/{beta_id}"), None).await, 404, "connection_not_found")
        .await;
    assert_error(
        app.admin(Method::POST, &format!("/connections/{beta_id}/revoke"), None).await,
        404,
        "connection_not_found",
    )
    .await;
    assert_error(app.admin(Method::GET, "/connections?after=garbage", None).await, 400, "invalid_cursor").await;
}

#[tokio::test]
async fn revocation_reaches_the_provider_deletes_the_ciphertexts_and_stops_every_instance() {
    let a = spawn_app().await;
    let b = spawn_on(&a, &Options::default()).await;
    let (id, access, _) = a.insert_provider_grant("alice", "octo-alice", None).await;
    for app in [&a, &b] {
        assert_eq!(app.token_ok(json!({"subject": "alice", "provider": "testp"})).await["status"], "connected");
    }
    let r = a.admin(Method::POST, &format!("/connections/{id}/revoke"), None).await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["provider_result"], "revoked");
    // The provider saw the refresh token first, then the access token.
    let kinds: Vec<TokenKind> = a.provider.stats().revocations.iter().map(|r| r.kind).collect();
    assert_eq!(kinds, vec![TokenKind::Refresh, TokenKind::Access]);
    let me = reqwest::Client::new()
        .get(format!("{}/userinfo", a.provider.base_url()))
        .bearer_auth(&access)
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), 401, "the grant is dead at the provider");
    let (status, at, rt): (String, Option<Vec<u8>>, Option<Vec<u8>>) =
        sqlx::query_as("SELECT status, access_token_ct, refresh_token_ct FROM connections")
            .fetch_one(&a.pool)
            .await
            .unwrap();
    assert_eq!(status, "revoked");
    assert!(at.is_none() && rt.is_none());
    // At once on the instance that revoked; on the other as soon as the change
    // notification arrives (the barrier waits for it).
    assert_eq!(a.token_ok(json!({"subject": "alice", "provider": "testp"})).await["status"], "connect_required");
    assert!(b.state.caches.barrier(&b.pool).await);
    assert_eq!(b.token_ok(json!({"subject": "alice", "provider": "testp"})).await["status"], "connect_required");
    let audit: serde_json::Value =
        a.admin(Method::GET, "/audit?kind=connection_revoked", None).await.json().await.unwrap();
    assert_eq!(audit["events"][0]["detail"]["provider_result"], "revoked");
}

#[tokio::test]
async fn a_provider_that_fails_to_revoke_does_not_keep_the_local_grant_alive() {
    let app = spawn_app().await;
    let id = app.insert_connection("acme", "alice", "deadrev", "tok", &["x"], None).await;
    let r = app.admin(Method::POST, &format!("/connections/{id}/revoke"), None).await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(body["provider_result"].as_str().unwrap().starts_with("failed"), "{body}");
    let status: String = sqlx::query_scalar("SELECT status FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(status, "revoked");
    let b = app.token_ok(json!({"subject": "alice", "provider": "deadrev"})).await;
    assert_eq!(b["status"], "connect_required");
    let audit: serde_json::Value =
        app.admin(Method::GET, "/audit?kind=connection_revoked", None).await.json().await.unwrap();
    assert!(audit["events"][0]["detail"]["provider_result"].as_str().unwrap().starts_with("failed"));
}

#[tokio::test]
async fn off_boarding_revokes_everything_of_one_subject_and_nothing_else() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "a1", &["read:user"], None).await;
    app.insert_connection("acme", "alice", "gitlab", "a2", &["read_user"], None).await;
    app.insert_connection("acme", "bob", "github", "b1", &["read:user"], None).await;
    let r = app.admin(Method::POST, "/revocations", Some(json!({"subject": "alice"}))).await;
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["revoked"].as_array().unwrap().len(), 2);
    // GitHub has no RFC 7009 endpoint: said so, and revoked locally all the same.
    assert_eq!(body["revoked"][0]["provider_result"], "no_revocation_endpoint");
    let live: Vec<String> = sqlx::query_scalar("SELECT subject FROM connections WHERE status = 'active'")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(live, vec!["bob".to_owned()]);
    // Optionally one provider only.
    app.insert_connection("acme", "carol", "github", "c1", &["read:user"], None).await;
    app.insert_connection("acme", "carol", "gitlab", "c2", &["read_user"], None).await;
    let body: serde_json::Value = app
        .admin(Method::POST, "/revocations", Some(json!({"subject": "carol", "provider": "gitlab"})))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["revoked"].as_array().unwrap().len(), 1);
    assert_eq!(app.token_ok(json!({"subject": "carol", "provider": "github"})).await["status"], "connected");
}

#[tokio::test]
async fn off_boarding_cancels_links_in_flight_so_a_later_callback_stores_nothing() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let (other_id, _) = app.elicit("bob", "testp").await;
    let browser = Browser::new();
    let cb = browser.connect_until_callback(&app, &url, "alice", "octo-alice").await;
    let r = app.admin(Method::POST, "/revocations", Some(json!({"subject": "alice"}))).await;
    assert_eq!(r.status(), 200);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["cancelled_elicitations"], 1, "{body}");
    assert_eq!(browser.get(&cb).await.status(), 400);
    assert_eq!(app.provider.stats().authorization_code_exchanges, 0);
    assert_eq!(app.connection_count().await, 0);
    assert_eq!(app.elicitation_status(&id).await, "cancelled");
    assert_eq!(app.elicitation_status(&other_id).await, "pending", "another subject's link is untouched");
}

#[tokio::test]
async fn revoking_one_connection_cancels_that_subjects_links_for_its_provider_only() {
    let app = spawn_app().await;
    let conn = app.insert_connection("acme", "alice", "testp", "a1", &["openid"], None).await;
    // A pending link for more scopes of the same provider, and one for another provider.
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp", "scopes": ["openid", "email"]})).await;
    let same = b["elicitation"]["id"].as_str().unwrap().to_owned();
    let url = b["elicitation"]["url"].as_str().unwrap().to_owned();
    let (other, _) = app.elicit("alice", "plainp").await;
    let browser = Browser::new();
    let cb = browser.connect_until_callback(&app, &url, "alice", "octo-alice").await;
    let r = app.admin(Method::POST, &format!("/connections/{conn}/revoke"), None).await;
    assert_eq!(r.status(), 200);
    assert_eq!(browser.get(&cb).await.status(), 400);
    assert_eq!(app.elicitation_status(&same).await, "cancelled");
    assert_eq!(app.elicitation_status(&other).await, "pending");
    let live: i64 = sqlx::query_scalar("SELECT count(*) FROM connections WHERE status = 'active'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(live, 0);
}

#[tokio::test]
async fn cancelled_elicitations_stop_their_states_from_working() {
    let app = spawn_app().await;
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    let url = b["elicitation"]["url"].as_str().unwrap();
    let browser = Browser::new();
    let cb = browser.connect_until_callback(&app, url, "alice", "octo-alice").await;
    let r = app.admin(Method::POST, "/elicitations/cancel", Some(json!({"subject": "alice"}))).await;
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["cancelled"].as_array().unwrap().len(), 1);
    assert_eq!(browser.get(&cb).await.status(), 400);
    assert_eq!(app.provider.stats().authorization_code_exchanges, 0);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(n, 0);
    // The MCP server's retry gets a fresh link, not the cancelled one.
    let again =
        app.token_ok(json!({"subject": "alice", "provider": "testp", "elicitation_id": b["elicitation"]["id"]})).await;
    assert_ne!(again["elicitation"]["id"], b["elicitation"]["id"]);
    assert_error(app.admin(Method::POST, "/elicitations/cancel", Some(json!({}))).await, 400, "invalid_request").await;
}

#[tokio::test]
async fn the_kill_switch_stops_new_elicitations_then_handouts_and_is_reversible() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_alice", &["read:user"], None).await;
    let r = app
        .admin(
            Method::PUT,
            "/kill-switches/github",
            Some(json!({"mode": "no_new_elicitations", "reason": "incident 42"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    // New elicitations refused, stored tokens still handed out.
    assert_error(app.token(&app.key, json!({"subject": "bob", "provider": "github"})).await, 403, "provider_disabled")
        .await;
    assert_eq!(app.token_ok(json!({"subject": "alice", "provider": "github"})).await["status"], "connected");
    // Another tenant is not affected by acme's switch.
    assert_eq!(app.token(&app.beta_key, json!({"subject": "bob", "provider": "github"})).await.status(), 200);
    // Strict mode: no token handouts either.
    app.admin(Method::PUT, "/kill-switches/github", Some(json!({"mode": "no_token_handouts"}))).await;
    assert_error(
        app.token(&app.key, json!({"subject": "alice", "provider": "github"})).await,
        403,
        "provider_disabled",
    )
    .await;
    let list: serde_json::Value = app.admin(Method::GET, "/kill-switches", None).await.json().await.unwrap();
    assert_eq!(list["kill_switches"][0]["mode"], "no_token_handouts");
    // Off again.
    assert_eq!(app.admin(Method::DELETE, "/kill-switches/github", None).await.status(), 200);
    assert_eq!(app.token_ok(json!({"subject": "alice", "provider": "github"})).await["status"], "connected");
    assert_eq!(app.token_ok(json!({"subject": "bob", "provider": "github"})).await["status"], "connect_required");
    let audit: serde_json::Value =
        app.admin(Method::GET, "/audit?kind=kill_switch_changed", None).await.json().await.unwrap();
    assert_eq!(audit["events"].as_array().unwrap().len(), 3);
    assert_error(
        app.admin(Method::PUT, "/kill-switches/github", Some(json!({"mode": "sometimes"}))).await,
        400,
        "invalid_request",
    )
    .await;
    assert_error(
        app.admin(Method::PUT, "/kill-switches/nope", Some(json!({"mode": "no_token_handouts"}))).await,
        400,
        "unknown_provider",
    )
    .await;
    // A reason that could forge a line in a receiver's log, or is too long: refused by the
    // flow (the CLI shares the check), and nothing changes.
    for reason in [json!("ok\nFORGED LINE"), json!("x".repeat(501))] {
        let body = json!({"mode": "no_token_handouts", "reason": reason});
        let r = app.admin(Method::PUT, "/kill-switches/github", Some(body)).await;
        let e = assert_error(r, 400, "invalid_request").await;
        assert!(e["error_description"].as_str().unwrap().contains("500 printable characters"), "{e}");
    }
    let list: serde_json::Value = app.admin(Method::GET, "/kill-switches", None).await.json().await.unwrap();
    assert_eq!(list["kill_switches"], json!([]), "nothing was set");
}

#[tokio::test]
async fn a_killed_provider_stops_the_connect_pages_and_callbacks_in_flight() {
    let app = spawn_app().await;
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    let url = b["elicitation"]["url"].as_str().unwrap();
    let browser = Browser::new();
    let page = browser.open(&app, url, "alice").await.text().await.unwrap();
    let r = browser.consent(&app, "testp", &page, "connect").await;
    let cb = browser.answer_authorize(&location(&r), "octo-alice", "allow").await;
    app.admin(Method::PUT, "/kill-switches/testp", Some(json!({"mode": "no_new_elicitations"}))).await;
    assert_eq!(browser.get(&cb).await.status(), 503);
    let r = browser.get(url).await;
    assert_eq!(r.status(), 503, "{}", r.text().await.unwrap());
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn the_audit_trail_filters_pages_and_records_handouts_without_secrets() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "gho_SECRET_handout", &["read:user"], None).await;
    for _ in 0..3 {
        app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    }
    app.token_ok(json!({"subject": "bob", "provider": "github"})).await;
    // Hand-outs are counted per minute and written when it closes; drain writes them now.
    assert!(app.state.handouts.drain(std::time::Duration::from_secs(5)).await);
    // A row shows once every transaction begun before it has ended (other tests' too).
    let listed = |path: &'static str, n: usize| {
        let app = &app;
        async move {
            eventually_ok(std::time::Duration::from_secs(5), &format!("{path}: {n} events"), || async {
                let page: serde_json::Value = app.admin(Method::GET, path, None).await.json().await.unwrap();
                if page["events"].as_array().is_some_and(|e| e.len() >= n) { Ok(page) } else { Err(page) }
            })
            .await
        }
    };
    let r = app.admin(Method::GET, "/audit?kind=token_handed_out&subject=alice&limit=2", None).await;
    assert!(!r.text().await.unwrap().contains("gho_SECRET"));
    let page = listed("/audit?kind=token_handed_out&subject=alice", 1).await;
    let rows = page["events"].as_array().unwrap();
    let counted: i64 = rows.iter().map(|e| e["count"].as_i64().unwrap()).sum();
    assert_eq!(counted, 3, "alice's three hand-outs, counted in her minute's row: {page}");
    assert!(rows.len() <= 2, "one row per minute (two if the calls straddled one): {page}");
    assert_eq!(rows[0]["api_key_id"], &app.key[5..21]);
    assert!(rows[0]["connection_id"].is_string());
    assert!(rows[0]["first_at"].is_string() && rows[0]["last_at"].is_string() && rows[0]["instance"].is_string());
    assert_eq!(rows[0]["instance"], app.state.handouts.instance());
    // Paging: bob's elicitation and alice's hand-out rows, one, then the rest.
    let total: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_events WHERE tenant_id = 'acme'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let total = usize::try_from(total).unwrap();
    assert!(total >= 2);
    listed("/audit?limit=100", total).await;
    let first: serde_json::Value = app.admin(Method::GET, "/audit?limit=1", None).await.json().await.unwrap();
    assert_eq!(first["events"].as_array().unwrap().len(), 1);
    let before = first["next_before"].as_str().unwrap();
    let rest: serde_json::Value =
        app.admin(Method::GET, &format!("/audit?before={before}&limit=100"), None).await.json().await.unwrap();
    assert_eq!(rest["events"].as_array().unwrap().len(), total - 1);
    assert!(rest["next_before"].is_null(), "the last page says so");
    let bob: serde_json::Value = app.admin(Method::GET, "/audit?subject=bob", None).await.json().await.unwrap();
    assert_eq!(bob["events"][0]["kind"], "elicitation_created");
    assert_eq!(bob["events"][0]["count"], 1);
    let since = (time::OffsetDateTime::now_utc() + time::Duration::minutes(1))
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let none: serde_json::Value =
        app.admin(Method::GET, &format!("/audit?since={since}"), None).await.json().await.unwrap();
    assert_eq!(none["events"].as_array().unwrap().len(), 0);
    assert_error(app.admin(Method::GET, "/audit?since=yesterday", None).await, 400, "invalid_request").await;
    for bad in ["before=12", "after=x-1", "before=1-2&after=1-2", "after=99999999999999999999-1", "provider=%00"] {
        assert_error(app.admin(Method::GET, &format!("/audit?{bad}"), None).await, 400, "invalid_request").await;
    }
    // The connection's last use is recorded, and the admin API shows it.
    eventually_ok(std::time::Duration::from_secs(5), "the last use is recorded", || async {
        let list: serde_json::Value =
            app.admin(Method::GET, "/connections?subject=alice", None).await.json().await.unwrap();
        if list["connections"][0]["last_used_at"].is_string() { Ok(()) } else { Err(list) }
    })
    .await;
    // Every event of the trail is secret-free.
    let all: Vec<String> = sqlx::query_scalar("SELECT a::text FROM audit_events a").fetch_all(&app.pool).await.unwrap();
    assert!(all.iter().all(|e| !e.contains("gho_SECRET") && !e.contains(&app.key)));
}

/// The writer's batch statement stores every field of a hand-out row as given, with the
/// tenant, subject and provider of the connection it names, once: a batch tried again
/// (its commit went through but the reply was lost) writes nothing.
#[tokio::test]
async fn a_batch_of_handout_rows_is_stored_field_for_field() {
    use mcp_connect::domain::ApiKeyId;
    use mcp_connect::store::audit::{HandoutRow, insert_handouts_paced};
    let app = spawn_app().await;
    let subject = "o'brien+\u{e9}@example.com";
    let alice = app.insert_connection("acme", subject, "github", "gho_x", &["read:user"], None).await.as_uuid();
    let bob = app.insert_connection("beta", "bob", "testp", "gho_y", &["read:user"], None).await.as_uuid();
    let at = time::OffsetDateTime::from_unix_timestamp(1_796_000_040).unwrap();
    let row = |connection_id, key: &str, count| HandoutRow {
        minute: at,
        connection_id,
        api_key_id: ApiKeyId::parse(key).unwrap(),
        proxied: None,
        count,
        first_at: at + time::Duration::microseconds(123_456),
        last_at: at + time::Duration::microseconds(59_999_999),
        holder: None,
    };
    let rows = vec![row(alice, "0123456789abcdef", 7), row(bob, "00000000000000a0", 1)];
    let batch = uuid::Uuid::new_v4();
    let write = |batch| insert_handouts_paced(&app.pool, "host-0000beef", batch, &rows, || std::future::ready(()));
    write(batch).await.unwrap();
    // Written again (a retry after a commit whose reply was lost): nothing is counted twice.
    write(batch).await.unwrap();
    let batches: Vec<uuid::Uuid> =
        sqlx::query_scalar("SELECT DISTINCT batch FROM audit_events WHERE kind = 'token_handed_out'")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(batches, vec![batch], "the rows name their batch");

    type Row = (
        time::OffsetDateTime,
        String,
        String,
        String,
        String,
        uuid::Uuid,
        String,
        String,
        i32,
        time::OffsetDateTime,
        time::OffsetDateTime,
    );
    let stored: Vec<Row> = sqlx::query_as(
        "SELECT at, tenant_id, subject, provider, kind, connection_id, api_key_id, instance, count, first_at, last_at
         FROM audit_events WHERE kind = 'token_handed_out' ORDER BY count DESC",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let first = at + time::Duration::microseconds(123_456);
    let last = at + time::Duration::microseconds(59_999_999);
    let handed = "token_handed_out".to_owned();
    let host = "host-0000beef".to_owned();
    assert_eq!(
        stored,
        vec![
            (
                at,
                "acme".into(),
                subject.into(),
                "github".into(),
                handed.clone(),
                alice,
                "0123456789abcdef".into(),
                host.clone(),
                7,
                first,
                last
            ),
            (
                at,
                "beta".into(),
                "bob".into(),
                "testp".into(),
                handed,
                bob,
                "00000000000000a0".into(),
                host,
                1,
                first,
                last
            ),
        ]
    );
    // Rows of another batch under the same key (a wall clock stepping back can give two
    // rows of a connection and key the same first use) are other hand-outs: counted.
    write(uuid::Uuid::new_v4()).await.unwrap();
    let counted: i64 =
        sqlx::query_scalar("SELECT sum(count)::bigint FROM audit_events WHERE kind = 'token_handed_out'")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(counted, 2 * (7 + 1));
}

/// A row of a hand-out served from the lookup cache names who holds the connection from
/// the cache's entry it keeps, not from the connection's row (at a million connections
/// that read was about half a row's cost): as the person was when handed the token, even
/// if the connection is re-granted through another IdP (same id, another issuer) before
/// the row is written. A row without an entry, or with another connection's, is named from
/// the row.
#[tokio::test]
async fn a_handout_row_served_from_the_cache_names_its_holder_from_the_entry_not_the_row() {
    use mcp_connect::domain::{ApiKeyId, ConnectionKey, ProviderId, Subject, TenantId};
    use mcp_connect::store::audit::{HandoutRow, insert_handouts_paced};
    use mcp_connect::store::connections::packed::{CachedConnection, PackedConnection};
    let app = spawn_app().await;
    let subject = "o'brien+\u{e9}@example.com";
    let alice = app.insert_connection("acme", subject, "github", "gho_x", &["read:user"], None).await.as_uuid();
    let bob = app.insert_connection("beta", "bob", "testp", "gho_y", &["read:user"], None).await.as_uuid();
    let key = ConnectionKey {
        tenant: TenantId::parse("acme").unwrap(),
        subject: Subject::parse(subject).unwrap(),
        provider: ProviderId::parse("github").unwrap(),
    };
    let stored = mcp_connect::store::connections::find_connection(&app.pool, &key).await.unwrap().unwrap();
    let cached = CachedConnection::of(&stored).unwrap();
    let packed = PackedConnection::pack(&key, &cached, cached.shape.clone(), 0, 0).unwrap();
    let issuer = stored.issuer.clone().unwrap();
    assert_eq!(packed.holder(), Some(("acme", subject, "github", issuer.as_str())));
    // Re-granted through another IdP after the hand-out, before its row is written.
    sqlx::query("UPDATE connections SET issuer = 'https://other-idp.example' WHERE id = $1")
        .bind(alice)
        .execute(&app.pool)
        .await
        .unwrap();
    let at = time::OffsetDateTime::from_unix_timestamp(1_796_000_040).unwrap();
    let row = |connection_id, count, holder| HandoutRow {
        minute: at,
        connection_id,
        api_key_id: ApiKeyId::parse("0123456789abcdef").unwrap(),
        proxied: None,
        count,
        first_at: at,
        last_at: at,
        holder,
    };
    let rows = vec![row(alice, 3, Some(packed.clone())), row(bob, 2, None), row(bob, 1, Some(packed))];
    insert_handouts_paced(&app.pool, "host-0000cafe", uuid::Uuid::new_v4(), &rows, || std::future::ready(()))
        .await
        .unwrap();
    type Named = (uuid::Uuid, Option<String>, Option<String>, Option<String>, Option<String>);
    let named: Vec<Named> = sqlx::query_as(
        "SELECT connection_id, tenant_id, subject, provider, issuer FROM audit_events
         WHERE kind = 'token_handed_out' ORDER BY count DESC",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let bob_issuer: Option<String> = sqlx::query_scalar("SELECT issuer FROM connections WHERE id = $1")
        .bind(bob)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let bob_named = (bob, Some("beta".into()), Some("bob".into()), Some("testp".into()), bob_issuer);
    assert_eq!(
        named,
        vec![
            (alice, Some("acme".into()), Some(subject.into()), Some("github".into()), Some(issuer)),
            bob_named.clone(),
            bob_named,
        ],
        "the entry names alice's row as she was; bob's rows are named from his row, even the one given alice's entry"
    );
}

/// Marking connections used writes a row only when the last mark is over ten minutes old
/// (by any instance), and never for an id that is not a connection; between marks the last
/// use shown is the latest the connection's audit rows since the mark record.
#[tokio::test]
async fn last_use_is_marked_every_ten_minutes_and_read_from_the_trail_between() {
    use mcp_connect::store::audit::{HandoutRow, insert_handouts_paced};
    use mcp_connect::store::connections::touch_connections;
    let app = spawn_app().await;
    let (fresh, _, _) = app.insert_provider_grant("alice", "octo-alice", None).await;
    let (recent, _, _) = app.insert_provider_grant("bob", "octo-bob", None).await;
    let (stale, _, _) = app.insert_provider_grant("carol", "octo-carol", None).await;
    let [fresh, recent, stale] = [fresh, recent, stale].map(|c| c.as_uuid());
    for (id, ago) in [(recent, 300), (stale, 660)] {
        sqlx::query("INSERT INTO connection_usage VALUES ($1, now() - make_interval(secs => $2))")
            .bind(id)
            .bind(f64::from(ago))
            .execute(&app.pool)
            .await
            .unwrap();
    }
    let marked = |id: uuid::Uuid| {
        sqlx::query_scalar::<_, f64>(
            "SELECT extract(epoch FROM now() - last_used_at)::float8 FROM connection_usage WHERE connection_id = $1",
        )
        .bind(id)
        .fetch_optional(&app.pool)
    };
    touch_connections(&app.pool, &[fresh, recent, stale, uuid::Uuid::new_v4()]).await.unwrap();
    assert!(marked(fresh).await.unwrap().unwrap() < 5.0, "a first use is marked");
    assert!(marked(recent).await.unwrap().unwrap() >= 300.0, "a mark from 5 minutes ago is kept");
    assert!(marked(stale).await.unwrap().unwrap() < 5.0, "a mark from 11 minutes ago is renewed");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM connection_usage").fetch_one(&app.pool).await.unwrap();
    assert_eq!(rows, 3, "an unknown id is not marked");

    // Bob, marked 5 minutes ago, used since: the admin API shows the use his audit rows
    // record, not the mark. A row of his folded from before the mark's window (its use
    // later) is not read; a row of Carol's is hers; a use an instance's clock puts ahead of
    // the database's is shown as of now.
    let now = time::OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
    let minute = |t: time::OffsetDateTime| t.replace_second(0).unwrap();
    let row = |connection_id, at: time::OffsetDateTime, last: time::OffsetDateTime| HandoutRow {
        minute: minute(at),
        connection_id,
        api_key_id: mcp_connect::domain::ApiKeyId::parse("0123456789abcdef").unwrap(),
        proxied: None,
        count: 1,
        first_at: last,
        last_at: last,
        holder: None,
    };
    let used = now - time::Duration::seconds(30);
    let rows = [
        row(recent, used, used),
        row(recent, now - time::Duration::minutes(20), now - time::Duration::seconds(10)),
        row(stale, now, now + time::Duration::minutes(5)),
    ];
    insert_handouts_paced(&app.pool, "host-0000beef", uuid::Uuid::new_v4(), &rows, || std::future::ready(()))
        .await
        .unwrap();
    let app = &app;
    let last_used = |subject: &'static str| async move {
        let list: serde_json::Value =
            app.admin(Method::GET, &format!("/connections?subject={subject}"), None).await.json().await.unwrap();
        let at = list["connections"][0]["last_used_at"].as_str().unwrap().to_owned();
        time::OffsetDateTime::parse(&at, &time::format_description::well_known::Rfc3339).unwrap()
    };
    assert_eq!(last_used("bob").await, used, "between marks, the trail's last use");
    let carol = last_used("carol").await;
    let db_now: time::OffsetDateTime = sqlx::query_scalar("SELECT now()").fetch_one(&app.pool).await.unwrap();
    assert!(carol > now - time::Duration::seconds(1) && carol <= db_now, "carol's own row, as of now ({carol})");
    let alice = last_used("alice").await;
    assert!((now - alice).abs() < time::Duration::seconds(5), "alice: her mark ({alice})");
}

/// A batch larger than one statement's chunk goes out as several statements with a pause
/// between each two (the writer's pacing), in one transaction, and arrives whole.
#[tokio::test]
async fn a_paced_batch_is_stored_whole_across_its_chunks() {
    use mcp_connect::store::audit::{CHUNK, HandoutRow, insert_handouts_paced};
    let app = spawn_app().await;
    let at = time::OffsetDateTime::from_unix_timestamp(1_796_000_040).unwrap();
    let n = 2 * CHUNK + 3;
    let rows: Vec<_> = (0..n)
        .map(|i| HandoutRow {
            minute: at,
            connection_id: uuid::Uuid::new_v4(),
            api_key_id: mcp_connect::domain::ApiKeyId::parse("0123456789abcdef").unwrap(),
            proxied: None,
            count: i as i32 + 1,
            first_at: at,
            last_at: at,
            holder: None,
        })
        .collect();
    let mut pauses = 0;
    insert_handouts_paced(&app.pool, "host-0000beef", uuid::Uuid::new_v4(), &rows, || {
        pauses += 1;
        std::future::ready(())
    })
    .await
    .unwrap();
    assert_eq!(pauses, 2, "three statements, two pauses");
    let mut stored: Vec<(uuid::Uuid, i32)> =
        sqlx::query_as("SELECT connection_id, count FROM audit_events WHERE kind = 'token_handed_out'")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    stored.sort_by_key(|r| r.1);
    let expected: Vec<_> = rows.iter().map(|r| (r.connection_id, r.count)).collect();
    assert_eq!(stored, expected);
}

#[tokio::test]
async fn draining_the_handout_audit_writes_the_open_minute_at_once() {
    let app = spawn_app().await;
    let id = app.insert_connection("acme", "alice", "github", "gho_q", &["read:user"], None).await;
    let key = mcp_connect::domain::ApiKeyId::parse("0123456789abcdef").unwrap();
    for _ in 0..10 {
        app.state.handouts.record(id, &key, None).await;
    }
    let started = std::time::Instant::now();
    assert!(app.state.handouts.drain(std::time::Duration::from_secs(5)).await, "drained");
    assert_eq!(app.state.handouts.pending(), 0);
    let (rows, n): (i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(count), 0)::bigint FROM audit_events WHERE kind = 'token_handed_out'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(n, 10, "every hand-out is counted in the table when drain returns");
    assert!(rows <= 2, "in one row (two if a minute ended meanwhile), not ten: {rows}");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
}
