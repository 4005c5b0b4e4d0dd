//! "Your connections" (`GET /connections`, `POST /connections/disconnect`) over plain HTTP:
//! what a person sees, what they may end, and that nobody ends another's.

use crate::support::browser::{Browser, form_value, location};
use crate::support::{TestApp, spawn_app};
use serde_json::json;

async fn page(app: &TestApp, browser: &Browser) -> (u16, String) {
    let r = browser.get(&format!("{}/connections", app.base)).await;
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

async fn disconnect(app: &TestApp, browser: &Browser, csrf: &str, id: &str) -> (u16, String) {
    let r = browser
        .client
        .post(format!("{}/connections/disconnect", app.base))
        .form(&[("csrf", csrf), ("id", id)])
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.text().await.unwrap())
}

async fn status_of(app: &TestApp, id: impl std::fmt::Display) -> String {
    sqlx::query_scalar("SELECT status FROM connections WHERE id = $1::text::uuid")
        .bind(id.to_string())
        .fetch_one(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn signing_in_leads_to_the_page_which_lists_only_ones_own_connections_by_assistant() {
    let app = spawn_app().await;
    let (_, url) = app.elicit("alice", "testp").await;
    assert_eq!(Browser::new().connect(&app, &url, "alice", "octo-alice").await.status(), 200);
    app.insert_connection("beta", "alice", "github", "gho_beta", &["read:user"], None).await;
    app.insert_connection("acme", "bob", "github", "gho_bob", &["repo"], None).await;
    let needs = app.insert_connection("acme", "alice", "github", "gho_old", &["read:user"], None).await;
    sqlx::query("UPDATE connections SET status = 'needs_reauth', access_token_ct = NULL, refresh_token_ct = NULL WHERE id = $1::text::uuid")
        .bind(needs.to_string())
        .execute(&app.pool)
        .await
        .unwrap();
    let revoked = app.insert_connection("beta", "alice", "gitlab", "glpat_x", &[], None).await;
    sqlx::query("UPDATE connections SET status = 'revoked', access_token_ct = NULL, refresh_token_ct = NULL, key_id = NULL WHERE id = $1::text::uuid")
        .bind(revoked.to_string())
        .execute(&app.pool)
        .await
        .unwrap();

    // Not signed in: to the IdP and back to the page.
    let browser = Browser::new();
    let r = browser.get(&format!("{}/connections", app.base)).await;
    assert_eq!(r.status(), 303);
    assert!(location(&r).ends_with("/login?return_to=%2Fconnections"), "{}", location(&r));
    browser.login(&app, "alice").await;
    let (status, html) = page(&app, &browser).await;
    assert_eq!(status, 200);
    // Grouped by assistant, Acme's first; the provider's name, the host people sign in at,
    // the upstream login, the scopes, since when and the status.
    let acme = html.find("<h2>Acme Assistant</h2>").expect("Acme's group");
    let beta = html.find("<h2>Beta Bot</h2>").expect("Beta's group");
    assert!(acme < beta);
    assert!(html.contains("Test Provider · octo-alice"), "{html}");
    let provider_host = url::Url::parse(&app.provider.base_url()).unwrap();
    let host = format!("{}:{}", provider_host.host_str().unwrap(), provider_host.port().unwrap());
    assert!(html.contains(&format!("<code>{host}</code>")), "the provider's full domain");
    assert!(html.contains("<code>openid</code>, <code>profile</code>"));
    assert!(regex_lite::Regex::new(r"<dd>\d{4}-\d\d-\d\d \d\d:\d\d UTC</dd>").unwrap().is_match(&html));
    assert!(html.contains(r#"class="status-active">active"#));
    assert!(html.contains(r#"class="status-needs_reauth">needs_reauth"#));
    assert!(html.contains("Ask Acme Assistant again"), "a needs_reauth connection says to ask again");
    assert!(!html.contains("gho_") && !html.contains("glpat"), "no token on the page");
    assert!(!html.contains("GitLab") && !html.contains("gitlab"), "a revoked connection is not listed");
    assert_eq!(html.matches("<li class=\"connection\"").count(), 3, "alice's three, not bob's");
    // The same headers as the other pages.
    let r = browser.get(&format!("{}/connections", app.base)).await;
    let h = r.headers();
    assert!(h["content-security-policy"].to_str().unwrap().contains("frame-ancestors 'none'"));
    assert_eq!(h["cache-control"], "no-store");
    assert_eq!(h["referrer-policy"], "no-referrer");
}

#[tokio::test]
async fn disconnect_revokes_at_the_provider_drops_the_grant_and_the_next_token_call_asks_again() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    assert_eq!(browser.connect(&app, &url, "alice", "octo-alice").await.status(), 200);
    let connected = app.token_ok(json!({"subject": "alice", "provider": "testp", "elicitation_id": id})).await;
    let token = connected["access_token"].as_str().unwrap().to_owned();
    let connection = connected["connection_id"].as_str().unwrap().to_owned();
    // A link of alice's for the same provider (more scopes), open elsewhere, is closed too.
    let more = app.token_ok(json!({"subject": "alice", "provider": "testp", "scopes": ["openid", "email"]})).await;
    assert_eq!(more["status"], "connect_required", "{more}");
    let pending = more["elicitation"]["id"].as_str().unwrap().to_owned();
    let (_, html) = page(&app, &browser).await;
    let csrf = form_value(&html, "csrf");
    // The POST answers with a redirect to the page (a reload repeats nothing), which says
    // what happened.
    let r = browser
        .client
        .post(format!("{}/connections/disconnect", app.base))
        .form(&[("csrf", csrf.as_str()), ("id", connection.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    assert_eq!(location(&r), format!("{}/connections?disconnected=testp", app.base));
    let html = browser.get(&location(&r)).await.text().await.unwrap();
    assert!(html.contains("Disconnected Test Provider."), "{html}");
    assert!(html.contains("You have no connections."));
    assert_eq!(status_of(&app, &connection).await, "revoked");
    let me = app.client.get(format!("{}/userinfo", app.provider.base_url())).bearer_auth(&token).send().await.unwrap();
    assert_eq!(me.status(), 401, "the provider's token is dead");
    let again = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(again["status"], "connect_required");
    let by: serde_json::Value = sqlx::query_scalar(
        "SELECT detail FROM audit_events WHERE kind = 'connection_revoked' AND connection_id = $1::text::uuid",
    )
    .bind(&connection)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(by["by"], "subject");
    assert_eq!(app.elicitation_status(&pending).await, "cancelled");
}

#[tokio::test]
async fn nobody_ends_another_subjects_connection_with_a_forged_form_in_this_tenant_or_another() {
    let app = spawn_app().await;
    let bobs = app.insert_connection("acme", "bob", "github", "gho_bob", &["repo"], None).await;
    let bobs_beta = app.insert_connection("beta", "bob", "github", "gho_bob_beta", &["repo"], None).await;
    let alices = app.insert_connection("acme", "alice", "github", "gho_alice", &["repo"], None).await;
    let browser = Browser::new();
    browser.login(&app, "alice").await;
    let (_, html) = page(&app, &browser).await;
    let csrf = form_value(&html, "csrf");
    for (id, what) in [
        (bobs.to_string(), "bob's in acme"),
        (bobs_beta.to_string(), "bob's in beta"),
        ("00000000-0000-0000-0000-000000000000".to_owned(), "none"),
        ("not-an-id".to_owned(), "malformed"),
    ] {
        let (status, html) = disconnect(&app, &browser, &csrf, &id).await;
        assert_eq!(status, 404, "{what}");
        assert!(html.contains("No such connection"), "{what}: {html}");
    }
    assert_eq!(status_of(&app, bobs).await, "active");
    assert_eq!(status_of(&app, bobs_beta).await, "active");
    // A form without the session's token ends nothing, even one's own.
    for bad in ["", "x", &csrf[..csrf.len() - 1]] {
        let (status, html) = disconnect(&app, &browser, bad, &alices.to_string()).await;
        assert_eq!(status, 403);
        assert!(html.contains("This form has expired"), "{html}");
    }
    // Nor does bob's token in alice's browser, or a form with no session at all.
    let bob = Browser::new();
    bob.login(&app, "bob").await;
    let (_, bobs_page) = page(&app, &bob).await;
    let bobs_csrf = form_value(&bobs_page, "csrf");
    assert_eq!(disconnect(&app, &browser, &bobs_csrf, &alices.to_string()).await.0, 403);
    assert_eq!(disconnect(&app, &Browser::new(), &csrf, &alices.to_string()).await.0, 403);
    assert_eq!(status_of(&app, alices).await, "active");
    let revocations: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_events WHERE kind = 'connection_revoked'")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(revocations, 0);
}

#[tokio::test]
async fn what_providers_say_is_shown_as_text_and_a_made_up_notice_is_not_shown() {
    let app = spawn_app().await;
    let id = app.insert_connection("acme", "alice", "github", "gho_x", &["<b>repo</b>"], None).await;
    sqlx::query("UPDATE connections SET account_login = '<script>alert(1)</script>' WHERE id = $1::text::uuid")
        .bind(id.to_string())
        .execute(&app.pool)
        .await
        .unwrap();
    let browser = Browser::new();
    browser.login(&app, "alice").await;
    let (_, html) = page(&app, &browser).await;
    // askama escapes `<` and `>` as numeric references.
    assert!(html.contains("&#60;script&#62;alert(1)&#60;/script&#62;") && !html.contains("<script>"), "{html}");
    assert!(html.contains("<code>&#60;b&#62;repo&#60;/b&#62;</code>"), "{html}");
    for q in ["?disconnected=%3Cscript%3E", "?disconnected=nosuchprovider", "?disconnected=github%20hacked"] {
        let html = browser.get(&format!("{}/connections{q}", app.base)).await.text().await.unwrap();
        assert!(!html.contains("role=\"status\""), "{q}: {html}");
    }
    let html =
        browser.get(&format!("{}/connections?disconnected=github&told=no", app.base)).await.text().await.unwrap();
    assert!(html.contains("GitHub could not be told"), "{html}");
}

#[tokio::test]
async fn the_page_shows_promptly_when_a_providers_discovery_is_down() {
    let app = crate::support::spawn_app_with(crate::support::Options {
        extra_toml: "[providers.downp]\ntemplate = \"oidc\"\nissuer = \"http://127.0.0.1:9\"\nclient_id = \"downp\"\n"
            .to_owned(),
        patch: vec![("\"deadrev\"]", "\"deadrev\", \"downp\"]".to_owned())],
        env: vec![("MCP_CONNECT_PROVIDER_DOWNP_CLIENT_SECRET", "downp-secret".to_owned())],
        ..Default::default()
    })
    .await;
    app.insert_connection("acme", "alice", "downp", "at_down", &[], None).await;
    let browser = Browser::new();
    browser.login(&app, "alice").await;
    let started = std::time::Instant::now();
    let (status, html) = page(&app, &browser).await;
    assert_eq!(status, 200);
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(html.contains("<h3") && html.contains("downp"), "{html}");
    assert!(!html.contains("<dt>At</dt>"), "no host when the metadata cannot be had");
}

#[tokio::test]
async fn the_consent_page_and_the_result_page_link_to_the_connections_page() {
    let app = spawn_app().await;
    let (_, url) = app.elicit("alice", "testp").await;
    let browser = Browser::new();
    let consent = browser.open(&app, &url, "alice").await.text().await.unwrap();
    assert!(consent.contains(r#"<a href="/connections">disconnect at any time</a>"#), "{consent}");
    let (_, url) = app.elicit("bob", "testp").await;
    let r = Browser::new().connect(&app, &url, "bob", "octo-bob").await;
    assert!(r.text().await.unwrap().contains(r#"<a href="/connections">Your connections</a>"#));
}

#[tokio::test]
async fn disconnect_error_pages_speak_of_disconnecting_not_of_the_connect_link() {
    let app = spawn_app().await;
    let alices = app.insert_connection("acme", "alice", "github", "gho_alice", &["repo"], None).await;
    let browser = Browser::new();
    browser.login(&app, "alice").await;
    let (_, html) = page(&app, &browser).await;
    let csrf = form_value(&html, "csrf");
    for (what, (status, html)) in [
        ("no such connection", disconnect(&app, &browser, &csrf, "not-an-id").await),
        ("a forged form", disconnect(&app, &browser, "forged", &alices.to_string()).await),
        ("no session", disconnect(&app, &Browser::new(), &csrf, &alices.to_string()).await),
    ] {
        assert!(status == 403 || status == 404, "{what}: {status}");
        assert!(html.contains("Nothing was disconnected."), "{what}: {html}");
        assert!(html.contains("Open your connections again"), "{what}: {html}");
        assert!(!html.contains("Nothing was connected"), "{what}: the connect flow's words: {html}");
        assert!(!html.contains("from your assistant"), "{what}: the connect flow's hint: {html}");
    }
    assert_eq!(status_of(&app, alices).await, "active");
}

#[tokio::test]
async fn a_reconnect_after_a_revocation_shows_when_the_new_grant_was_made_and_is_no_replacement() {
    let app = spawn_app().await;
    let (_, url) = app.elicit("alice", "testp").await;
    assert_eq!(Browser::new().connect(&app, &url, "alice", "octo-alice").await.status(), 200);
    let first = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    let id = first["connection_id"].as_str().unwrap().to_owned();
    let r = app.admin(reqwest::Method::POST, &format!("/connections/{id}/revoke"), None).await;
    assert_eq!(r.status(), 200);
    // The first grant was made a day ago (as far as the row knows).
    sqlx::query(
        "UPDATE connections SET created_at = created_at - interval '1 day', granted_at = granted_at - interval '1 day'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let (_, url) = app.elicit("alice", "testp").await;
    assert_eq!(Browser::new().connect(&app, &url, "alice", "octo-alice").await.status(), 200);
    let again = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(again["connection_id"], id.as_str(), "the same row, reused");

    // The admin API: when this grant was made, and when the row was first made.
    let r = app.admin(reqwest::Method::GET, &format!("/connections/{id}"), None).await;
    let c: serde_json::Value = r.json().await.unwrap();
    let at = |k: &str| {
        time::OffsetDateTime::parse(c[k].as_str().unwrap(), &time::format_description::well_known::Rfc3339).unwrap()
    };
    let now = time::OffsetDateTime::now_utc();
    assert!(now - at("granted_at") < time::Duration::minutes(5), "{c}");
    assert!(now - at("created_at") > time::Duration::hours(23), "{c}");
    // The page shows the new grant's time.
    let browser = Browser::new();
    browser.login(&app, "alice").await;
    let (_, html) = page(&app, &browser).await;
    let minute = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute] UTC");
    let connected = html.split("<dt>Connected</dt><dd>").nth(1).unwrap().split("</dd>").next().unwrap();
    assert_eq!(connected, at("granted_at").format(&minute).unwrap(), "this grant's time, not the row's");
    assert_ne!(connected, at("created_at").format(&minute).unwrap());
    // The audit trail keeps the row's history: the second connect replaced no grant.
    let details: Vec<serde_json::Value> = sqlx::query_scalar(
        "SELECT detail FROM audit_events WHERE kind = 'connect_completed' AND connection_id = $1::text::uuid ORDER BY id",
    )
    .bind(&id)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(details.len(), 2);
    assert_eq!(details[0]["replaced"], false);
    assert_eq!(details[1]["replaced"], false, "the row it reused held a revoked grant: {}", details[1]);
    assert_eq!(details[1]["previous_status"], "revoked");
}
