//! Signed webhooks end to end: endpoints registered through the admin API, events written in
//! the transaction of their change, delivered by the running service's worker to a real
//! receiver, verified by PyPI's `standardwebhooks`, retried while the receiver is down
//! (time moved by the worker's clock, not waited for), in order per connection.

use crate::support::browser::Browser;
use crate::support::receiver::{Receiver, assert_verified, cancel, deliveries, python_verdicts, register};
use crate::support::{Options, TestApp, assert_error, eventually, spawn_app, spawn_app_with};
use mcp_connect::domain::{KeyScope, ManualClock, TenantId};
use secrecy::ExposeSecret;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

const WAIT: Duration = Duration::from_secs(20);

async fn admin_key_of(app: &TestApp, tenant: &str) -> String {
    let t = TenantId::parse(tenant).unwrap();
    let k = mcp_connect::flows::api_keys::create_api_key(&app.pool, &t, KeyScope::Admin, None).await.unwrap();
    k.key.expose_secret().to_owned()
}

/// Connects `subject` at `testp` as `login` through the real browser flow.
async fn connect(app: &TestApp, subject: &str, login: &str) -> String {
    let (id, url) = app.elicit(subject, "testp").await;
    assert_eq!(Browser::new().connect(app, &url, subject, login).await.status(), 200);
    id
}

async fn connection_of(app: &TestApp, subject: &str) -> String {
    let b: Value =
        app.admin(reqwest::Method::GET, &format!("/connections?subject={subject}"), None).await.json().await.unwrap();
    b["connections"][0]["id"].as_str().unwrap().to_owned()
}

/// `(type, subject)` of each event, and the `data` of each.
fn kinds(events: &[crate::support::receiver::Delivery]) -> Vec<(String, String)> {
    events
        .iter()
        .map(|d| {
            let j = d.json();
            (j["type"].as_str().unwrap().to_owned(), j["data"]["subject"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

#[tokio::test]
async fn an_endpoint_is_registered_once_with_its_secret_and_refused_where_it_may_not_point() {
    let app = spawn_app().await;
    let r = app
        .admin(
            reqwest::Method::POST,
            "/webhooks",
            Some(json!({"url": "https://hooks.example.com/in", "events": ["connection.revoked", "connection.created", "connection.revoked"]})),
        )
        .await;
    assert_eq!(r.status(), 201);
    let made: Value = r.json().await.unwrap();
    let secret = made["secret"].as_str().unwrap();
    assert!(secret.starts_with("whsec_") && secret.len() > 40, "{secret}");
    assert_eq!(made["events"], json!(["connection.created", "connection.revoked"]));
    let id = made["id"].as_str().unwrap();
    // Never shown again, nor stored in the clear.
    let list = app.admin(reqwest::Method::GET, "/webhooks", None).await.text().await.unwrap();
    let one = app.admin(reqwest::Method::GET, &format!("/webhooks/{id}"), None).await.text().await.unwrap();
    assert!(list.contains(id) && one.contains(id));
    assert!(!list.contains("whsec_") && !one.contains("whsec_") && !list.contains("secret\""), "{list}");
    let raw = secret.strip_prefix("whsec_").unwrap();
    let dump: String =
        sqlx::query_scalar("SELECT string_agg(t::text, ' ') FROM webhooks t").fetch_one(&app.pool).await.unwrap();
    assert!(!dump.contains(raw) && !dump.contains(secret), "the secret is sealed at rest");
    let audit = app.admin(reqwest::Method::GET, "/audit?kind=webhook_created", None).await.text().await.unwrap();
    assert!(audit.contains("hooks.example.com") && !audit.contains("/in\""), "the host only: {audit}");

    // Refusals, each with its reason.
    let post = |body: Value| app.admin(reqwest::Method::POST, "/webhooks", Some(body));
    let ev = json!(["connection.revoked"]);
    for (url, code, reason) in [
        ("http://hooks.example.com/in", "invalid_webhook_url", "not_https"),
        ("https://10.1.2.3/in", "invalid_webhook_url", "private_address"),
        ("https://169.254.169.254/latest/meta-data", "invalid_webhook_url", "link_local_address"),
        ("https://[::ffff:10.0.0.1]/in", "invalid_webhook_url", "private_address"),
        ("https://100.100.100.200/latest", "invalid_webhook_url", "metadata_address"),
        ("https://user:pw@hooks.example.com/in", "invalid_webhook_url", "bad_url"),
        ("https://hooks.example.com/in#frag", "invalid_webhook_url", "fragment"),
        ("hooks.example.com", "invalid_webhook_url", "absolute URL"),
    ] {
        let b = assert_error(post(json!({"url": url, "events": ev})).await, 400, code).await;
        assert!(b["error_description"].as_str().unwrap().contains(reason), "{url}: {b}");
    }
    let b = assert_error(
        post(json!({"url": "https://h.example.com/", "events": ["connection.*"]})).await,
        400,
        "invalid_request",
    )
    .await;
    assert!(b["error_description"].as_str().unwrap().contains("unknown event kind"), "{b}");
    assert_error(post(json!({"url": "https://h.example.com/", "events": []})).await, 400, "invalid_request").await;
    assert_error(
        post(json!({"url": "https://h.example.com/", "events": ev, "description": "a\u{7}"})).await,
        400,
        "invalid_request",
    )
    .await;
    assert_error(
        post(json!({"url": "https://h.example.com/", "events": ev, "secret": "mine"})).await,
        400,
        "invalid_json",
    )
    .await;

    // Another tenant neither sees nor ends it.
    let beta = admin_key_of(&app, "beta").await;
    let get = |path: String, key: String| {
        let c = app.client.clone();
        async move { c.get(path).bearer_auth(key).send().await.unwrap() }
    };
    let r = get(format!("{}/admin/v1/webhooks", app.base), beta.clone()).await;
    assert_eq!(r.json::<Value>().await.unwrap(), json!({"webhooks": []}));
    assert_error(get(format!("{}/admin/v1/webhooks/{id}", app.base), beta.clone()).await, 404, "webhook_not_found")
        .await;
    assert_error(
        get(format!("{}/admin/v1/webhooks/{id}/deliveries", app.base), beta.clone()).await,
        404,
        "webhook_not_found",
    )
    .await;
    let r = app.client.delete(format!("{}/admin/v1/webhooks/{id}", app.base)).bearer_auth(&beta).send().await.unwrap();
    assert_error(r, 404, "webhook_not_found").await;
    let r = app
        .client
        .post(format!("{}/admin/v1/webhooks/{id}/rotate-secret", app.base))
        .bearer_auth(&beta)
        .send()
        .await
        .unwrap();
    assert_error(r, 404, "webhook_not_found").await;
    assert_error(app.admin(reqwest::Method::GET, "/webhooks/not-a-uuid", None).await, 400, "invalid_webhook_id").await;

    // At most 16 per tenant.
    for i in 1..16 {
        let r = post(json!({"url": format!("https://h{i}.example.com/"), "events": ev})).await;
        assert_eq!(r.status(), 201);
    }
    assert_error(post(json!({"url": "https://h17.example.com/", "events": ev})).await, 409, "too_many_webhooks").await;

    // Deleted: gone, and a repeat is a 404.
    assert_eq!(app.admin(reqwest::Method::DELETE, &format!("/webhooks/{id}"), None).await.status(), 204);
    assert_error(app.admin(reqwest::Method::DELETE, &format!("/webhooks/{id}"), None).await, 404, "webhook_not_found")
        .await;
}

#[tokio::test]
async fn without_allow_loopback_a_loopback_endpoint_is_refused_and_a_name_resolving_to_it_is_refused_at_delivery() {
    let app = spawn_app_with(Options {
        patch: vec![("allow_loopback = true", "allow_loopback = false".to_owned())],
        ..Options::default()
    })
    .await;
    let receiver = Receiver::start().await;
    let b = assert_error(
        app.admin(
            reqwest::Method::POST,
            "/webhooks",
            Some(json!({"url": receiver.url, "events": ["elicitation.cancelled"]})),
        )
        .await,
        400,
        "invalid_webhook_url",
    )
    .await;
    assert!(b["error_description"].as_str().unwrap().contains("not_https"), "{b}");
    // A name is judged when it is resolved, on the address the delivery would connect to.
    let by_name = receiver.url.replace("http://127.0.0.1", "https://localhost");
    let (webhook, _) = register(&app, &app.admin_key, &by_name, &["elicitation.cancelled"]).await;
    let (id, _) = app.elicit("alice", "testp").await;
    cancel(&app, &id, "cancel").await;
    eventually(WAIT, "an attempt is recorded", || async {
        deliveries(&app, &webhook)
            .await
            .first()
            .is_some_and(|d| d["attempts"].as_i64() >= Some(1) && !d["last_error"].is_null())
    })
    .await;
    let d = &deliveries(&app, &webhook).await[0];
    assert_eq!(d["last_error"], "address_refused", "one code: which range a name resolves to is not told, {d}");
    assert_eq!(d["status"], "pending", "it is retried (the name may move)");
    assert!(d["next_attempt_at"].is_string() && d["last_status"].is_null());
    assert!(receiver.all().is_empty(), "nothing reached the receiver");
}

#[tokio::test]
async fn every_event_arrives_once_in_order_per_connection_after_the_receiver_was_down() {
    let clock = Arc::new(ManualClock::default());
    let app = spawn_app_with(Options { clock: Some(clock.clone()), ..Options::default() }).await;
    let receiver = Receiver::start().await;
    let all: Vec<&str> = mcp_connect::webhooks::EventKind::ALL.iter().map(|k| k.as_str()).collect();
    let (webhook, secret) = register(&app, &app.admin_key, &receiver.url, &all).await;
    receiver.set_down(true);

    // alice: a link the MCP client cancels, a connection, its revocation by an operator,
    // and a new connection. bob: a connection and his off-boarding.
    let first = app.elicit("alice", "testp").await.0;
    cancel(&app, &first, "decline").await;
    let second = connect(&app, "alice", "octo-alice").await;
    let alice_conn = connection_of(&app, "alice").await;
    let r = app.admin(reqwest::Method::POST, &format!("/connections/{alice_conn}/revoke"), None).await;
    assert_eq!(r.status(), 200);
    connect(&app, "bob", "octo-bob").await;
    connect(&app, "alice", "octo-alice").await;
    let r = app.admin(reqwest::Method::POST, "/revocations", Some(json!({"subject": "bob"}))).await;
    assert_eq!(r.status(), 200);

    // While the receiver is down, each connection's first event is tried (and retried);
    // no later event of a connection is sent before it.
    eventually(WAIT, "both first events were tried", || async {
        let tried: std::collections::HashSet<String> = receiver.all().iter().map(|d| d.id.clone()).collect();
        tried.len() >= 2
    })
    .await;
    let tried = kinds(&receiver.all());
    assert!(
        tried.iter().all(|k| k == &("elicitation.cancelled".to_owned(), "alice".to_owned())
            || k == &("connection.created".to_owned(), "bob".to_owned())),
        "{tried:?}"
    );
    // An attempt is claimed (counted) before it is sent, and recorded after.
    eventually(WAIT, "a failed attempt is recorded", || async {
        deliveries(&app, &webhook).await.iter().any(|d| d["last_status"] == 503)
    })
    .await;
    let listed = deliveries(&app, &webhook).await;
    assert_eq!(listed.len(), 6, "{listed:#?}");
    assert!(listed.iter().all(|d| d["status"] == "pending"));
    let tried_one = listed.iter().find(|d| d["last_status"] == 503).unwrap();
    assert_eq!(tried_one["last_status"], 503);
    let kept = tried_one["last_response"].as_str().unwrap();
    assert!(
        kept.starts_with("down for maintenance!!!") && kept.len() == 1024,
        "1 KB of the 5 KB answer: {}",
        kept.len()
    );
    assert!(tried_one["next_attempt_at"].is_string());

    // Back up an hour later (the worker's clock, not a real hour): everything arrives.
    // Fixed sleep kept: `webhook-timestamp` is in whole seconds of the real clock, and the
    // retry must be signed in a later second than the first attempt to show it was signed
    // afresh (the worker's clock moves the schedule, not the signature's time).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let back_at = time::OffsetDateTime::now_utc().unix_timestamp();
    receiver.set_down(false);
    clock.advance(Duration::from_secs(3600));
    let got = receiver.wait_for(6, WAIT).await;
    let per = |who: &str| kinds(&got).into_iter().filter(|(_, s)| s == who).map(|(k, _)| k).collect::<Vec<_>>();
    assert_eq!(
        per("alice"),
        ["elicitation.cancelled", "connection.created", "connection.revoked", "connection.created"]
    );
    assert_eq!(per("bob"), ["connection.created", "connection.revoked"]);
    // Every request, retries included, verifies with the official package; a retry was
    // signed afresh, at the time it was sent.
    assert_verified(&secret, &receiver.all()).await;
    let retried = receiver.all().into_iter().find(|d| d.answered == 204 && d.id == got[0].id).unwrap();
    assert!(retried.timestamp.parse::<i64>().unwrap() >= back_at, "signed when it was sent, not when first tried");

    // What the payloads say, and what they never hold.
    let events: Vec<Value> = got.iter().map(|d| d.json()).collect();
    // Order holds per connection (above), not across them: found by its type.
    let cancelled = events.iter().find(|e| e["type"] == "elicitation.cancelled").unwrap();
    assert_eq!(cancelled["data"]["elicitation_id"], first.as_str());
    assert_eq!((&cancelled["data"]["by"], &cancelled["data"]["reason"]), (&json!("mcp_client"), &json!("decline")));
    let created = events.iter().find(|e| e["type"] == "connection.created" && e["data"]["subject"] == "alice").unwrap();
    assert_eq!(created["data"]["elicitation_id"], second.as_str());
    assert_eq!(created["data"]["account_login"], "octo-alice");
    assert_eq!(created["data"]["tenant"], "acme");
    assert_eq!(
        created["id"],
        got.iter().find(|d| d.json() == *created).unwrap().id.as_str(),
        "the body's id is the webhook-id"
    );
    let revoked = events.iter().find(|e| e["type"] == "connection.revoked" && e["data"]["subject"] == "alice").unwrap();
    assert_eq!((&revoked["data"]["by"], &revoked["data"]["connection_id"]), (&json!("admin"), &json!(alice_conn)));
    assert_eq!(revoked["data"]["provider_result"], "revoked");
    let offboarded =
        events.iter().find(|e| e["type"] == "connection.revoked" && e["data"]["subject"] == "bob").unwrap();
    assert_eq!(offboarded["data"]["by"], "offboarding");
    let bodies: String = got.iter().map(|d| d.body.as_str()).collect();
    for secretish in ["access_token", "refresh_token", "code", "whsec_", "gho_", "state"] {
        assert!(!bodies.contains(secretish), "{secretish} in a payload");
    }
    let token = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    assert!(!bodies.contains(token["access_token"].as_str().unwrap()));

    // The admin API shows each delivered, with its attempts.
    let listed = deliveries(&app, &webhook).await;
    assert!(
        listed.iter().all(|d| d["status"] == "delivered" && d["last_status"] == 204 && d["next_attempt_at"].is_null()),
        "{listed:#?}"
    );
    assert!(listed.iter().any(|d| d["attempts"].as_i64() >= Some(2)), "the first ones were retried");
}

#[tokio::test]
async fn a_delivery_that_fails_for_a_day_is_marked_failed_and_the_next_event_goes_on() {
    let clock = Arc::new(ManualClock::default());
    let app = spawn_app_with(Options { clock: Some(clock.clone()), ..Options::default() }).await;
    let receiver = Receiver::start().await;
    let (webhook, secret) = register(&app, &app.admin_key, &receiver.url, &["elicitation.cancelled"]).await;
    // The receiver refuses the first event, whenever it comes, and takes any other.
    let first = app.elicit("alice", "testp").await.0;
    receiver.refuse_holding(Some(&first));
    cancel(&app, &first, "cancel").await;
    eventually(WAIT, "the first attempt", || async { !receiver.all().is_empty() }).await;
    let second = app.elicit("alice", "testp").await.0;
    cancel(&app, &second, "cancel").await;
    // A day of retries (the clock moves; each attempt fails), then it is given up. No
    // retry or rest lasts over an hour: after each hour the worker tries the first event
    // again, unless it has given it up.
    let tries = || receiver.all().iter().filter(|d| d.body.contains(first.as_str())).count();
    for _ in 0..25 {
        let tried = tries();
        clock.advance(Duration::from_secs(3600));
        eventually(WAIT, "the first event tried again, or given up", || async {
            tries() > tried || deliveries(&app, &webhook).await.iter().any(|d| d["status"] == "failed")
        })
        .await;
    }
    // The endpoint rests after its last failure (at most an hour).
    clock.advance(Duration::from_secs(2 * 3600));
    let got = receiver.wait_for(1, WAIT).await;
    assert_eq!(got[0].json()["data"]["elicitation_id"], second.as_str(), "later events go on");
    assert_verified(&secret, &receiver.all()).await;
    // The second waited while the first was retried: every request for the first came
    // before the second's.
    let order: Vec<bool> =
        receiver.all().iter().map(|d| d.json()["data"]["elicitation_id"] == first.as_str()).collect();
    let firsts = order.iter().filter(|f| **f).count();
    assert!(firsts >= 3 && order[..firsts].iter().all(|f| *f) && order.len() == firsts + 1, "{order:?}");
    let listed = deliveries(&app, &webhook).await;
    let failed = listed.iter().find(|d| d["status"] == "failed").unwrap();
    assert!(failed["attempts"].as_i64().unwrap() >= 3 && failed["last_status"] == 503, "{failed}");
    assert!(failed["finished_at"].is_string() && failed["next_attempt_at"].is_null());
    assert_eq!(listed.iter().filter(|d| d["status"] == "delivered").count(), 1);
    assert_eq!(listed.len(), 2);
}

#[tokio::test]
async fn after_a_rotation_both_secrets_sign_for_a_day_then_only_the_new_one() {
    let clock = Arc::new(ManualClock::default());
    let app = spawn_app_with(Options { clock: Some(clock.clone()), ..Options::default() }).await;
    let receiver = Receiver::start().await;
    let (webhook, old) = register(&app, &app.admin_key, &receiver.url, &["elicitation.cancelled"]).await;
    let r = app.admin(reqwest::Method::POST, &format!("/webhooks/{webhook}/rotate-secret"), None).await;
    assert_eq!(r.status(), 200);
    let rotated: Value = r.json().await.unwrap();
    let new = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(new, old);
    assert!(rotated["previous_secret_valid_until"].is_string());
    let id = app.elicit("alice", "testp").await.0;
    cancel(&app, &id, "cancel").await;
    let got = receiver.wait_for(1, WAIT).await;
    assert_eq!(got[0].signature.matches("v1,").count(), 2);
    assert_verified(&old, &got).await;
    assert_verified(&new, &got).await;

    clock.advance(Duration::from_secs(25 * 3600));
    let id = app.elicit("alice", "testp").await.0;
    cancel(&app, &id, "cancel").await;
    let got = receiver.wait_for(2, WAIT).await;
    assert_eq!(got[1].signature.matches("v1,").count(), 1);
    assert_verified(&new, &got[1..]).await;
    assert_eq!(python_verdicts(&old, &got[1..]).await, ["WebhookVerificationError: No matching signature found"]);

    // A secret that leaked stops at once.
    let r =
        app.admin(reqwest::Method::POST, &format!("/webhooks/{webhook}/rotate-secret?keep_previous=false"), None).await;
    let rotated: Value = r.json().await.unwrap();
    assert!(rotated["previous_secret_valid_until"].is_null());
    let newest = rotated["secret"].as_str().unwrap().to_owned();
    let id = app.elicit("alice", "testp").await.0;
    cancel(&app, &id, "cancel").await;
    let got = receiver.wait_for(3, WAIT).await;
    assert_eq!(got[2].signature.matches("v1,").count(), 1);
    assert_verified(&newest, &got[2..]).await;
    assert_eq!(python_verdicts(&new, &got[2..]).await, ["WebhookVerificationError: No matching signature found"]);
    assert_error(
        app.admin(reqwest::Method::POST, &format!("/webhooks/{webhook}/rotate-secret?keep_previous=maybe"), None).await,
        400,
        "invalid_query",
    )
    .await;
}

#[tokio::test]
async fn declines_expiry_reauth_and_kill_switches_are_reported() {
    let app = spawn_app().await;
    let receiver = Receiver::start().await;
    let all: Vec<&str> = mcp_connect::webhooks::EventKind::ALL.iter().map(|k| k.as_str()).collect();
    let (_, secret) = register(&app, &app.admin_key, &receiver.url, &all).await;
    // Declined on our consent page.
    let (id, url) = app.elicit("dora", "testp").await;
    let browser = Browser::new();
    let page = browser.open(&app, &url, "dora").await.text().await.unwrap();
    assert_eq!(browser.consent(&app, "testp", &page, "decline").await.status(), 200);
    // Expired unused.
    let (stale, _) = app.elicit("erin", "testp").await;
    sqlx::query("UPDATE elicitations SET expires_at = now() - interval '1 second' WHERE id = $1::text::uuid")
        .bind(&stale)
        .execute(&app.pool)
        .await
        .unwrap();
    mcp_connect::flows::cleanup::run_once(&app.pool, time::OffsetDateTime::now_utc(), Duration::from_secs(86_400 * 30))
        .await
        .unwrap();
    // A kill switch set by an operator.
    let r = app
        .admin(
            reqwest::Method::PUT,
            "/kill-switches/testp",
            Some(json!({"mode": "no_new_elicitations", "reason": "incident 7"})),
        )
        .await;
    assert_eq!(r.status(), 200);
    let got = receiver.wait_for(3, WAIT).await;
    assert_verified(&secret, &got).await;
    let find = |t: &str| got.iter().map(|d| d.json()).find(|j| j["type"] == t).unwrap_or_else(|| panic!("{t}"));
    let declined = find("elicitation.declined");
    assert_eq!(declined["data"]["elicitation_id"], id.as_str());
    assert_eq!((&declined["data"]["by"], &declined["data"]["reason"]), (&json!("consent_page"), &json!("declined")));
    let expired = find("elicitation.expired");
    assert_eq!((&expired["data"]["elicitation_id"], &expired["data"]["subject"]), (&json!(stale), &json!("erin")));
    let killed = find("kill_switch.changed");
    assert_eq!(
        (&killed["data"]["provider"], &killed["data"]["reason"]),
        (&json!("testp"), &json!("no_new_elicitations"))
    );
    assert_eq!((&killed["data"]["note"], &killed["data"]["tenant"]), (&json!("incident 7"), &json!("acme")));
}

#[tokio::test]
async fn an_event_whose_change_rolls_back_is_never_sent() {
    let app = spawn_app().await;
    let receiver = Receiver::start().await;
    register(&app, &app.admin_key, &receiver.url, &["elicitation.cancelled", "connection.revoked"]).await;
    // A cancel whose transaction is rolled back by the database: the event goes with it.
    let (id, _) = app.elicit("alice", "testp").await;
    let mut tx = app.pool.begin().await.unwrap();
    let (acme, alice) = (TenantId::parse("acme").unwrap(), mcp_connect::domain::Subject::parse("alice").unwrap());
    let closed = mcp_connect::store::elicitations::cancel_pending(
        &mut tx,
        &acme,
        Some(&alice),
        None,
        None,
        time::OffsetDateTime::now_utc(),
    )
    .await
    .unwrap();
    mcp_connect::flows::events::links_closed(
        &mut tx,
        mcp_connect::webhooks::EventKind::ElicitationCancelled,
        &closed,
        "admin",
        "operator",
    )
    .await
    .unwrap();
    let written: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries").fetch_one(&mut *tx).await.unwrap();
    assert_eq!(written, 1, "written in the transaction");
    tx.rollback().await.unwrap();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM webhook_deliveries").fetch_one(&app.pool).await.unwrap();
    assert_eq!(left, 0);
    assert_eq!(app.elicitation_status(&id).await, "pending");
    // A cancel that commits afterwards is sent, and it alone: the rolled-back event, had it
    // been kept, would have gone first (the same elicitation's stream).
    cancel(&app, &id, "decline").await;
    let got = receiver.wait_for(1, WAIT).await;
    assert_eq!(got[0].json()["data"]["by"], "mcp_client", "the committed cancel's event: {}", got[0].body);
    assert_eq!(receiver.all().len(), 1, "nothing but the committed event was sent");
}

#[tokio::test]
async fn a_global_kill_switch_from_the_cli_reaches_every_tenants_endpoints_that_ask_for_it() {
    let app = spawn_app().await;
    let (acme, beta, deaf) = (Receiver::start().await, Receiver::start().await, Receiver::start().await);
    let (_, acme_secret) = register(&app, &app.admin_key, &acme.url, &["kill_switch.changed"]).await;
    let beta_admin = admin_key_of(&app, "beta").await;
    let (_, beta_secret) = register(&app, &beta_admin, &beta.url, &["kill_switch.changed"]).await;
    let (deaf_webhook, _) = register(&app, &app.admin_key, &deaf.url, &["connection.revoked"]).await;
    let db = app.db_url.clone();
    let out = tokio::task::spawn_blocking(move || {
        crate::support::binary::run(
            &db,
            None,
            &["killswitch", "set", "github", "no_token_handouts", "--reason", "provider breach"],
        )
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (receiver, secret) in [(&acme, &acme_secret), (&beta, &beta_secret)] {
        let got = receiver.wait_for(1, WAIT).await;
        assert_verified(secret, &got).await;
        let e = got[0].json();
        assert_eq!(e["type"], "kill_switch.changed");
        assert_eq!(e["data"]["tenant"], Value::Null, "a global switch");
        assert_eq!((&e["data"]["provider"], &e["data"]["reason"]), (&json!("github"), &json!("no_token_handouts")));
        assert_eq!(e["data"]["by"], "cli");
        assert_eq!(e["data"]["note"], Value::Null, "a global switch's note stays with the operators");
    }
    // Deliveries are written with their event, one for each endpoint that asked: none was
    // written for this one, so nothing is on its way to it either.
    assert!(deliveries(&app, &deaf_webhook).await.is_empty(), "nothing is queued for an endpoint that did not ask");
    assert!(deaf.all().is_empty(), "an endpoint that did not ask hears nothing");
}

#[tokio::test]
async fn rotate_key_reseals_the_signing_secrets_and_the_new_key_alone_signs() {
    use crate::support::{KEY_A, KEY_B, spawn_on};
    // KEY_A. Its worker looks once a minute: the instance with the new key delivers (an
    // instance without the key a secret is sealed under cannot sign; operators add the new
    // key everywhere before they rotate).
    let slow = vec![("poll_interval_ms = 200", "poll_interval_ms = 60000".to_owned())];
    let app = spawn_app_with(Options { patch: slow, ..Options::default() }).await;
    let receiver = Receiver::start().await;
    let (webhook, old) = register(&app, &app.admin_key, &receiver.url, &["elicitation.cancelled"]).await;
    let r = app.admin(reqwest::Method::POST, &format!("/webhooks/{webhook}/rotate-secret"), None).await;
    let new = r.json::<Value>().await.unwrap()["secret"].as_str().unwrap().to_owned();
    // Another endpoint whose previous secret's overlap is over: dropped, not re-sealed.
    let (other, _) = register(&app, &app.admin_key, "https://hooks.example.com/in", &["elicitation.cancelled"]).await;
    app.admin(reqwest::Method::POST, &format!("/webhooks/{other}/rotate-secret"), None).await;
    sqlx::query("UPDATE webhooks SET previous_until = now() - interval '1 minute' WHERE id = $1::text::uuid")
        .bind(&other)
        .execute(&app.pool)
        .await
        .unwrap();
    let both = app.keys_of(&format!("{KEY_B},{KEY_A}"));
    let r = mcp_connect::flows::rotate::rotate_keys(&app.pool, &both, 2, |_, _| {}).await.unwrap();
    // The secrets are under the tenant's data key already: it is wrapped anew, no secret
    // is re-sealed.
    assert_eq!((r.rewrapped, r.resealed, r.remaining), (1, 0, 0), "{r:?}");
    let keys: Vec<(String, String, Option<String>)> =
        sqlx::query_as("SELECT id::text, key_id, previous_key_id FROM webhooks ORDER BY id = $1::text::uuid")
            .bind(&webhook)
            .fetch_all(&app.pool)
            .await
            .unwrap();
    let dk = keys[1].1.clone();
    assert!(dk.starts_with("dk:"), "{dk}");
    assert_eq!(keys[0].1, dk);
    assert_eq!(keys[1], (webhook.clone(), dk.clone(), Some(dk.clone())));
    assert_eq!(mcp_connect::flows::rotate::rotate_keys(&app.pool, &both, 2, |_, _| {}).await.unwrap().resealed, 0);
    // An instance with the new key alone signs with both secrets.
    let new_only = spawn_on(&app, &Options { vault_keys: KEY_B.to_owned(), ..Options::default() }).await;
    let id = new_only.elicit("alice", "testp").await.0;
    cancel(&new_only, &id, "cancel").await;
    let got = receiver.wait_for(1, WAIT).await;
    assert_verified(&new, &got).await;
    assert_verified(&old, &got).await;
}

#[tokio::test]
async fn a_failing_endpoint_rests_and_holds_back_no_other_endpoint() {
    let clock = Arc::new(ManualClock::default());
    let app = spawn_app_with(Options { clock: Some(clock.clone()), ..Options::default() }).await;
    let (dead, live) = (Receiver::start().await, Receiver::start().await);
    let (dead_hook, dead_secret) = register(&app, &app.admin_key, &dead.url, &["elicitation.cancelled"]).await;
    let (_, live_secret) = register(&app, &app.admin_key, &live.url, &["elicitation.cancelled"]).await;
    dead.set_down(true);
    // It has failed ten times in a row already: its next failure rests it for most of an hour.
    sqlx::query("UPDATE webhooks SET consecutive_failures = 10 WHERE id = $1::text::uuid")
        .bind(&dead_hook)
        .execute(&app.pool)
        .await
        .unwrap();
    let subjects = ["ann", "ben", "cid", "dee", "eve"];
    for s in subjects {
        let id = app.elicit(s, "testp").await.0;
        cancel(&app, &id, "cancel").await;
        if s == "ann" {
            eventually(WAIT, "the dead endpoint's first attempt", || async { !dead.all().is_empty() }).await;
        }
    }
    // The live endpoint hears all five (five connections: no order between them) ...
    let got = live.wait_for(5, WAIT).await;
    assert_verified(&live_secret, &got).await;
    // ... while the dead one, resting, was tried once.
    let b: Value = app.admin(reqwest::Method::GET, &format!("/webhooks/{dead_hook}"), None).await.json().await.unwrap();
    assert_eq!(b["consecutive_failures"], 11, "{b}");
    let rests = time::OffsetDateTime::parse(
        b["paused_until"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert!(rests > time::OffsetDateTime::now_utc() + time::Duration::minutes(20), "{b}");
    assert_eq!(dead.all().len(), 1, "one attempt while it rests, not one per event");
    // Back, and past the rest: everything arrives, and its failures are forgotten.
    dead.set_down(false);
    clock.advance(Duration::from_secs(2 * 3600));
    let got = dead.wait_for(5, WAIT).await;
    assert_verified(&dead_secret, &dead.all()).await;
    let mut heard: Vec<String> = got.iter().map(|d| d.json()["data"]["subject"].as_str().unwrap().to_owned()).collect();
    heard.sort();
    assert_eq!(heard, subjects);
    let b: Value = app.admin(reqwest::Method::GET, &format!("/webhooks/{dead_hook}"), None).await.json().await.unwrap();
    assert_eq!((&b["consecutive_failures"], &b["paused_until"]), (&json!(0), &Value::Null), "{b}");
}

#[tokio::test]
async fn attempts_that_fail_together_count_once_toward_an_endpoints_rest() {
    let clock = Arc::new(ManualClock::default());
    let app = spawn_app_with(Options { clock: Some(clock.clone()), ..Options::default() }).await;
    let dead = Receiver::start().await;
    let (hook, _) = register(&app, &app.admin_key, &dead.url, &["elicitation.cancelled"]).await;
    dead.set_down(true);
    // Resting while four events of four connections come in (an endpoint's share of attempts
    // in flight); then all four are due at once.
    sqlx::query("UPDATE webhooks SET paused_until = now() + interval '1 hour' WHERE id = $1::text::uuid")
        .bind(&hook)
        .execute(&app.pool)
        .await
        .unwrap();
    for s in ["ann", "ben", "cid", "dee"] {
        let id = app.elicit(s, "testp").await.0;
        cancel(&app, &id, "cancel").await;
    }
    clock.advance(Duration::from_secs(2 * 3600));
    eventually(WAIT, "four attempts", || async { dead.all().len() >= 4 }).await;
    eventually(WAIT, "their outcome recorded", || async {
        deliveries(&app, &hook).await.iter().all(|d| d["last_status"] == 503)
    })
    .await;
    let b: Value = app.admin(reqwest::Method::GET, &format!("/webhooks/{hook}"), None).await.json().await.unwrap();
    assert_eq!(b["consecutive_failures"], 1, "one failed round, not four failures: {b}");
    assert!(b["paused_until"].is_string());
}

/// `POST /v1/token` for a subject of tenant `beta`, then the MCP client's cancel of the link:
/// one `elicitation.cancelled` event of beta's.
async fn beta_cancels(app: &TestApp, subject: &str) {
    let r = app
        .client
        .post(format!("{}/v1/token", app.base))
        .bearer_auth(&app.beta_key)
        .json(&json!({"subject": subject, "provider": "github"}))
        .send()
        .await
        .unwrap();
    let b: Value = r.json().await.unwrap();
    let id = b["elicitation"]["id"].as_str().unwrap_or_else(|| panic!("{b}")).to_owned();
    let r = app
        .client
        .post(format!("{}/v1/elicitations/{id}/cancel", app.base))
        .bearer_auth(&app.beta_key)
        .json(&json!({"reason": "cancel"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

/// `n` due deliveries for each of `tenant`'s endpoints, each the head of a stream of its own.
async fn backlog(app: &TestApp, tenant: &str, n: i32) {
    sqlx::query(
        "INSERT INTO webhook_deliveries (webhook_id, event_id, event_type, stream, seq, payload)
         SELECT w.id, gen_random_uuid(), 'elicitation.cancelled', 'backlog-' || g, 1, '{}'
         FROM webhooks w, generate_series(1, $2) g WHERE w.tenant_id = $1",
    )
    .bind(tenant)
    .bind(n)
    .execute(&app.pool)
    .await
    .unwrap();
}

#[tokio::test]
async fn a_tenant_with_a_backlog_on_slow_endpoints_does_not_hold_up_another_tenants_event() {
    // Attempts may take 6 s; acme's receiver answers (204) after 4.
    let app = spawn_app_with(Options {
        patch: vec![("timeout_seconds = 2\npoll", "timeout_seconds = 6\npoll".to_owned())],
        ..Options::default()
    })
    .await;
    let slow = Receiver::start().await;
    slow.set_delay(Duration::from_secs(4));
    for i in 0..16 {
        register(&app, &app.admin_key, &format!("{}/{i}", slow.url), &["elicitation.cancelled"]).await;
    }
    backlog(&app, "acme", 25).await;
    // Acme's attempts are under way, holding what they may of the worker's 16 slots.
    eventually(WAIT, "acme's attempts started", || async { slow.all().len() >= 4 }).await;
    let fast = Receiver::start().await;
    let beta_admin = admin_key_of(&app, "beta").await;
    register(&app, &beta_admin, &fast.url, &["elicitation.cancelled"]).await;

    let started = std::time::Instant::now();
    beta_cancels(&app, "bob").await;
    let got = fast.wait_for(1, Duration::from_secs(120)).await;
    let took = started.elapsed();
    eprintln!("beta's event arrived after {took:?}");
    assert_eq!(got[0].json()["type"], "elicitation.cancelled");
    // Poll interval (200 ms) + 2 s; today's claim served acme's 400 first: ~100 s.
    assert!(took <= Duration::from_millis(2200), "beta's event took {took:?}");
    let in_flight = slow.all().len();
    assert!(in_flight <= 8, "acme had {in_flight} attempts out at once, more than its share");
}

#[tokio::test]
async fn a_slow_answer_rests_the_endpoint_as_a_failure_does() {
    let app = spawn_app_with(Options {
        patch: vec![("timeout_seconds = 2\npoll", "timeout_seconds = 4\npoll".to_owned())],
        ..Options::default()
    })
    .await;
    let slow = Receiver::start().await;
    slow.set_delay(Duration::from_millis(2500));
    let (webhook, _) = register(&app, &app.admin_key, &slow.url, &["elicitation.cancelled"]).await;
    backlog(&app, "acme", 3).await;
    let hook = || async {
        let r = app.admin(reqwest::Method::GET, "/webhooks", None).await;
        let b: Value = r.json().await.unwrap();
        b["webhooks"].as_array().unwrap().iter().find(|w| w["id"] == webhook.as_str()).unwrap().clone()
    };
    eventually(WAIT, "a slow attempt was recorded", || async {
        deliveries(&app, &webhook).await.iter().any(|d| d["status"] == "delivered")
    })
    .await;
    let w = hook().await;
    assert!(w["paused_until"].is_string(), "a slow success rests it: {w}");
    assert_eq!(w["consecutive_failures"], 0, "for the first backoff, without a failure to grow on: {w}");
    // Delivered all the same: the receiver took it.
    assert!(deliveries(&app, &webhook).await.iter().any(|d| d["status"] == "delivered" && d["last_error"].is_null()));
}

#[tokio::test]
async fn a_tenants_pending_deliveries_are_capped_by_dropping_the_oldest() {
    let app = spawn_app_with(Options {
        extra_toml: "[metrics]\nlisten = \"127.0.0.1:0\"\n".to_owned(),
        patch: vec![("poll_interval_ms = 200", "poll_interval_ms = 200\nmax_pending_per_tenant = 5".to_owned())],
        ..Options::default()
    })
    .await;
    let receiver = Receiver::start().await;
    receiver.set_down(true);
    let (webhook, _) = register(&app, &app.admin_key, &receiver.url, &["elicitation.cancelled"]).await;
    backlog(&app, "acme", 8).await;
    eventually(WAIT, "the backlog is trimmed to 5", || async {
        let pending = deliveries(&app, &webhook).await.iter().filter(|d| d["status"] == "pending").count();
        pending == 5
    })
    .await;
    let all = deliveries(&app, &webhook).await;
    let dropped: Vec<i64> =
        all.iter().filter(|d| d["last_error"] == "backlog_dropped").map(|d| d["id"].as_i64().unwrap()).collect();
    let kept: Vec<i64> = all.iter().filter(|d| d["status"] == "pending").map(|d| d["id"].as_i64().unwrap()).collect();
    assert_eq!(dropped.len(), 3, "{all:?}");
    assert!(dropped.iter().all(|d| kept.iter().all(|k| d < k)), "the oldest go: {dropped:?} {kept:?}");
    assert!(all.iter().filter(|d| d["last_error"] == "backlog_dropped").all(|d| d["status"] == "failed"));
    // Beta's endpoint is not touched by acme's cap.
    let url = format!("http://127.0.0.1:{}/metrics", app.metrics_port.unwrap());
    let text = app.client.get(url).send().await.unwrap().text().await.unwrap();
    assert!(text.lines().any(|l| l.starts_with("mcp_connect_webhook_dropped_total") && l.ends_with(" 3")), "{text}");
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_reported_as_a_refused_address_is() {
    let app = spawn_app().await;
    // `.invalid` never resolves (RFC 6761 §6.4): today `connect`, which tells a tenant
    // which internal names exist (those answer `address_refused`).
    let (webhook, _) =
        register(&app, &app.admin_key, "https://no-such-host.invalid/in", &["elicitation.cancelled"]).await;
    let (id, _) = app.elicit("alice", "testp").await;
    cancel(&app, &id, "cancel").await;
    eventually(WAIT, "an attempt is recorded", || async {
        deliveries(&app, &webhook).await.first().is_some_and(|d| !d["last_error"].is_null())
    })
    .await;
    let d = &deliveries(&app, &webhook).await[0];
    assert_eq!(d["last_error"], "address_refused", "{d}");
}

#[tokio::test]
async fn pending_deliveries_of_a_tenant_switched_off_are_not_sent() {
    let app = spawn_app().await;
    let receiver = Receiver::start().await;
    receiver.set_down(true);
    let (webhook, _) = register(&app, &app.admin_key, &receiver.url, &["elicitation.cancelled"]).await;
    backlog(&app, "acme", 2).await;
    eventually(WAIT, "tried while the receiver is down", || async { !receiver.all().is_empty() }).await;
    mcp_connect::store::tenants::set_tenant_active(&app.pool, &TenantId::parse("acme").unwrap(), false).await.unwrap();
    // Due again now, and the receiver is back.
    sqlx::raw_sql("UPDATE webhook_deliveries SET next_attempt_at = now(); UPDATE webhooks SET paused_until = NULL")
        .execute(&app.pool)
        .await
        .unwrap();
    receiver.set_down(false);
    let before = receiver.all().len();
    eventually(WAIT, "the deliveries are stopped", || async {
        let statuses: Vec<(String, Option<String>)> =
            sqlx::query_as("SELECT status, last_error FROM webhook_deliveries WHERE webhook_id = $1::text::uuid")
                .bind(&webhook)
                .fetch_all(&app.pool)
                .await
                .unwrap();
        statuses.iter().all(|(s, e)| s == "failed" && e.as_deref() == Some("tenant_inactive"))
    })
    .await;
    // An event of another tenant, enqueued now, is sent: the worker has gone round since,
    // and sent nothing more for the switched-off one.
    let other = Receiver::start().await;
    register(&app, &admin_key_of(&app, "beta").await, &other.url, &["elicitation.cancelled"]).await;
    backlog(&app, "beta", 1).await;
    other.wait_for(1, WAIT).await;
    assert_eq!(receiver.all().len(), before, "nothing more was sent for the switched-off tenant");
}
