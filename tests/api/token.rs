//! `POST /v1/token`: both answers, elicitation reuse, reconcile outcomes, bad input.

use crate::support::{assert_error, spawn_app};
use mcp_connect::domain::ElicitationId;
use serde_json::json;
use time::OffsetDateTime;

#[tokio::test]
async fn without_a_connection_the_answer_is_connect_required_with_an_opaque_url() {
    let app = spawn_app().await;
    let b = app.token_ok(json!({"subject": "alice@example.com", "provider": "github"})).await;
    assert_eq!(b["status"], "connect_required");
    let id = b["elicitation"]["id"].as_str().unwrap();
    ElicitationId::parse(id).expect("id is canonical");
    let url = b["elicitation"]["url"].as_str().unwrap();
    assert_eq!(url, format!("{}/connect/github?e={id}", app.base));
    // Nothing but the handle: no subject, no e-mail, no credential.
    assert!(!url.contains("alice"));
    assert!(!url.contains("example.com"));
    assert_eq!(b["mcp"]["mode"], "url");
    assert_eq!(b["mcp"]["url"], url);
    assert_eq!(b["mcp"]["elicitationId"], id);
    assert!(b["mcp"]["message"].as_str().unwrap().starts_with("Acme Assistant needs access to your GitHub account."));
    assert_eq!(b["provider_name"], "GitHub");
    let expires = OffsetDateTime::parse(
        b["elicitation"]["expires_at"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let ttl = expires - OffsetDateTime::now_utc();
    assert!(ttl > time::Duration::minutes(9) && ttl <= time::Duration::minutes(10));
}

#[tokio::test]
async fn the_elicitation_message_names_the_mcp_server_the_caller_names() {
    let app = spawn_app().await;
    let body = json!({"subject": "alice", "provider": "testp", "server_name": "Whoami Tools"});
    let b = app.token_ok(body).await;
    let message = b["mcp"]["message"].as_str().unwrap();
    assert!(message.starts_with("Whoami Tools needs access to your Test Provider account."), "{message}");
    assert_eq!(b["provider_name"], "Test Provider");
    // The same pending elicitation, asked for by a server that names itself otherwise.
    let again = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(again["elicitation"]["id"], b["elicitation"]["id"]);
    assert!(again["mcp"]["message"].as_str().unwrap().starts_with("Acme Assistant needs access"), "{again}");
}

#[tokio::test]
async fn elicitation_ids_carry_128_random_bits() {
    let app = spawn_app().await;
    let mut seen = std::collections::HashSet::new();
    for i in 0..20 {
        let b = app.token_ok(json!({"subject": format!("user{i}"), "provider": "github"})).await;
        let id = uuid::Uuid::parse_str(b["elicitation"]["id"].as_str().unwrap()).unwrap();
        seen.insert(id);
    }
    assert_eq!(seen.len(), 20);
    // A v4 UUID would fix the version nibble in every id; ours are random throughout.
    let versions: std::collections::HashSet<u8> = seen.iter().map(|u| u.as_bytes()[6] >> 4).collect();
    assert!(versions.len() > 1);
}

#[tokio::test]
async fn a_repeated_call_returns_the_same_pending_elicitation() {
    let app = spawn_app().await;
    let a = app.token_ok(json!({"subject": "alice", "provider": "github", "scopes": ["repo", "read:user"]})).await;
    let b = app.token_ok(json!({"subject": "alice", "provider": "github", "scopes": ["read:user", "repo"]})).await;
    assert_eq!(a["elicitation"]["id"], b["elicitation"]["id"]);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM elicitations").fetch_one(&app.pool).await.unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn concurrent_first_calls_converge_on_one_elicitation() {
    let app = spawn_app().await;
    let calls = (0..10).map(|_| app.token_ok(json!({"subject": "alice", "provider": "github"})));
    let answers = futures_util::future::join_all(calls).await;
    let ids: std::collections::HashSet<String> =
        answers.iter().map(|b| b["elicitation"]["id"].as_str().unwrap().to_owned()).collect();
    assert_eq!(ids.len(), 1);
}

#[tokio::test]
async fn other_scopes_subject_or_provider_get_their_own_elicitation() {
    let app = spawn_app().await;
    let base = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    for other in [
        json!({"subject": "alice", "provider": "github", "scopes": ["repo"]}),
        json!({"subject": "bob", "provider": "github"}),
        json!({"subject": "alice", "provider": "gitlab"}),
    ] {
        let b = app.token_ok(other).await;
        assert_ne!(b["elicitation"]["id"], base["elicitation"]["id"]);
    }
}

#[tokio::test]
async fn an_overdue_pending_elicitation_is_replaced_by_a_fresh_one() {
    let app = spawn_app().await;
    let a = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    sqlx::query("UPDATE elicitations SET expires_at = now() - interval '1 second'").execute(&app.pool).await.unwrap();
    let b = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_ne!(a["elicitation"]["id"], b["elicitation"]["id"]);
    let old: String = sqlx::query_scalar("SELECT status FROM elicitations WHERE id = $1::uuid")
        .bind(a["elicitation"]["id"].as_str().unwrap())
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(old, "expired");
}

#[tokio::test]
async fn with_a_connection_the_answer_is_connected_with_the_token() {
    let app = spawn_app().await;
    let exp = OffsetDateTime::now_utc() + time::Duration::hours(1);
    let id =
        app.insert_connection("acme", "alice", "github", "gho_alice_token", &["read:user", "repo"], Some(exp)).await;
    let b = app.token_ok(json!({"subject": "alice", "provider": "github", "scopes": ["repo"]})).await;
    assert_eq!(b["status"], "connected");
    assert_eq!(b["access_token"], "gho_alice_token");
    assert_eq!(b["token_type"], "Bearer");
    assert_eq!(b["connection_id"], id.to_string());
    assert_eq!(b["account"]["id"], "4242");
    assert_eq!(b["account"]["login"], "octo-alice");
    assert_eq!(b["scopes"], json!(["read:user", "repo"]));
    assert!(b["expires_at"].as_str().is_some());
    // No scopes asked: whatever the connection has will do.
    let r = app.token(&app.key, json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(r.headers()["content-type"], "application/json", "as JSON");
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["status"], "connected");
}

#[tokio::test]
async fn a_connection_without_the_scopes_asked_for_leads_to_a_connect_for_the_union() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "tok", &["read:user"], None).await;
    let b = app.token_ok(json!({"subject": "alice", "provider": "github", "scopes": ["repo"]})).await;
    assert_eq!(b["status"], "connect_required");
    let scopes: Vec<String> = sqlx::query_scalar("SELECT scopes FROM elicitations").fetch_one(&app.pool).await.unwrap();
    assert_eq!(scopes, vec!["read:user".to_owned(), "repo".to_owned()]);
}

#[tokio::test]
async fn a_connection_needing_reauth_is_not_handed_out() {
    let app = spawn_app().await;
    app.insert_connection("acme", "alice", "github", "tok", &["read:user"], None).await;
    sqlx::query("UPDATE connections SET status = 'needs_reauth'").execute(&app.pool).await.unwrap();
    let b = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(b["status"], "connect_required");
}

#[tokio::test]
async fn reconcile_returns_the_pending_elicitation_again() {
    let app = spawn_app().await;
    let a = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    let id = a["elicitation"]["id"].as_str().unwrap();
    let b = app.token_ok(json!({"subject": "alice", "provider": "github", "elicitation_id": id})).await;
    assert_eq!(b["status"], "connect_required");
    assert_eq!(b["elicitation"]["id"], id);
}

#[tokio::test]
async fn reconcile_reports_a_declined_elicitation_without_a_new_prompt() {
    let app = spawn_app().await;
    let a = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    let id = a["elicitation"]["id"].as_str().unwrap();
    sqlx::query("UPDATE elicitations SET status = 'declined'").execute(&app.pool).await.unwrap();
    let b = app.token_ok(json!({"subject": "alice", "provider": "github", "elicitation_id": id})).await;
    assert_eq!(b, json!({"status": "declined", "elicitation_id": id, "provider_name": "GitHub"}));
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM elicitations").fetch_one(&app.pool).await.unwrap();
    assert_eq!(n, 1);
}

#[tokio::test]
async fn reconcile_replaces_a_cancelled_or_expired_elicitation() {
    let app = spawn_app().await;
    for status in ["cancelled", "expired"] {
        let a = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
        let id = a["elicitation"]["id"].as_str().unwrap().to_owned();
        sqlx::query("UPDATE elicitations SET status = $1 WHERE id = $2::uuid")
            .bind(status)
            .bind(&id)
            .execute(&app.pool)
            .await
            .unwrap();
        let b = app.token_ok(json!({"subject": "alice", "provider": "github", "elicitation_id": id})).await;
        assert_eq!(b["status"], "connect_required");
        assert_ne!(b["elicitation"]["id"], id.as_str(), "{status}");
    }
}

#[tokio::test]
async fn reconcile_of_a_completed_elicitation_hands_out_the_connection() {
    let app = spawn_app().await;
    let a = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    let id = a["elicitation"]["id"].as_str().unwrap();
    let conn = app.insert_connection("acme", "alice", "github", "gho_done", &["read:user"], None).await;
    sqlx::query("UPDATE elicitations SET status = 'completed', connection_id = $1, completed_at = now()")
        .bind(conn.as_uuid())
        .execute(&app.pool)
        .await
        .unwrap();
    let b = app.token_ok(json!({"subject": "alice", "provider": "github", "elicitation_id": id})).await;
    assert_eq!(b["status"], "connected");
    assert_eq!(b["access_token"], "gho_done");
}

#[tokio::test]
async fn reconcile_refuses_an_elicitation_of_another_subject_or_provider() {
    let app = spawn_app().await;
    let a = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    let id = a["elicitation"]["id"].as_str().unwrap();
    let r = app.token(&app.key, json!({"subject": "bob", "provider": "github", "elicitation_id": id})).await;
    assert_error(r, 400, "elicitation_mismatch").await;
    let r = app.token(&app.key, json!({"subject": "alice", "provider": "gitlab", "elicitation_id": id})).await;
    assert_error(r, 400, "elicitation_mismatch").await;
    let r = app
        .token(
            &app.key,
            json!({"subject": "alice", "provider": "github", "elicitation_id": ElicitationId::generate().to_string()}),
        )
        .await;
    assert_error(r, 404, "elicitation_not_found").await;
}

#[tokio::test]
async fn get_elicitation_reports_its_status() {
    let app = spawn_app().await;
    let a = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    let id = a["elicitation"]["id"].as_str().unwrap();
    let r = app.client.get(format!("{}/v1/elicitations/{id}", app.base)).bearer_auth(&app.key).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["status"], "pending");
    assert_eq!(b["provider"], "github");
    sqlx::query("UPDATE elicitations SET expires_at = now() - interval '1 second'").execute(&app.pool).await.unwrap();
    let b: serde_json::Value = app
        .client
        .get(format!("{}/v1/elicitations/{id}", app.base))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(b["status"], "expired");
    let r =
        app.client.get(format!("{}/v1/elicitations/not-an-id", app.base)).bearer_auth(&app.key).send().await.unwrap();
    assert_error(r, 400, "invalid_elicitation_id").await;
}

#[tokio::test]
async fn bad_input_gets_a_4xx_with_a_stable_code_and_never_a_500() {
    let app = spawn_app().await;
    let cases = [
        (json!({"subject": "", "provider": "github"}), 400, "invalid_subject"),
        (json!({"subject": "a".repeat(256), "provider": "github"}), 400, "invalid_subject"),
        (json!({"subject": "ali\nce", "provider": "github"}), 400, "invalid_subject"),
        (json!({"subject": "ali\u{7f}ce", "provider": "github"}), 400, "invalid_subject"),
        (json!({"subject": "alice", "provider": "nope"}), 400, "unknown_provider"),
        (json!({"subject": "alice", "provider": "Git Hub"}), 400, "unknown_provider"),
        (json!({"subject": "alice", "provider": "github", "scopes": ["read user"]}), 400, "invalid_scope"),
        (json!({"subject": "alice", "provider": "github", "scopes": [""]}), 400, "invalid_scope"),
        (json!({"subject": "alice", "provider": "github", "scopes": "repo"}), 400, "invalid_json"),
        (json!({"subject": "alice", "provider": "github", "elicitation_id": "x"}), 400, "invalid_elicitation_id"),
        (json!({"subject": "alice", "provider": "github", "extra": 1}), 400, "invalid_json"),
        // Neither a subject nor a subject token.
        (json!({"provider": "github"}), 400, "invalid_subject"),
        (json!({"subject": 5, "provider": "github"}), 400, "invalid_json"),
        (json!({"subject": "alice", "provider": "github", "mcp_session_id": ""}), 400, "invalid_request"),
        (json!({"subject": "alice", "provider": "github", "server_name": ""}), 400, "invalid_request"),
        (json!({"subject": "alice", "provider": "github", "server_name": "a".repeat(65)}), 400, "invalid_request"),
        (json!({"subject": "alice", "provider": "github", "server_name": "Who\nami"}), 400, "invalid_request"),
        (json!({"subject": "alice", "provider": "github", "server_name": "Who\u{202e}ami"}), 400, "invalid_request"),
        (json!({"subject": "alice", "provider": "github", "server_name": 5}), 400, "invalid_json"),
        (json!([1, 2]), 400, "invalid_json"),
    ];
    for (body, status, code) in cases {
        let r = app.token(&app.key, body.clone()).await;
        assert_eq!(r.status().as_u16(), status, "{body}");
        assert_error(r, status, code).await;
    }
}

#[tokio::test]
async fn a_provider_the_tenant_may_not_use_is_403() {
    let app = spawn_app().await;
    let r = app.token(&app.beta_key, json!({"subject": "alice", "provider": "gitlab"})).await;
    assert_error(r, 403, "provider_not_allowed").await;
}

#[tokio::test]
async fn malformed_bodies_and_content_types_are_4xx() {
    let app = spawn_app().await;
    let url = format!("{}/v1/token", app.base);
    let r = app
        .client
        .post(&url)
        .bearer_auth(&app.key)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_error(r, 400, "invalid_json").await;
    let r = app
        .client
        .post(&url)
        .bearer_auth(&app.key)
        .header("content-type", "text/plain")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_error(r, 415, "unsupported_media_type").await;
    let r = app.client.post(&url).bearer_auth(&app.key).send().await.unwrap();
    assert!(r.status().is_client_error());
    let big = format!("{{\"subject\":\"{}\",\"provider\":\"github\"}}", "a".repeat(20_000));
    let r = app
        .client
        .post(&url)
        .bearer_auth(&app.key)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_error(r, 413, "payload_too_large").await;
    let r = app.client.get(format!("{}/v1/nope", app.base)).bearer_auth(&app.key).send().await.unwrap();
    assert_error(r, 404, "not_found").await;
}

#[tokio::test]
async fn error_bodies_do_not_echo_the_values_sent() {
    let app = spawn_app().await;
    let r = app.token(&app.key, json!({"subject": ["gho_SECRETVALUE"], "provider": "github"})).await;
    let text = r.text().await.unwrap();
    assert!(!text.contains("gho_SECRETVALUE"), "{text}");
}

#[tokio::test]
async fn an_mcp_client_cancel_closes_the_link_and_a_repeat_is_harmless() {
    let app = spawn_app().await;
    let a = app.token_ok(json!({"subject": "alice", "provider": "github"})).await;
    let id = a["elicitation"]["id"].as_str().unwrap();
    let url = format!("{}/v1/elicitations/{id}/cancel", app.base);
    for _ in 0..2 {
        let r = app.client.post(&url).bearer_auth(&app.key).json(&json!({"reason": "decline"})).send().await.unwrap();
        assert_eq!(r.status(), 200);
        let body = r.json::<serde_json::Value>().await.unwrap();
        assert_eq!((&body["status"], &body["cancel_reason"]), (&json!("cancelled"), &json!("decline")));
        // Whose link it was, for the MCP server's "not connected" text.
        assert_eq!((&body["provider"], &body["provider_name"]), (&json!("github"), &json!("GitHub")));
    }
    // The client's answer is kept: `cancelled` with `cancel_reason`, never `declined`.
    let info: serde_json::Value = app
        .client
        .get(format!("{}/v1/elicitations/{id}", app.base))
        .bearer_auth(&app.key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!((&info["status"], &info["cancel_reason"]), (&json!("cancelled"), &json!("decline")));
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_events WHERE kind = 'elicitation_cancelled'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(n, 1);
    // The next tool call gets a fresh link, not the cancelled one.
    let b = app.token_ok(json!({"subject": "alice", "provider": "github", "elicitation_id": id})).await;
    assert_ne!(b["elicitation"]["id"], id);
    // Another tenant's id is not found; a bad reason is refused.
    let r = app.client.post(&url).bearer_auth(&app.beta_key).send().await.unwrap();
    assert_error(r, 404, "elicitation_not_found").await;
    let r = app.client.post(&url).bearer_auth(&app.key).json(&json!({"reason": "maybe"})).send().await.unwrap();
    assert_error(r, 400, "invalid_request").await;
    // A body that is not the documented object is refused, not taken as "no reason".
    let (fresh, _) = app.elicit("bob", "github").await;
    let url = format!("{}/v1/elicitations/{fresh}/cancel", app.base);
    for bad in [r#"{"reason": 1}"#, r#"{"why": "cancel"}"#, "not json", "[]"] {
        let r = app
            .client
            .post(&url)
            .bearer_auth(&app.key)
            .header("content-type", "application/json")
            .body(bad)
            .send()
            .await
            .unwrap();
        assert_error(r, 400, "invalid_json").await;
    }
    assert_eq!(app.elicitation_status(&fresh).await, "pending");
}

/// A re-connect for more scopes asks for the union of what was asked and what was
/// granted, which may be more than the 50 a request may name: the link made for it reads
/// back, and the retried call gets its answer, not a fault (a stored union is not a
/// request).
#[tokio::test]
async fn a_reconnect_whose_union_of_scopes_exceeds_fifty_is_answered_not_faulted() {
    let app = spawn_app().await;
    let held: Vec<String> = (0..40).map(|i| format!("held{i:02}")).collect();
    let held: Vec<&str> = held.iter().map(String::as_str).collect();
    app.insert_connection("acme", "alice", "github", "tok-alice", &held, None).await;
    let wanted: Vec<String> = (0..20).map(|i| format!("more{i:02}")).collect();
    let b = app.token_ok(json!({"subject": "alice", "provider": "github", "scopes": wanted})).await;
    assert_eq!(b["status"], "connect_required", "{b}");
    let id = b["elicitation"]["id"].as_str().unwrap();
    let again = app
        .token(&app.key, json!({"subject": "alice", "provider": "github", "scopes": wanted, "elicitation_id": id}))
        .await;
    assert_eq!(again.status(), 200, "the retry is answered");
    let again: serde_json::Value = again.json().await.unwrap();
    assert_eq!(again["status"], "connect_required", "{again}");
    assert_eq!(again["elicitation"]["id"], id, "the same link");
}
