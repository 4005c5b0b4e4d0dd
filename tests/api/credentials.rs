//! Providers without OAuth (issue 28, part 1): an API key or a username and password typed
//! on our connect page, after the same link checks as the consent page, checked against
//! the provider (the dev provider's `GET /api/me`, a real HTTP peer), sealed, and handed
//! out by `/v1/token` with its `credential_type`. Refusals name their reason; no value
//! reaches a log, an audit row, a webhook, a URL or an error page.

use crate::support::browser::{Browser, form_value};
use crate::support::chrome::{Chrome, Setup, open_and_sign_in};
use crate::support::receiver::{Receiver, register};
use crate::support::{Options, TestApp, eventually, spawn_app_with};
use serde_json::json;
use std::time::Duration;

const GOOD_KEY: &str = "devkey-alice-upstream";
const WRONG_KEY: &str = "sk-wrong-0123456789abcdef";

fn options() -> Options {
    Options {
        patch: vec![("\"deadrev\"]", "\"deadrev\", \"keyp\", \"basicp\", \"queryp\", \"plainkey\"]".to_owned())],
        extra_toml: "[providers.keyp]\ntemplate = \"api_key\"\ndisplay_name = \"Key Service\"\n\
                     account_id_field = \"id\"\naccount_login_field = \"login\"\n\
                     [providers.keyp.check]\nurl = \"{PROVIDER}/api/me\"\nheader = \"X-Api-Key\"\n\
                     [providers.basicp]\ntemplate = \"basic\"\ndisplay_name = \"Basic Service\"\n\
                     account_id_field = \"id\"\naccount_login_field = \"login\"\n\
                     [providers.basicp.check]\nurl = \"{PROVIDER}/api/me\"\n\
                     [providers.queryp]\ntemplate = \"api_key\"\ndisplay_name = \"Query Service\"\n\
                     fields = [{ name = \"site\", label = \"Site name\", secret = false }, \
                               { name = \"token\", label = \"Access token\" }]\n\
                     [providers.queryp.check]\nurl = \"{PROVIDER}/api/me?v=1\"\nquery = \"api_key\"\n\
                     [providers.plainkey]\ntemplate = \"api_key\"\ndisplay_name = \"Unchecked Service\"\n"
            .to_owned(),
        ..Options::default()
    }
}

async fn spawn() -> TestApp {
    spawn_app_with(options()).await
}

/// The form page of a link, for `subject` signed in in `browser`.
pub(crate) async fn form_page(app: &TestApp, browser: &Browser, url: &str, subject: &str) -> String {
    let page = browser.open(app, url, subject).await;
    assert_eq!(page.status(), 200, "the credential form");
    page.text().await.unwrap()
}

/// Posts the credential form as the page would, with `fields` typed in.
pub(crate) async fn submit(
    app: &TestApp,
    browser: &Browser,
    provider: &str,
    page: &str,
    fields: &[(&str, &str)],
) -> reqwest::Response {
    let csrf = form_value(page, "csrf");
    let e = form_value(page, "e");
    let mut form: Vec<(&str, &str)> = vec![("csrf", &csrf), ("e", &e)];
    form.extend_from_slice(fields);
    browser.client.post(format!("{}/connect/{provider}/credential", app.base)).form(&form).send().await.unwrap()
}

async fn retry(app: &TestApp, subject: &str, provider: &str, id: &str) -> serde_json::Value {
    app.token_ok(json!({"subject": subject, "provider": provider, "elicitation_id": id})).await
}

async fn connect_failures(app: &TestApp) -> Vec<serde_json::Value> {
    sqlx::query_scalar("SELECT detail FROM audit_events WHERE kind = 'connect_failed' ORDER BY id")
        .fetch_all(&app.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn an_api_key_typed_in_a_real_browser_is_checked_sealed_and_handed_out_with_its_kind() {
    let app = spawn().await;
    let (id, url) = app.elicit("alice", "keyp").await;
    let chrome = Chrome::start("api-key", Setup { javascript: false, ..Setup::default() }).await;

    open_and_sign_in(&chrome, &app, &url, "alice").await;
    chrome.wait_for_url(&format!("{}/connect/keyp?e={id}", app.base)).await;
    let text = chrome.assert_our_page().await;
    chrome.screenshot("form").await;
    assert_eq!(chrome.text("h1").await, "Connect your Key Service account?");
    assert!(text.contains("Acme Assistant"), "{text}");
    assert!(text.contains("Signed in as alice"), "{text}");
    // Where the value goes, in full; a password input the browser does not fill or keep.
    assert_eq!(chrome.text(".domain .label").await, "Checked at");
    let authority = app.provider.base_url().trim_start_matches("http://").to_owned();
    assert_eq!(chrome.text(".domain .host").await, authority);
    let input = chrome.find("input[name=api_key]").await;
    assert_eq!(input.attr("type").await.unwrap().as_deref(), Some("password"));
    assert_eq!(input.attr("autocomplete").await.unwrap().as_deref(), Some("off"));
    let form = chrome.find("form.credential").await;
    assert_eq!(form.attr("autocomplete").await.unwrap().as_deref(), Some("off"));
    assert_eq!(chrome.text("label[for=f-api_key]").await, "API key");

    // A wrong key: the provider refuses it; the form comes back saying so, empty.
    chrome.type_into("input[name=api_key]", WRONG_KEY).await;
    chrome.click("button[name=decision][value=connect]").await;
    chrome.wait_for_url(&format!("{}/connect/keyp/credential", app.base)).await;
    let text = chrome.assert_our_page().await;
    chrome.screenshot("refused").await;
    assert!(text.contains("The provider did not accept what you typed. Nothing was stored"), "{text}");
    assert!(!text.contains(WRONG_KEY), "the page never shows the value back");
    let again = chrome.find("input[name=api_key]").await;
    assert_eq!(again.attr("value").await.unwrap(), None, "the form comes back empty");
    assert_eq!(app.connection_count().await, 0);
    assert_eq!(app.elicitation_status(&id).await, "pending");
    let failures = connect_failures(&app).await;
    assert_eq!(failures, [json!({"reason": "credential_refused", "provider_status": 401})]);

    // The right one: checked, kept, and the account the provider named is shown.
    chrome.type_into("input[name=api_key]", GOOD_KEY).await;
    chrome.click("button[name=decision][value=connect]").await;
    chrome.wait_for_url(&format!("{}/connect/keyp/credential", app.base)).await;
    chrome.assert_our_page().await;
    assert_eq!(chrome.text("h1").await, "Connected");
    let text = chrome.page_text().await;
    chrome.screenshot("connected").await;
    assert!(text.contains("Your account alice-upstream is connected."), "{text}");
    assert!(text.contains("return to Acme Assistant"), "{text}");
    // The link is single use: opened again, it says so and offers no form.
    chrome.goto(&url).await;
    assert_eq!(chrome.text("h1").await, "This link was already used");
    assert!(chrome.all("input[name=api_key]").await.is_empty());
    chrome.close().await;

    assert_eq!(app.provider.stats().credential_checks, 2);
    assert_eq!(app.provider.stats().authorize_requests, 0, "no OAuth at all");
    let b = retry(&app, "alice", "keyp", &id).await;
    assert_eq!(b["status"], "connected", "{b}");
    assert_eq!(b["credential_type"], "api_key");
    assert_eq!(b["access_token"], GOOD_KEY);
    assert_eq!(b["fields"], json!({"api_key": GOOD_KEY}));
    assert_eq!(b["account"]["login"], "alice-upstream");
    assert_eq!(b["expires_at"], serde_json::Value::Null);
    // Again from the cache: the same.
    let again = app.token_ok(json!({"subject": "alice", "provider": "keyp"})).await;
    assert_eq!((again["access_token"].as_str(), again["credential_type"].as_str()), (Some(GOOD_KEY), Some("api_key")));
    // Sealed: the row holds no plaintext.
    let ct: Vec<u8> = sqlx::query_scalar("SELECT access_token_ct FROM connections").fetch_one(&app.pool).await.unwrap();
    assert!(!String::from_utf8_lossy(&ct).contains("alice-upstream"));
    // An OAuth provider's answer says so.
    let c = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(c["status"], "connect_required");
}

#[tokio::test]
async fn a_credential_form_without_csrf_from_another_subject_or_for_an_oauth_provider_is_refused() {
    let app = spawn().await;
    let (id, url) = app.elicit("alice", "keyp").await;

    // Bob signed in, posting to alice's link with his own session's CSRF token.
    let bob = Browser::new();
    bob.login(&app, "bob").await;
    let bobs = bob.get(&url).await;
    assert_eq!(bobs.status(), 403, "bob's page is the refusal");
    let (other, _) = app.elicit("bob", "keyp").await;
    let bobs_own = form_page(&app, &bob, &format!("{}/connect/keyp?e={other}", app.base), "bob").await;
    let csrf = form_value(&bobs_own, "csrf");
    let r = bob
        .client
        .post(format!("{}/connect/keyp/credential", app.base))
        .form(&[("csrf", csrf.as_str()), ("e", id.as_str()), ("api_key", GOOD_KEY)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("This link was made for another account"));
    let mismatches: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_events WHERE kind = 'identity_mismatch' AND elicitation_id = $1",
    )
    .bind(uuid::Uuid::parse_str(&id).unwrap())
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert!(mismatches >= 1, "recorded");

    // Alice, without the CSRF token, or with another one.
    let alice = Browser::new();
    let page = form_page(&app, &alice, &url, "alice").await;
    for csrf in [None, Some("not-the-token")] {
        let mut form = vec![("e", id.as_str()), ("api_key", GOOD_KEY)];
        if let Some(c) = csrf {
            form.push(("csrf", c));
        }
        let r = alice.client.post(format!("{}/connect/keyp/credential", app.base)).form(&form).send().await.unwrap();
        assert_eq!(r.status(), 403, "{csrf:?}");
        let body = r.text().await.unwrap();
        assert!(body.contains("Open the link from your assistant again"), "{body}");
        assert!(!body.contains(GOOD_KEY));
    }
    // No session at all.
    let r = Browser::new()
        .client
        .post(format!("{}/connect/keyp/credential", app.base))
        .form(&[("csrf", form_value(&page, "csrf").as_str()), ("e", id.as_str()), ("api_key", GOOD_KEY)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert!(r.text().await.unwrap().contains("Your sign-in has expired"));

    // The OAuth Connect button's endpoint does not run for a credential provider, nor the
    // form for an OAuth one.
    let r = alice.consent(&app, "keyp", &page, "connect").await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("This provider is connected with a form"));
    let (oauth_id, oauth_url) = app.elicit("alice", "testp").await;
    let oauth_page = alice.get(&oauth_url).await.text().await.unwrap();
    let r = submit(&app, &alice, "testp", &oauth_page, &[("api_key", GOOD_KEY)]).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("This provider is connected at its own sign-in"));
    assert_eq!(app.elicitation_status(&oauth_id).await, "pending");
    // An empty value: the form again, saying which.
    let r = submit(&app, &alice, "keyp", &page, &[("api_key", "  ")]).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("API key is empty. Nothing was stored."));

    // Nothing was checked at the provider, nothing stored; alice's link still works.
    assert_eq!(app.provider.stats().credential_checks, 0);
    assert_eq!(app.connection_count().await, 0);
    assert_eq!(app.elicitation_status(&id).await, "pending");
    let r = submit(&app, &alice, "keyp", &page, &[("api_key", GOOD_KEY)]).await;
    assert_eq!(r.status(), 200);
    // A second submit of the same form (a double click): the same link, done once.
    let r = submit(&app, &alice, "keyp", &page, &[("api_key", "devkey-alice-other")]).await;
    assert_eq!(r.status(), 410, "the link was used");
    assert_eq!(app.connection_count().await, 1);
    assert_eq!(retry(&app, "alice", "keyp", &id).await["access_token"], GOOD_KEY);
}

#[tokio::test]
async fn basic_credentials_are_checked_as_http_basic_and_handed_out_with_the_username() {
    let app = spawn().await;
    let (id, url) = app.elicit("alice", "basicp").await;
    let browser = Browser::new();
    let page = form_page(&app, &browser, &url, "alice").await;
    assert!(page.contains(r#"name="username" type="text""#), "{page}");
    assert!(page.contains(r#"name="password" type="password""#), "{page}");

    let r = submit(&app, &browser, "basicp", &page, &[("username", "ann"), ("password", "devpass-bob")]).await;
    assert_eq!(r.status(), 400, "another's password");
    let r = submit(&app, &browser, "basicp", &page, &[("username", "ann"), ("password", "devpass-ann")]).await;
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("Your account ann is connected."));
    let b = retry(&app, "alice", "basicp", &id).await;
    assert_eq!(b["credential_type"], "basic", "{b}");
    assert_eq!(b["access_token"], "devpass-ann");
    assert_eq!(b["fields"], json!({"username": "ann", "password": "devpass-ann"}));
    assert_eq!(b["token_type"], "basic");
    // "Your connections" lists it, with where it is checked; disconnecting it there ends it.
    let listed = browser.get(&format!("{}/connections", app.base)).await.text().await.unwrap();
    assert!(listed.contains("Basic Service · ann"), "{listed}");
    let authority = app.provider.base_url().trim_start_matches("http://").to_owned();
    assert!(listed.contains(&format!("<code>{authority}</code>")), "{listed}");
    assert!(!listed.contains("devpass-ann"));
    let r = browser
        .client
        .post(format!("{}/connections/disconnect", app.base))
        .form(&[("csrf", form_value(&listed, "csrf")), ("id", form_value(&listed, "id"))])
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success() || r.status().is_redirection(), "{}", r.status());
    let after = app.token_ok(json!({"subject": "alice", "provider": "basicp"})).await;
    assert_eq!(after["status"], "connect_required", "{after}");

    // Several fields, the check's value in a query parameter; and an unchecked provider.
    let (qid, qurl) = app.elicit("alice", "queryp").await;
    let page = form_page(&app, &browser, &qurl, "alice").await;
    assert!(page.contains("Site name") && page.contains("Access token"), "{page}");
    let r = submit(&app, &browser, "queryp", &page, &[("site", "eu-1"), ("token", "devkey-alice-q")]).await;
    assert_eq!(r.status(), 200);
    let q = retry(&app, "alice", "queryp", &qid).await;
    assert_eq!((q["access_token"].as_str(), q["fields"]["site"].as_str()), (Some("devkey-alice-q"), Some("eu-1")));
    let (pid, purl) = app.elicit("alice", "plainkey").await;
    let page = form_page(&app, &browser, &purl, "alice").await;
    assert!(page.contains("is not asked whether it is valid"), "{page}");
    let r = submit(&app, &browser, "plainkey", &page, &[("api_key", "anything-at-all-1234")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(retry(&app, "alice", "plainkey", &pid).await["access_token"], "anything-at-all-1234");
    assert_eq!(app.provider.stats().credential_checks, 3, "basicp twice, queryp once, plainkey never");
}

#[tokio::test]
async fn a_typed_credential_reaches_no_log_audit_row_webhook_url_or_error_page_and_revocation_shreds_it() {
    let logs = crate::logs::capture_logs();
    let app = spawn().await;
    let receiver = Receiver::start().await;
    let all: Vec<&str> = mcp_connect::webhooks::EventKind::ALL.iter().map(|k| k.as_str()).collect();
    register(&app, &app.admin_key, &receiver.url, &all).await;

    let (id, url) = app.elicit("alice", "keyp").await;
    let browser = Browser::new();
    let page = form_page(&app, &browser, &url, "alice").await;
    let mut bodies = Vec::new();
    let mut locations = Vec::new();
    for value in [WRONG_KEY, GOOD_KEY] {
        let r = submit(&app, &browser, "keyp", &page, &[("api_key", value)]).await;
        locations.extend(r.headers().get("location").map(|l| l.to_str().unwrap().to_owned()));
        bodies.push(r.text().await.unwrap());
    }
    let b = retry(&app, "alice", "keyp", &id).await;
    assert_eq!(b["access_token"], GOOD_KEY);
    let conn = b["connection_id"].as_str().unwrap().to_owned();
    let r = app.admin(reqwest::Method::POST, &format!("/connections/{conn}/revoke"), None).await;
    assert_eq!(r.status(), 200);
    let revoked: serde_json::Value = r.json().await.unwrap();
    assert_eq!(revoked["provider_result"], "no_revocation_endpoint", "{revoked}");
    // Crypto-shredded: no ciphertext is left, and nothing is handed out.
    let left: (Option<Vec<u8>>, Option<Vec<u8>>) =
        sqlx::query_as("SELECT access_token_ct, refresh_token_ct FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(left, (None, None));
    let after = app.token_ok(json!({"subject": "alice", "provider": "keyp"})).await;
    assert_eq!(after["status"], "connect_required");

    let got = receiver.wait_for(2, Duration::from_secs(20)).await;
    let audit: Vec<serde_json::Value> =
        sqlx::query_scalar("SELECT to_jsonb(a) FROM audit_events a").fetch_all(&app.pool).await.unwrap();
    eventually(Duration::from_secs(10), "the submits' log lines", || async {
        String::from_utf8_lossy(&logs.lock().unwrap()).matches("/connect/keyp/credential").count() >= 2
    })
    .await;
    let logs = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    let webhooks: String = got.iter().map(|d| d.body.clone()).collect();
    assert!(webhooks.contains("connection.created") && webhooks.contains("connection.revoked"), "{webhooks}");
    let audit = serde_json::to_string(&audit).unwrap();
    assert!(audit.contains("credential_refused"), "the refusal is audited");
    for value in [GOOD_KEY, WRONG_KEY] {
        for (what, text) in [
            ("logs", logs.as_str()),
            ("audit rows", audit.as_str()),
            ("webhooks", webhooks.as_str()),
            ("pages", &bodies.concat()),
            ("locations", &locations.concat()),
            ("the connect URL", url.as_str()),
        ] {
            assert!(!text.contains(value), "{value} in {what}");
        }
    }
}

#[tokio::test]
async fn five_refused_values_end_the_checks_for_the_person_and_a_declined_links_successor_gets_no_more() {
    let app = spawn().await;
    let (id, url) = app.elicit("alice", "basicp").await;
    let browser = Browser::new();
    let page = form_page(&app, &browser, &url, "alice").await;
    for n in 0..5 {
        let password = format!("guess-{n}-0123456789");
        let r = submit(&app, &browser, "basicp", &page, &[("username", "ann"), ("password", &password)]).await;
        assert_eq!(r.status(), 400, "attempt {n}");
    }
    // The sixth, even the right one, is not sent to the provider.
    let r = submit(&app, &browser, "basicp", &page, &[("username", "ann"), ("password", "devpass-ann")]).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("Too many attempts"));
    assert_eq!(app.provider.stats().credential_checks, 5);
    assert_eq!(app.connection_count().await, 0);
    assert_eq!(app.elicitation_status(&id).await, "pending");
    let last = connect_failures(&app).await.pop().unwrap();
    assert_eq!(last["reason"], "too_many_attempts", "audited: {last}");

    // Declined: the next link is the same person's, with the same (spent) budget.
    let r = browser.consent(&app, "basicp", &page, "decline").await;
    assert!(r.status().is_success() || r.status().is_redirection(), "{}", r.status());
    assert_eq!(app.elicitation_status(&id).await, "declined");
    let (next, url) = app.elicit("alice", "basicp").await;
    assert_ne!(next, id);
    let page = form_page(&app, &browser, &url, "alice").await;
    let r = submit(&app, &browser, "basicp", &page, &[("username", "ann"), ("password", "devpass-ann")]).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("Too many attempts"));
    assert_eq!(app.provider.stats().credential_checks, 5, "a new link brings no new checks");

    // Another person's budget is their own; and past the window it is full again.
    let other = Browser::new();
    let (_, url) = app.elicit("bob", "basicp").await;
    let page_b = form_page(&app, &other, &url, "bob").await;
    let r = submit(&app, &other, "basicp", &page_b, &[("username", "ann"), ("password", "devpass-ann")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(app.provider.stats().credential_checks, 6);
    sqlx::query("UPDATE credential_check_budget SET window_start = window_start - interval '61 minutes'")
        .execute(&app.pool)
        .await
        .unwrap();
    let r = submit(&app, &browser, "basicp", &page, &[("username", "ann"), ("password", "devpass-ann")]).await;
    assert_eq!(r.status(), 200, "a new window");
    assert_eq!(app.provider.stats().credential_checks, 7);
}

#[tokio::test]
async fn twenty_concurrent_submits_of_one_person_reach_the_provider_at_most_five_times() {
    let app = spawn().await;
    let (id, url) = app.elicit("alice", "basicp").await;
    let browser = Browser::new();
    let page = form_page(&app, &browser, &url, "alice").await;
    let guesses: Vec<String> = (0..20).map(|n| format!("guess-{n}-0123456789")).collect();
    let forms: Vec<[(&str, &str); 2]> =
        guesses.iter().map(|g| [("username", "ann"), ("password", g.as_str())]).collect();
    let calls = forms.iter().map(|f| submit(&app, &browser, "basicp", &page, f));
    let answers = futures_util::future::join_all(calls).await;
    let mut too_many = 0;
    for r in answers {
        assert_eq!(r.status(), 400);
        if r.text().await.unwrap().contains("Too many attempts") {
            too_many += 1;
        }
    }
    assert_eq!(app.provider.stats().credential_checks, 5, "taken before the check, atomically");
    assert_eq!(too_many, 15);
    assert_eq!(app.elicitation_status(&id).await, "pending");
}

#[tokio::test]
async fn a_typed_credential_is_not_handed_out_after_its_provider_changed_kind() {
    let app = spawn().await;
    let (id, url) = app.elicit("alice", "basicp").await;
    let browser = Browser::new();
    let page = form_page(&app, &browser, &url, "alice").await;
    let r = submit(&app, &browser, "basicp", &page, &[("username", "ann"), ("password", "devpass-ann")]).await;
    assert_eq!(r.status(), 200);
    assert_eq!(retry(&app, "alice", "basicp", &id).await["credential_type"], "basic");

    // The same database, a file in which `basicp` now asks for an API key: the password
    // is never handed out as one; the person is asked to connect anew.
    let mut opts = options();
    opts.extra_toml = opts
        .extra_toml
        .replace("[providers.basicp]\ntemplate = \"basic\"", "[providers.basicp]\ntemplate = \"api_key\"");
    opts.extra_toml = opts.extra_toml.replace(
        "[providers.basicp.check]\nurl = \"{PROVIDER}/api/me\"\n",
        "[providers.basicp.check]\nurl = \"{PROVIDER}/api/me\"\nheader = \"X-Api-Key\"\n",
    );
    assert!(opts.extra_toml.contains("template = \"api_key\"\ndisplay_name = \"Basic Service\""));
    let changed = crate::support::spawn_on(&app, &opts).await;
    let b = changed.token_ok(json!({"subject": "alice", "provider": "basicp"})).await;
    assert_eq!(b["status"], "connect_required", "{b}");
    // And revoking the row tells no provider anything (it is typed, whatever the file says).
    let conn: uuid::Uuid = sqlx::query_scalar("SELECT id FROM connections").fetch_one(&app.pool).await.unwrap();
    let r = changed.admin(reqwest::Method::POST, &format!("/connections/{conn}/revoke"), None).await;
    let out: serde_json::Value = r.json().await.unwrap();
    assert_eq!(out["provider_result"], "no_revocation_endpoint", "{out}");
}

#[tokio::test]
async fn a_key_of_another_upstream_account_does_not_replace_the_one_connected() {
    let app = spawn().await;
    let browser = Browser::new();
    let (first, url) = app.elicit("alice", "keyp").await;
    let page = form_page(&app, &browser, &url, "alice").await;
    assert_eq!(submit(&app, &browser, "keyp", &page, &[("api_key", GOOD_KEY)]).await.status(), 200);
    assert_eq!(retry(&app, "alice", "keyp", &first).await["account"]["login"], "alice-upstream");

    // A reconnect (a new link) with a valid key of someone else's account at the service.
    sqlx::query("UPDATE connections SET status = 'needs_reauth'").execute(&app.pool).await.unwrap();
    app.state.caches.forget_connection(&mcp_connect::domain::ConnectionKey {
        tenant: mcp_connect::domain::TenantId::parse("acme").unwrap(),
        subject: mcp_connect::domain::Subject::parse("alice").unwrap(),
        provider: mcp_connect::domain::ProviderId::parse("keyp").unwrap(),
    });
    let (second, url) = app.elicit("alice", "keyp").await;
    assert_ne!(first, second);
    let page = form_page(&app, &browser, &url, "alice").await;
    let r = submit(&app, &browser, "keyp", &page, &[("api_key", "devkey-mallory-key")]).await;
    assert_eq!(r.status(), 409);
    assert!(r.text().await.unwrap().contains("belongs to another account than the one already connected"));
    let kinds = app.audit_kinds().await;
    assert!(kinds.iter().any(|k| k == "account_mismatch"), "{kinds:?}");
    let held: String = sqlx::query_scalar("SELECT account_login FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(held, "alice-upstream", "the connection held stays");
}

#[tokio::test]
async fn a_valid_value_costs_no_check_of_the_persons_budget() {
    let app = spawn().await;
    let (_, url) = app.elicit("alice", "basicp").await;
    let browser = Browser::new();
    let page = form_page(&app, &browser, &url, "alice").await;
    for n in 0..4 {
        let password = format!("guess-{n}-0123456789");
        let r = submit(&app, &browser, "basicp", &page, &[("username", "ann"), ("password", &password)]).await;
        assert_eq!(r.status(), 400, "attempt {n}");
    }
    let r = submit(&app, &browser, "basicp", &page, &[("username", "ann"), ("password", "devpass-ann")]).await;
    assert_eq!(r.status(), 200);
    let used: i32 = sqlx::query_scalar("SELECT used FROM credential_check_budget").fetch_one(&app.pool).await.unwrap();
    assert_eq!(used, 4, "the right value was given back: only refused values count");
}
