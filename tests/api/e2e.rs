//! The connect flow in a real browser: Debian's Chromium driven through chromedriver, with
//! real clicks, taps, keys and cookies on the IdP's, our and the provider's pages. Some
//! runs have JavaScript switched off, one is a phone. Every page visited is saved under
//! `test-artifacts/screenshots/<test>-<nn>-<step>.png` for a person to look at.
//!
//! Needs `/usr/bin/chromium` and `/usr/bin/chromedriver` (Debian's `chromium` and
//! `chromium-driver`, which `.ci/run` installs); without them these tests fail and say so.

mod attacker;

use crate::support::chrome::{
    Chrome, Screen, Setup, answer_at_the_provider, callback_heading, on_the_consent_page, open_and_sign_in,
};
use crate::support::{TestApp, spawn_app};
use fantoccini::key::Key;
use serde_json::json;

/// The MCP server's retry: `POST /v1/token` with the elicitation id.
async fn retry(app: &TestApp, subject: &str, id: &str) -> serde_json::Value {
    app.token_ok(json!({"subject": subject, "provider": "testp", "elicitation_id": id})).await
}

#[tokio::test]
async fn a_person_connects_alice_in_a_real_browser() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let chrome = Chrome::start("connect", Setup::default()).await;

    open_and_sign_in(&chrome, &app, &url, "alice").await;
    let text = on_the_consent_page(&chrome, &app, &id).await;
    chrome.screenshot("consent").await;
    assert!(text.contains("Connect your Test Provider account?"), "{text}");
    assert!(text.contains("Acme Assistant"), "{text}");
    assert!(text.contains("Signed in as alice"), "{text}");
    // The domain the person will sign in at is shown in full, in its own box.
    assert_eq!(chrome.text(".domain .label").await, "You will sign in at");
    let provider_authority = app.provider.base_url().trim_start_matches("http://").to_owned();
    assert_eq!(chrome.text(".domain .host").await, provider_authority);
    let mut scopes = Vec::new();
    for li in chrome.all("ul.scopes li").await {
        scopes.push(li.text().await.unwrap());
    }
    assert_eq!(scopes, ["openid", "profile"]);

    chrome.click("button[name=decision][value=connect]").await;
    answer_at_the_provider(&chrome, &app, "octo-alice", "allow").await;
    assert_eq!(callback_heading(&chrome, &app).await, "Connected");
    let text = chrome.page_text().await;
    chrome.screenshot("success").await;
    assert!(text.contains("Your account octo-alice is connected."), "{text}");
    assert!(text.contains("return to Acme Assistant"), "{text}");

    // The session lives in a real cookie, one the page's scripts cannot read.
    let cookies = chrome.client.get_all_cookies().await.unwrap();
    let session = cookies.iter().find(|c| c.name() == "mcpc_session").expect("a session cookie");
    assert_eq!(session.http_only(), Some(true));
    // (fantoccini does not re-export the cookie crate's `SameSite`.)
    assert_eq!(format!("{:?}", session.same_site()), "Some(Lax)");
    let visible = chrome.client.execute("return document.cookie", vec![]).await.unwrap();
    assert!(!visible.as_str().unwrap().contains("mcpc_session"), "{visible}");
    chrome.close().await;

    let b = retry(&app, "alice", &id).await;
    assert_eq!(b["status"], "connected", "{b}");
    assert_eq!(b["account"]["login"], "octo-alice");
    assert!(b["access_token"].as_str().is_some_and(|t| !t.is_empty()));
    assert_eq!(app.provider.stats().authorization_code_exchanges, 1);
    assert_eq!(app.connection_count().await, 1);
}

#[tokio::test]
async fn alices_link_opened_in_a_browser_signed_in_as_bob_is_refused() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let chrome = Chrome::start("bob-opens-alices-link", Setup::default()).await;

    open_and_sign_in(&chrome, &app, &url, "bob").await;
    chrome.wait_for_url(&format!("{}/connect/testp?e={id}", app.base)).await;
    assert_eq!(chrome.text("h1").await, "This link was made for another account");
    let text = chrome.assert_our_page().await;
    chrome.screenshot("refusal").await;
    assert!(text.contains("You are signed in as bob"), "{text}");
    assert!(!text.contains("alice"), "the page must not reveal whose link it is:\n{text}");
    assert!(chrome.all("button[name=decision]").await.is_empty(), "no Connect or Decline for bob");
    chrome.close().await;

    assert_eq!(app.connection_count().await, 0);
    assert_eq!(app.elicitation_status(&id).await, "pending");
    assert_eq!(app.provider.stats().authorize_requests, 0);
    let b = retry(&app, "alice", &id).await;
    assert_eq!(b["status"], "connect_required", "{b}");
    assert_eq!(b["elicitation"]["id"], id.as_str(), "alice's link still works for her");
}

#[tokio::test]
async fn declining_on_our_consent_page_connects_nothing_and_the_token_call_says_declined() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let chrome = Chrome::start("decline-on-consent", Setup::default()).await;

    open_and_sign_in(&chrome, &app, &url, "alice").await;
    on_the_consent_page(&chrome, &app, &id).await;
    chrome.screenshot("consent").await;
    chrome.click("button[name=decision][value=decline]").await;
    chrome.wait_for_url(&format!("{}/connect/testp/authorize", app.base)).await;
    assert_eq!(chrome.text("h1").await, "Not connected");
    let text = chrome.assert_our_page().await;
    chrome.screenshot("declined").await;
    assert!(text.contains("Nothing was connected"), "{text}");
    assert!(text.contains("return to Acme Assistant"), "{text}");
    chrome.close().await;

    assert_eq!(app.provider.stats().authorize_requests, 0, "the provider was never asked");
    assert_eq!(app.connection_count().await, 0);
    assert_eq!(app.elicitation_status(&id).await, "declined");
    assert_eq!(retry(&app, "alice", &id).await["status"], "declined");
}

#[tokio::test]
async fn denying_at_the_provider_connects_nothing_and_the_token_call_says_declined() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    // JavaScript off: the IdP login, our consent page and the provider's error redirect
    // need none.
    let chrome = Chrome::start("deny-at-provider", Setup { javascript: false, ..Setup::default() }).await;

    open_and_sign_in(&chrome, &app, &url, "alice").await;
    on_the_consent_page(&chrome, &app, &id).await;
    chrome.screenshot("consent").await;
    chrome.click("button[name=decision][value=connect]").await;
    answer_at_the_provider(&chrome, &app, "octo-alice", "deny").await;
    assert_eq!(callback_heading(&chrome, &app).await, "Not connected");
    let text = chrome.page_text().await;
    chrome.screenshot("declined").await;
    assert!(text.contains("Nothing was connected"), "{text}");
    chrome.close().await;

    assert_eq!(app.provider.stats().authorization_code_exchanges, 0);
    assert_eq!(app.connection_count().await, 0);
    assert_eq!(app.elicitation_status(&id).await, "declined");
    assert_eq!(retry(&app, "alice", &id).await["status"], "declined");
}

#[tokio::test]
async fn back_and_reload_after_connecting_show_a_sensible_page_and_exchange_one_code() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    // JavaScript off: the whole happy path works without it.
    let chrome = Chrome::start("back-and-reload", Setup { javascript: false, ..Setup::default() }).await;
    let consent = format!("{}/connect/testp?e={id}", app.base);

    open_and_sign_in(&chrome, &app, &url, "alice").await;
    on_the_consent_page(&chrome, &app, &id).await;
    chrome.click("button[name=decision][value=connect]").await;
    answer_at_the_provider(&chrome, &app, "octo-alice", "allow").await;
    assert_eq!(callback_heading(&chrome, &app).await, "Connected");
    let callback = chrome.url().await.to_string();
    chrome.screenshot("success").await;

    // Reload the success page: the callback runs again with the used code and state.
    chrome.reload().await;
    assert_eq!(callback_heading(&chrome, &app).await, "Already connected");
    chrome.screenshot("reload-callback").await;

    // Back: the provider's consent page (the provider's own business) ...
    chrome.back().await;
    chrome.wait_for_url(&format!("{}/authorize?", app.provider.base_url())).await;
    chrome.assert_sensible_page().await;
    chrome.screenshot("back-to-provider").await;
    // ... and back again: our consent page says the link has done its work, and offers
    // no Connect button; a reload there says the same.
    chrome.back().await;
    chrome.wait_for_url(&consent).await;
    assert_eq!(chrome.text("h1").await, "This link was already used");
    chrome.assert_our_page().await;
    assert!(chrome.all("button").await.is_empty(), "nothing to click on a used link");
    chrome.screenshot("back-to-consent-already-used").await;
    chrome.reload().await;
    chrome.wait_for_url(&consent).await;
    assert_eq!(chrome.text("h1").await, "This link was already used");

    // Forward to the provider, and Allow once more, as an impatient person might: the
    // provider issues a second code for the same state; we exchange none of it.
    chrome.forward().await;
    answer_at_the_provider(&chrome, &app, "octo-alice", "allow").await;
    assert_eq!(callback_heading(&chrome, &app).await, "Already connected");
    assert_ne!(chrome.url().await.to_string(), callback, "a new code came back");
    chrome.screenshot("allow-again").await;

    // The first callback address typed in again.
    chrome.goto(&callback).await;
    assert_eq!(callback_heading(&chrome, &app).await, "Already connected");
    chrome.screenshot("callback-url-again").await;
    chrome.close().await;

    assert_eq!(app.provider.stats().authorization_code_exchanges, 1);
    assert_eq!(app.connection_count().await, 1);
    assert_eq!(app.elicitation_status(&id).await, "completed");
    assert_eq!(retry(&app, "alice", &id).await["status"], "connected");
}

#[tokio::test]
async fn the_consent_page_does_not_render_inside_another_sites_frame() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    let chrome = Chrome::start("framing", Setup::default()).await;
    // Signed in first, so the framed request carries a valid session cookie and would get
    // the consent page itself.
    open_and_sign_in(&chrome, &app, &url, "alice").await;
    on_the_consent_page(&chrome, &app, &id).await;

    let evil = attacker::start(&url);
    chrome.goto(&evil.base).await;
    chrome.screenshot("framing-attempt").await;

    // The attacker's own frame renders: frames work in this browser ...
    chrome.find("#control").await.enter_frame().await.unwrap();
    assert_eq!(chrome.text("#control-text").await, "attacker's own frame");
    chrome.client.enter_parent_frame().await.unwrap();
    // ... ours does not: Chromium put its error page in its place.
    chrome.find("#victim").await.enter_frame().await.unwrap();
    let framed = chrome.client.execute("return document.URL", vec![]).await.unwrap();
    assert_eq!(framed, "chrome-error://chromewebdata/", "the frame holds the browser's error page");
    assert!(chrome.all("button").await.is_empty(), "no Connect button inside the frame");
    assert!(!chrome.page_text().await.contains("Connect your"));
    chrome.client.enter_parent_frame().await.unwrap();
    chrome.close().await;

    assert_eq!(app.connection_count().await, 0);
    assert_eq!(app.elicitation_status(&id).await, "pending");
    assert_eq!(app.provider.stats().authorize_requests, 0);
}

#[tokio::test]
async fn the_consent_page_works_on_a_phone_by_touch_and_by_keyboard() {
    let app = spawn_app().await;
    let (id, url) = app.elicit("alice", "testp").await;
    // Taps, not clicks. (JavaScript stays on here: chromedriver's tap hangs in a page
    // whose scripts are off; two other tests run the flow without JavaScript.)
    let chrome = Chrome::start("phone", Setup { screen: Screen::Phone, javascript: true }).await;

    open_and_sign_in(&chrome, &app, &url, "alice").await;
    on_the_consent_page(&chrome, &app, &id).await;
    chrome.screenshot("consent").await;

    let size =
        chrome.client.execute("return [innerWidth, document.documentElement.scrollWidth]", vec![]).await.unwrap();
    assert_eq!(size, json!([390, 390]), "the page fits the phone's width: no sideways scrolling");
    for css in [".domain .host", "button[value=connect]", "button[value=decline]"] {
        let (x, _, w, h) = chrome.find(css).await.rectangle().await.unwrap();
        assert!(x >= 0.0 && x + w <= 390.0, "{css} fits the screen: x={x} w={w}");
        if css.starts_with("button") {
            assert!(h >= 44.0, "{css} is a comfortable touch target: {h}px high");
        }
    }

    // Tab reaches the link to "Your connections" in the text, then Connect, then Decline;
    // Shift+Tab goes back; Enter on Connect submits.
    let mut focused = Vec::new();
    for _ in 0..3 {
        chrome.press(&[Key::Tab]).await;
        focused.push(chrome.focused().await);
    }
    assert_eq!(focused, ["a ", "button connect", "button decline"], "keyboard order");
    chrome.press(&[Key::Shift, Key::Tab]).await;
    assert_eq!(chrome.focused().await, "button connect");
    chrome.press(&[Key::Enter]).await;

    answer_at_the_provider(&chrome, &app, "octo-alice", "allow").await;
    assert_eq!(callback_heading(&chrome, &app).await, "Connected");
    chrome.screenshot("success").await;
    chrome.close().await;
    assert_eq!(retry(&app, "alice", &id).await["status"], "connected");
}

/// Connects alice at `testp` through the whole flow in `chrome`; returns the token.
async fn connected_in(chrome: &Chrome, app: &TestApp) -> String {
    let (id, url) = app.elicit("alice", "testp").await;
    open_and_sign_in(chrome, app, &url, "alice").await;
    on_the_consent_page(chrome, app, &id).await;
    chrome.click("button[name=decision][value=connect]").await;
    answer_at_the_provider(chrome, app, "octo-alice", "allow").await;
    assert_eq!(callback_heading(chrome, app).await, "Connected");
    retry(app, "alice", &id).await["access_token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_person_disconnects_in_a_browser_without_javascript_and_the_grant_is_dead() {
    let app = spawn_app().await;
    let receiver = crate::support::receiver::Receiver::start().await;
    let (_, secret) =
        crate::support::receiver::register(&app, &app.admin_key, &receiver.url, &["connection.revoked"]).await;
    let chrome = Chrome::start("disconnect", Setup { javascript: false, ..Setup::default() }).await;
    let token = connected_in(&chrome, &app).await;
    // From the result page's link.
    chrome.click("a[href='/connections']").await;
    chrome.wait_for_url(&format!("{}/connections", app.base)).await;
    let text = chrome.assert_our_page().await;
    chrome.screenshot("connections").await;
    assert!(text.contains("Your connections") && text.contains("Acme Assistant"), "{text}");
    assert!(text.contains("Test Provider · octo-alice"), "{text}");
    chrome.click("form[action='/connections/disconnect'] button").await;
    chrome.wait_for_url(&format!("{}/connections?disconnected=testp", app.base)).await;
    assert_eq!(chrome.text("[role=status]").await, "Disconnected Test Provider.");
    assert!(chrome.page_text().await.contains("You have no connections."));
    chrome.screenshot("disconnected").await;
    chrome.close().await;

    let me = app.client.get(format!("{}/userinfo", app.provider.base_url())).bearer_auth(&token).send().await.unwrap();
    assert_eq!(me.status(), 401, "the provider's token is dead");
    let b = app.token_ok(json!({"subject": "alice", "provider": "testp"})).await;
    assert_eq!(b["status"], "connect_required", "{b}");
    // The MCP server heard of it, signed.
    let got = receiver.wait_for(1, std::time::Duration::from_secs(20)).await;
    crate::support::receiver::assert_verified(&secret, &got).await;
    let event = got[0].json();
    assert_eq!(event["type"], "connection.revoked");
    assert_eq!((&event["data"]["subject"], &event["data"]["by"]), (&json!("alice"), &json!("subject")));
    assert_eq!((&event["data"]["provider"], &event["data"]["account_login"]), (&json!("testp"), &json!("octo-alice")));
    assert!(!got[0].body.contains(&token), "no token in the payload");
}

#[tokio::test]
async fn the_connections_page_works_on_a_phone_by_keyboard() {
    let app = spawn_app().await;
    let chrome = Chrome::start("connections-phone", Setup { screen: Screen::Phone, javascript: true }).await;
    connected_in(&chrome, &app).await;
    chrome.goto(&format!("{}/connections", app.base)).await;
    chrome.assert_our_page().await;
    chrome.screenshot("connections").await;
    let size =
        chrome.client.execute("return [innerWidth, document.documentElement.scrollWidth]", vec![]).await.unwrap();
    assert_eq!(size, json!([390, 390]), "the page fits the phone's width: no sideways scrolling");
    let (x, _, w, h) = chrome.find("form[action='/connections/disconnect'] button").await.rectangle().await.unwrap();
    assert!(x >= 0.0 && x + w <= 390.0 && h >= 44.0, "Disconnect fits and is a comfortable target");
    // The first thing Tab reaches is Disconnect; Enter submits it.
    chrome.press(&[Key::Tab]).await;
    assert_eq!(chrome.focused().await, "button ");
    chrome.press(&[Key::Enter]).await;
    chrome.wait_for_url(&format!("{}/connections?disconnected=testp", app.base)).await;
    assert_eq!(chrome.text("[role=status]").await, "Disconnected Test Provider.");
    chrome.screenshot("disconnected").await;
    chrome.close().await;
    let status: String = sqlx::query_scalar("SELECT status FROM connections").fetch_one(&app.pool).await.unwrap();
    assert_eq!(status, "revoked");
}
