//! The client against the real mcp-connect (IdP, provider and service on loopback), and its
//! retry bound (and the proxied calls' lack of one, and their refused paths) against a
//! stand-in that answers 503 or counts what arrives.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use actix_web::{App, HttpResponse, HttpServer, web};
use mcp_connect_client::reqwest::Method;
use mcp_connect_client::{
    ApiKey, Client, ElicitationStatus, Error, InvalidProxyRequest, ProxyOutcome, ProxyRequest, RetryPolicy,
    TokenOutcome, TokenRequest,
};
use mcp_connect_testkit::{Browser, PROVIDER, Stack};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn client(stack: &Stack) -> Client {
    Client::new(stack.connect_base.parse().unwrap(), ApiKey::new(stack.api_key.clone())).unwrap()
}

#[tokio::test]
async fn a_subject_without_a_connection_gets_connect_required_and_after_the_flow_the_token() {
    let stack = Stack::start("https://mcp.test/").await.unwrap();
    let c = client(&stack);
    let TokenOutcome::ConnectRequired { elicitation, mcp, provider_name } =
        c.token(&TokenRequest::new("alice", PROVIDER).server_name("Whoami Tools")).await.unwrap()
    else {
        panic!("expected connect_required")
    };
    assert_eq!(provider_name.as_deref(), Some("Test Provider"));
    assert!(mcp.message.starts_with("Whoami Tools needs access to your Test Provider account."), "{}", mcp.message);
    assert_eq!(mcp.mode, "url");
    assert_eq!(mcp.url, elicitation.url);
    assert_eq!(mcp.elicitation_id, elicitation.id);
    assert_eq!(c.elicitation(&elicitation.id).await.unwrap().status, ElicitationStatus::Pending);

    // Asking again before the user acts returns the same pending elicitation.
    let again = c.token(&TokenRequest::new("alice", PROVIDER).elicitation_id(elicitation.id.clone())).await.unwrap();
    assert!(matches!(&again, TokenOutcome::ConnectRequired { elicitation: e, .. } if e.id == elicitation.id));

    Browser::new().unwrap().connect(&elicitation.url, "alice", "octo-alice").await.unwrap();

    let outcome = c.token(&TokenRequest::new("alice", PROVIDER).elicitation_id(elicitation.id.clone())).await.unwrap();
    let TokenOutcome::Connected { token: Some(token), account, .. } = &outcome else {
        panic!("expected connected: {outcome:?}")
    };
    assert_eq!(account.as_ref().unwrap().login.as_deref(), Some("octo-alice"));
    assert!(!format!("{outcome:?}").contains(token.expose_secret()), "Debug redacts the token");
    let me: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/userinfo", stack.provider.base_url()))
        .bearer_auth(token.expose_secret())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["login"], "octo-alice");
    let info = c.elicitation(&elicitation.id).await.unwrap();
    assert_eq!(info.status, ElicitationStatus::Completed);
    assert_eq!(info.subject, "alice");
    assert!(info.completed_at.is_some());
}

#[tokio::test]
async fn a_decline_on_the_consent_page_comes_back_as_declined() {
    let stack = Stack::start("https://mcp.test/").await.unwrap();
    let c = client(&stack);
    let TokenOutcome::ConnectRequired { elicitation, .. } = c.token(&TokenRequest::new("bob", PROVIDER)).await.unwrap()
    else {
        panic!("expected connect_required")
    };
    Browser::new().unwrap().decline(&elicitation.url, "bob").await.unwrap();
    let outcome = c.token(&TokenRequest::new("bob", PROVIDER).elicitation_id(elicitation.id.clone())).await.unwrap();
    let TokenOutcome::Declined { elicitation_id, provider_name } = outcome else { panic!("expected declined") };
    assert_eq!((elicitation_id, provider_name.as_deref()), (elicitation.id.clone(), Some("Test Provider")));
    assert_eq!(c.elicitation(&elicitation.id).await.unwrap().status, ElicitationStatus::Declined);
}

#[tokio::test]
async fn api_errors_carry_the_stable_code() {
    let stack = Stack::start("https://mcp.test/").await.unwrap();
    let wrong = Client::builder(stack.connect_base.parse().unwrap(), ApiKey::new("mcpc_0000000000000000_nope"))
        .retry(RetryPolicy::none())
        .build()
        .unwrap();
    let e = wrong.token(&TokenRequest::new("alice", PROVIDER)).await.unwrap_err();
    assert!(matches!(&e, Error::Api { status: 401, .. }), "{e:?}");
    assert_eq!(e.code(), Some("invalid_api_key"));

    let c = client(&stack);
    let e = c.token(&TokenRequest::new("alice", "no-such-provider")).await.unwrap_err();
    assert_eq!(e.code(), Some("unknown_provider"));
    let e = c.token(&TokenRequest::new("", PROVIDER)).await.unwrap_err();
    assert_eq!(e.code(), Some("invalid_subject"));
    let missing = mcp_connect_client::ElicitationId::parse("00000000-0000-4000-8000-000000000000").unwrap();
    assert_eq!(c.elicitation(&missing).await.unwrap_err().code(), Some("elicitation_not_found"));
}

/// A stand-in for mcp-connect that answers 503 (with `Retry-After: retry_after`) to the
/// first `failures` requests and a `connect_required` afterwards. Returns its base URL
/// and the request counter.
async fn flaky(failures: usize, retry_after: &'static str) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let server = HttpServer::new(move || {
        let counter = counter.clone();
        App::new().route(
            "/v1/token",
            web::post().to(move || {
                let n = counter.fetch_add(1, Ordering::SeqCst);
                async move {
                    if n < failures {
                        HttpResponse::ServiceUnavailable()
                            .insert_header(("Retry-After", retry_after))
                            .json(serde_json::json!({"error": "provider_unavailable", "error_description": "later"}))
                    } else {
                        HttpResponse::Ok().json(serde_json::json!({
                            "status": "connect_required",
                            "elicitation": {"id": "e-1", "url": "http://x/connect/testp?e=e-1", "expires_at": "2030-01-01T00:00:00Z"},
                            "mcp": {"mode": "url", "message": "m", "url": "http://x/connect/testp?e=e-1", "elicitationId": "e-1"}
                        }))
                    }
                }
            }),
        )
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    tokio::spawn(server);
    (base, hits)
}

#[tokio::test]
async fn a_503_with_retry_after_is_retried_within_the_bound() {
    let (base, hits) = flaky(2, "1").await;
    let c = Client::new(base.parse().unwrap(), ApiKey::new("k")).unwrap();
    let started = Instant::now();
    let outcome = c.token(&TokenRequest::new("alice", "testp")).await.unwrap();
    assert!(matches!(outcome, TokenOutcome::ConnectRequired { .. }));
    assert_eq!(hits.load(Ordering::SeqCst), 3);
    assert!(started.elapsed() >= Duration::from_secs(2), "waited Retry-After each time");
}

#[tokio::test]
async fn retries_stop_when_the_budget_is_spent() {
    let (base, hits) = flaky(usize::MAX, "0").await;
    let policy = RetryPolicy { max_retries: 3, ..RetryPolicy::default() };
    let c = Client::builder(base.parse().unwrap(), ApiKey::new("k")).retry(policy).build().unwrap();
    let e = c.token(&TokenRequest::new("alice", "testp")).await.unwrap_err();
    assert!(matches!(&e, Error::Unavailable { retry_after: Some(d), .. } if d.is_zero()), "{e:?}");
    assert_eq!(e.code(), Some("provider_unavailable"));
    assert_eq!(hits.load(Ordering::SeqCst), 4, "one attempt plus three retries");
}

#[tokio::test]
async fn a_retry_after_beyond_the_bound_is_not_waited_for() {
    let (base, hits) = flaky(usize::MAX, "3600").await;
    let c = Client::new(base.parse().unwrap(), ApiKey::new("k")).unwrap();
    let started = Instant::now();
    let e = c.token(&TokenRequest::new("alice", "testp")).await.unwrap_err();
    assert!(matches!(&e, Error::Unavailable { retry_after: Some(d), .. } if d.as_secs() == 3600), "{e:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_retry_that_waits_outlives_the_clients_timeout_and_returns_the_token_when_the_connect_commits() {
    let stack = Stack::start("https://mcp.test/").await.unwrap();
    // A timeout shorter than the wait: the wait is added to it for this request.
    let c = Client::builder(stack.connect_base.parse().unwrap(), ApiKey::new(stack.api_key.clone()))
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let TokenOutcome::ConnectRequired { elicitation, .. } =
        c.token(&TokenRequest::new("alice", PROVIDER)).await.unwrap()
    else {
        panic!("expected connect_required")
    };
    let retry = TokenRequest::new("alice", PROVIDER).elicitation_id(elicitation.id.clone()).wait_seconds(20);
    let waiting = tokio::spawn({
        let c = c.clone();
        async move { c.token(&retry).await }
    });
    // The person takes longer than the client's own timeout to finish.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    Browser::new().unwrap().connect(&elicitation.url, "alice", "octo-alice").await.unwrap();
    let outcome = waiting.await.unwrap().unwrap();
    assert!(matches!(outcome, TokenOutcome::Connected { .. }), "{outcome:?}");
}

fn proxied(subject: &str, path: &str) -> ProxyRequest {
    ProxyRequest::new(subject, PROVIDER, Method::GET, path)
}

#[tokio::test]
async fn a_proxied_call_without_a_connection_gets_connect_required_and_after_the_flow_reaches_the_provider_as_the_user()
{
    let stack = Stack::start("https://mcp.test/").await.unwrap();
    let c = client(&stack);
    let ProxyOutcome::ConnectRequired { elicitation, mcp, provider_name } =
        c.proxy(proxied("alice", "/userinfo").server_name("Whoami Tools")).await.unwrap()
    else {
        panic!("expected connect_required")
    };
    assert_eq!(provider_name.as_deref(), Some("Test Provider"));
    assert!(mcp.message.starts_with("Whoami Tools needs access to your Test Provider account."), "{}", mcp.message);
    assert_eq!((&mcp.url, &mcp.elicitation_id), (&elicitation.url, &elicitation.id));
    assert_eq!(c.elicitation(&elicitation.id).await.unwrap().status, ElicitationStatus::Pending);

    Browser::new().unwrap().connect(&elicitation.url, "alice", "octo-alice").await.unwrap();

    let outcome = c.proxy(proxied("alice", "/userinfo").elicitation_id(elicitation.id.clone())).await.unwrap();
    let ProxyOutcome::Response(answer) = outcome else { panic!("expected the provider's answer: {outcome:?}") };
    assert_eq!(answer.status(), 200);
    let headers = format!("{:?}", answer.headers());
    let body = answer.text().await.unwrap();
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body).unwrap()["login"], "octo-alice");
    // The token the grant holds (this tenant hands it out) is in neither.
    let TokenOutcome::Connected { token: Some(token), .. } =
        c.token(&TokenRequest::new("alice", PROVIDER)).await.unwrap()
    else {
        panic!("expected connected")
    };
    assert!(!body.contains(token.expose_secret()) && !headers.contains(token.expose_secret()), "{headers}");
}

#[tokio::test]
async fn a_declined_elicitation_comes_back_from_the_proxy_as_declined() {
    let stack = Stack::start("https://mcp.test/").await.unwrap();
    let c = client(&stack);
    let ProxyOutcome::ConnectRequired { elicitation, .. } = c.proxy(proxied("bob", "/userinfo")).await.unwrap() else {
        panic!("expected connect_required")
    };
    Browser::new().unwrap().decline(&elicitation.url, "bob").await.unwrap();
    let outcome = c.proxy(proxied("bob", "/userinfo").elicitation_id(elicitation.id.clone())).await.unwrap();
    let ProxyOutcome::Declined { elicitation_id, .. } = outcome else { panic!("expected declined: {outcome:?}") };
    assert_eq!(elicitation_id, elicitation.id);
}

#[tokio::test]
async fn proxy_refusals_come_back_as_errors_with_the_stable_code() {
    let stack = Stack::start("https://mcp.test/").await.unwrap();
    let c = client(&stack);
    let cases = [
        (ProxyRequest::new("alice", PROVIDER, Method::DELETE, "/userinfo"), 405, "proxy_method_not_allowed"),
        (proxied("alice", "/token"), 403, "proxy_path_not_allowed"),
        (proxied("alice", "/userinfo").origin("https://elsewhere.example"), 400, "proxy_origin_not_allowed"),
        (ProxyRequest::new("alice", "no-such-provider", Method::GET, "/userinfo"), 400, "unknown_provider"),
        (ProxyRequest::new("alice", "plainp", Method::GET, "/userinfo"), 403, "proxy_not_configured"),
        (proxied("", "/userinfo"), 400, "invalid_subject"),
    ];
    for (req, status, code) in cases {
        let e = c.proxy(req).await.unwrap_err();
        assert!(matches!(&e, Error::Api { status: s, .. } if *s == status), "{code}: {e:?}");
        assert_eq!(e.code(), Some(code));
    }
    let wrong = Client::new(stack.connect_base.parse().unwrap(), ApiKey::new("mcpc_0000000000000000_nope")).unwrap();
    let e = wrong.proxy(proxied("alice", "/userinfo")).await.unwrap_err();
    assert_eq!(e.code(), Some("invalid_api_key"));
}

/// A stand-in for mcp-connect that answers every request with `answer()` and counts them:
/// the witness of what a client sent. Returns its base URL and the counter.
async fn witness(answer: fn() -> HttpResponse) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let server = HttpServer::new(move || {
        let counter = counter.clone();
        App::new().default_service(web::to(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { answer() }
        }))
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    tokio::spawn(server);
    (base, hits)
}

#[tokio::test]
async fn a_path_that_would_leave_the_proxy_is_refused_before_anything_is_sent() {
    let (base, hits) = witness(|| HttpResponse::Ok().json(serde_json::json!({"login": "octo-alice"}))).await;
    let c = Client::new(base.parse().unwrap(), ApiKey::new("k")).unwrap();
    let cases = [
        ("/../../token", InvalidProxyRequest::DotSegment),
        ("/%2e%2e/%2E%2E/token", InvalidProxyRequest::DotSegment),
        ("/..;x/token", InvalidProxyRequest::DotSegment),
        ("/userinfo//x", InvalidProxyRequest::EmptySegment),
        ("//evil.example/userinfo", InvalidProxyRequest::NotAPath),
        ("https://evil.example/userinfo", InvalidProxyRequest::NotAPath),
        ("/.\t./token", InvalidProxyRequest::Character),
    ];
    for (path, why) in cases {
        let e = c.proxy(proxied("alice", path)).await.unwrap_err();
        assert!(matches!(&e, Error::InvalidProxyRequest(w) if *w == why), "{path:?}: {e:?}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing was sent");
    // The witness sees what does go.
    assert!(matches!(c.proxy(proxied("alice", "/userinfo")).await.unwrap(), ProxyOutcome::Response(_)));
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_proxied_call_is_never_retried() {
    let (base, hits) = witness(|| {
        HttpResponse::ServiceUnavailable()
            .insert_header(("Retry-After", "0"))
            .insert_header(("MCP-Connect-Error", "provider_unavailable"))
            .json(serde_json::json!({"error": "provider_unavailable", "error_description": "later"}))
    })
    .await;
    let c = Client::new(base.parse().unwrap(), ApiKey::new("k")).unwrap();
    let e = c.proxy(ProxyRequest::new("alice", "testp", Method::POST, "/issues").body("{}")).await.unwrap_err();
    assert!(matches!(&e, Error::Unavailable { retry_after: Some(d), .. } if d.is_zero()), "{e:?}");
    assert_eq!(e.code(), Some("provider_unavailable"));
    assert_eq!(hits.load(Ordering::SeqCst), 1, "the default policy would have retried a token call twice");
}
