//! The authorization page, the decision, and requests that must not be redirected.

use crate::helpers::*;
use mcp_connect_devproviders::{ClientRegistration, Role};
use reqwest::StatusCode;
use reqwest::header::LOCATION;

#[tokio::test]
async fn the_identity_provider_page_asks_who_to_sign_in_as() {
    let provider = start(Role::IdentityProvider).await;
    let params = authorize_params(&pkce(), "openid email");
    let response = http().get(authorize_url(&provider, &params)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["cache-control"], "no-store");
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
    let html = response.text().await.unwrap();
    assert!(html.contains("<html lang=\"en\">"));
    assert!(html.contains("name=\"viewport\""));
    assert!(html.contains("<h1>Dev Identity Provider</h1>"));
    assert!(html.contains("<strong>test-app</strong> asks you to sign in."));
    assert!(html.contains("<code>openid</code>") && html.contains("<code>email</code>"));
    assert!(html.contains("<form method=\"post\" action=\"/authorize\">"));
    assert!(html.contains("<label for=\"username\">Sign in as</label>"));
    assert!(html.contains("id=\"username\" name=\"username\" value=\"\" required"));
    assert!(html.contains("name=\"decision\" value=\"allow\">Sign in</button>"));
    assert!(html.contains("name=\"decision\" value=\"deny\" formnovalidate>Cancel</button>"));
    assert!(!html.contains("<script"));
    assert_eq!(hidden_inputs(&html), params, "every parameter rides along, intact");
}

#[tokio::test]
async fn the_downstream_page_asks_for_consent_to_an_account() {
    let provider = start(Role::Downstream).await;
    let html = open_page(&provider, &authorize_params(&pkce(), "repo")).await;
    assert!(html.contains("<h1>Dev Downstream</h1>"));
    assert!(html.contains("Allow <strong>test-app</strong> to access your account <strong>dev-user</strong>?"));
    assert!(html.contains("<label for=\"username\">Account name</label>"));
    assert!(html.contains("value=\"dev-user\" required"));
    assert!(html.contains("value=\"allow\">Allow</button>"));
    assert!(html.contains("value=\"deny\" formnovalidate>Deny</button>"));
}

#[tokio::test]
async fn the_downstream_page_offers_the_login_hint_as_the_account() {
    let provider = start(Role::Downstream).await;
    let mut params = authorize_params(&pkce(), "repo");
    params.push(("login_hint".into(), "alice <&>".into()));
    let html = open_page(&provider, &params).await;
    assert!(html.contains("value=\"alice &#60;&#38;&#62;\" required"), "the hint, escaped: {html}");
    // Too long to be an account name: the default instead.
    let mut params = authorize_params(&pkce(), "repo");
    params.push(("login_hint".into(), "x".repeat(500)));
    assert!(open_page(&provider, &params).await.contains("value=\"dev-user\" required"));
}

#[tokio::test]
async fn deny_redirects_with_access_denied_the_state_and_iss() {
    let provider = start(Role::Downstream).await;
    let html = open_page(&provider, &authorize_params(&pkce(), "repo")).await;
    let location = submit(&provider, &html, "dev-user", "deny").await;
    let q = query(&location);
    assert_eq!(q["error"], "access_denied");
    assert_eq!(q["state"], "st-1 & <odd> \"chars\"");
    assert_eq!(q["iss"], provider.issuer());
    assert_eq!(q["tenant"], "t1");
    assert!(!q.contains_key("code"));
}

#[tokio::test]
async fn signing_in_with_an_empty_name_shows_the_page_again() {
    let provider = start(Role::IdentityProvider).await;
    let html = open_page(&provider, &authorize_params(&pkce(), "openid")).await;
    let mut form = hidden_inputs(&html);
    form.push(("username".into(), "  ".into()));
    form.push(("decision".into(), "allow".into()));
    let response = http().post(format!("{}/authorize", provider.base_url())).form(&form).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.headers().get(LOCATION).is_none());
    assert!(response.text().await.unwrap().contains("Enter a name to continue."));
}

#[tokio::test]
async fn an_unregistered_redirect_uri_gets_a_400_page_and_no_redirect() {
    let provider = start(Role::Downstream).await;
    let pkce = pkce();
    for (name, value) in [
        ("redirect_uri", "http://127.0.0.1:9/callback"),
        ("redirect_uri", "http://127.0.0.1:9/callback?tenant=t1&x=1"),
        ("redirect_uri", "http://evil.example/callback?tenant=t1"),
        ("client_id", "unknown-app"),
    ] {
        let mut params = authorize_params(&pkce, "repo");
        params.retain(|(k, _)| k != name);
        params.push((name.into(), value.into()));
        let response = http().get(authorize_url(&provider, &params)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{name}={value}");
        assert!(response.headers().get(LOCATION).is_none());
        let html = response.text().await.unwrap();
        assert!(html.contains("<h1>Dev Downstream</h1>") && !html.contains("<form"), "{html}");
    }
    assert_eq!(provider.stats().authorize_requests, 4, "refused requests are counted too");
}

#[tokio::test]
async fn a_tampered_redirect_uri_in_the_submitted_form_is_refused_without_a_redirect() {
    let provider = start(Role::Downstream).await;
    let html = open_page(&provider, &authorize_params(&pkce(), "repo")).await;
    let mut form: Vec<_> = hidden_inputs(&html).into_iter().filter(|(k, _)| k != "redirect_uri").collect();
    form.push(("redirect_uri".into(), "http://evil.example/".into()));
    form.push(("username".into(), "dev-user".into()));
    form.push(("decision".into(), "allow".into()));
    let response = http().post(format!("{}/authorize", provider.base_url())).form(&form).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(response.headers().get(LOCATION).is_none());
}

#[tokio::test]
async fn a_request_without_s256_pkce_goes_back_as_invalid_request_with_state_and_iss() {
    let provider = start(Role::Downstream).await;
    for drop in ["code_challenge", "code_challenge_method"] {
        let mut params = authorize_params(&pkce(), "repo");
        params.retain(|(k, _)| k != drop);
        let response = http().get(authorize_url(&provider, &params)).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::SEE_OTHER, "without {drop}");
        let location = url::Url::parse(response.headers()[LOCATION].to_str().unwrap()).unwrap();
        let q = query(&location);
        assert_eq!(q["error"], "invalid_request");
        assert_eq!(q["state"], "st-1 & <odd> \"chars\"");
        assert_eq!(q["iss"], provider.issuer());
    }
}

#[tokio::test]
async fn a_client_added_after_start_can_complete_the_flow() {
    let provider = start(Role::Downstream).await;
    provider.add_client(ClientRegistration {
        client_id: "late-app".into(),
        client_secret: "late-secret".into(),
        redirect_uris: vec!["http://127.0.0.1:9/late".into()],
    });
    let pkce = pkce();
    let mut params = authorize_params(&pkce, "repo");
    for (k, v) in params.iter_mut() {
        match k.as_str() {
            "client_id" => *v = "late-app".into(),
            "redirect_uri" => *v = "http://127.0.0.1:9/late".into(),
            _ => {}
        }
    }
    let html = open_page(&provider, &params).await;
    let code = query(&submit(&provider, &html, "dev-user", "allow").await).remove("code").unwrap();
    let response = http()
        .post(format!("{}/token", provider.base_url()))
        .basic_auth("late-app", Some("late-secret"))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("redirect_uri", "http://127.0.0.1:9/late"),
            ("code_verifier", &pkce.verifier),
        ])
        .send()
        .await
        .unwrap();
    assert!(json(response).await["access_token"].is_string());
}
