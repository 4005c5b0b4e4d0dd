//! The example MCP server driven by a real MCP client: the Python `mcp` SDK (see
//! `mcp_client.py`), against the real mcp-connect, IdP and provider on loopback. The test
//! plays the user: it answers the client's URL prompt and clicks through the connect page.
//!
//! The SDK runs from the virtualenv at `$MCP_TEST_PYTHON` (default `<repo>/.venv-mcp/bin/python`),
//! made by `scripts/test` (`pip install -r tests/python-requirements.txt`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use mcp_connect_client::{ApiKey, RequestStateKey};
use mcp_connect_example_server::{Config, app, serve};
use mcp_connect_testkit::{Browser, PROVIDER, Stack};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const MODERN: &str = "2026-07-28";
const LEGACY: &str = "legacy";

struct Env {
    stack: Stack,
    mcp_url: String,
}

/// IdP, provider, mcp-connect and the example server; the server's `/mcp` is the audience
/// of the IdP's access tokens.
async fn start() -> Env {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let mcp_url = format!("{base}/mcp");
    let stack = Stack::start(&mcp_url).await.unwrap();
    let userinfo = format!("{}/userinfo", stack.provider.base_url());
    let config = Config {
        issuer: stack.idp.issuer(),
        public_url: base.parse().unwrap(),
        resource: None,
        connect_url: stack.connect_base.parse().unwrap(),
        connect_api_key: ApiKey::new(stack.api_key.clone()),
        state_key: RequestStateKey::generate(),
        // `otherp` exists only to make a second, different tool call.
        providers: HashMap::from([(PROVIDER.to_owned(), userinfo.clone()), ("otherp".to_owned(), userinfo)]),
    };
    let router = app(config).await.unwrap();
    tokio::spawn(serve(listener, router));
    Env { stack, mcp_url }
}

fn python() -> PathBuf {
    let path = std::env::var_os("MCP_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv-mcp/bin/python"));
    assert!(
        path.exists(),
        "no Python with the MCP SDK at {}: run `scripts/test` (or `python3 -m venv .venv-mcp && .venv-mcp/bin/pip install -r tests/python-requirements.txt`) \
         in the repository root, or point MCP_TEST_PYTHON at a python that has `mcp` 2.3.0",
        path.display()
    );
    path
}

/// One MCP client process (one user, one connection).
struct Py {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Py {
    /// Connects as `subject` in `mode` (`legacy` = 2025-11-25 handshake, or `auto`/a
    /// modern version); `url_elicitation` says whether the client offers URL elicitation.
    async fn connect(env: &Env, subject: &str, mode: &str, url_elicitation: bool) -> Py {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
        let mut child = Command::new(python())
            .arg(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut py = Py { child, stdin, lines };
        let token = env.stack.mcp_access_token(subject).await.unwrap();
        let hello = py
            .ask(json!({"cmd": "connect", "url": env.mcp_url, "token": token, "mode": mode, "url_elicitation": url_elicitation}))
            .await;
        assert_eq!(hello["ok"], true, "{hello}");
        let expected = if mode == LEGACY { "2025-11-25" } else { MODERN };
        assert_eq!(hello["protocol_version"], expected, "the SDK negotiated {hello}");
        py
    }

    async fn send(&mut self, v: Value) {
        self.stdin.write_all(format!("{v}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await
            .expect("the MCP client answered within 60 s")
            .unwrap()
            .expect("the MCP client process ended early (its stderr is above)");
        serde_json::from_str(&line).unwrap()
    }

    async fn ask(&mut self, v: Value) -> Value {
        self.send(v).await;
        self.recv().await
    }

    /// Calls the tool; returns the first thing the client reports (a prompt or the end).
    async fn call(&mut self, provider: &str) -> Value {
        self.ask(json!({"cmd": "call", "name": "whoami_on", "arguments": {"provider": provider}})).await
    }

    /// Answers a prompt as the user; returns what comes next.
    async fn answer(&mut self, action: &str) -> Value {
        self.ask(json!({"answer": action})).await
    }

    async fn close(mut self) {
        let bye = self.ask(json!({"cmd": "close"})).await;
        assert_eq!(bye["ok"], true);
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await.unwrap().unwrap();
        assert!(status.success(), "the MCP client exited with {status}");
    }
}

/// The URL of a prompt, checked to be our connect page and nothing else.
fn prompted_url(env: &Env, event: &Value) -> String {
    assert_eq!(event["event"], "elicit", "expected a prompt: {event}");
    let p = &event["params"];
    assert_eq!(p["mode"], "url", "{event}");
    let url = p["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&format!("{}/connect/{PROVIDER}?e=", env.stack.connect_base)), "{url}");
    assert!(p["message"].as_str().is_some_and(|m| m.contains("Acme Assistant")), "{event}");
    url
}

fn assert_account(outcome: &Value, login: &str) {
    let r = &outcome["result"];
    assert_ne!(r["isError"], true, "{outcome}");
    assert_eq!(r["structuredContent"]["connected"], true, "{outcome}");
    assert_eq!(r["structuredContent"]["login"], login, "{outcome}");
    assert!(r["content"][0]["text"].as_str().unwrap().contains(login));
}

fn assert_not_connected(outcome: &Value) {
    let r = &outcome["result"];
    assert_ne!(r["isError"], true, "decline/cancel is not an error: {outcome}");
    assert_eq!(r["structuredContent"]["connected"], false, "{outcome}");
    assert!(r["content"][0]["text"].as_str().unwrap().starts_with("Not connected"), "{outcome}");
}

// --- 2026-07-28: input_required + requestState, driven by the SDK's own retry loop -------

#[tokio::test]
async fn modern_accept_connects_and_the_retry_returns_the_upstream_account() {
    let env = start().await;
    let mut alice = Py::connect(&env, "alice", "auto", true).await;
    let prompt = alice.call(PROVIDER).await;
    let url = prompted_url(&env, &prompt);
    // 2026-07-28 has no elicitationId. rmcp 3.11 still serialises the field, empty
    // (`ElicitRequestParams` keeps it as a `String`); the id itself must not be there.
    let id_field = prompt["params"].get("elicitationId");
    assert!(id_field.is_none_or(|v| v == ""), "2026-07-28 carries no elicitation id: {prompt}");
    Browser::new().unwrap().connect(&url, "alice", "octo-alice").await.unwrap();
    assert_account(&alice.answer("accept").await, "octo-alice");
    // Connected now: the next call needs no prompt.
    assert_account(&alice.call(PROVIDER).await, "octo-alice");
    alice.close().await;
    assert_eq!(env.stack.counts("alice").await.unwrap(), (1, 1));
}

#[tokio::test]
async fn modern_accept_while_still_pending_gets_the_same_prompt_again() {
    let env = start().await;
    let mut alice = Py::connect(&env, "alice", "auto", true).await;
    let first = prompted_url(&env, &alice.call(PROVIDER).await);
    // The user says "opened it" but never finishes: the truth is mcp-connect's.
    let again = alice.answer("accept").await;
    assert_eq!(prompted_url(&env, &again), first, "the same elicitation, not a new one");
    Browser::new().unwrap().connect(&first, "alice", "octo-alice").await.unwrap();
    assert_account(&alice.answer("accept").await, "octo-alice");
    alice.close().await;
    assert_eq!(env.stack.counts("alice").await.unwrap(), (1, 1));
}

#[tokio::test]
async fn modern_decline_on_the_consent_page_gives_a_normal_not_connected_result() {
    let env = start().await;
    let mut bob = Py::connect(&env, "bob", "auto", true).await;
    let url = prompted_url(&env, &bob.call(PROVIDER).await);
    Browser::new().unwrap().decline(&url, "bob").await.unwrap();
    // The client reports accept (the link was opened); mcp-connect says declined.
    assert_not_connected(&bob.answer("accept").await);
    bob.close().await;
    assert_eq!(env.stack.counts("bob").await.unwrap(), (1, 0));
}

#[tokio::test]
async fn modern_cancel_or_decline_in_the_client_closes_the_link_it_answered() {
    let env = start().await;
    let mut carol = Py::connect(&env, "carol", "auto", true).await;
    let first = prompted_url(&env, &carol.call(PROVIDER).await);
    assert_not_connected(&carol.answer("cancel").await);
    // decline in the client: the same, a normal result and no loop of prompts; the next
    // call offers a new link, since the first was closed.
    let second = prompted_url(&env, &carol.call(PROVIDER).await);
    assert_ne!(first, second, "a closed link is never offered again");
    assert_not_connected(&carol.answer("decline").await);
    carol.close().await;
    let closed = env.stack.elicitation_outcomes("carol").await.unwrap();
    assert_eq!(
        closed,
        [("cancelled".to_owned(), Some("cancel".to_owned())), ("cancelled".to_owned(), Some("decline".to_owned()))]
    );
    // Opened later, the closed link connects nothing and says why.
    let (status, html) = Browser::new().unwrap().open_page(&first, "carol").await.unwrap();
    assert_eq!(status, 410);
    assert!(html.contains("You closed this request in your assistant"), "{html}");
    assert_eq!(env.stack.counts("carol").await.unwrap(), (2, 0), "two links, no connection");
}

#[tokio::test]
async fn modern_client_without_url_elicitation_gets_a_setup_link_and_no_prompt() {
    let env = start().await;
    let mut dave = Py::connect(&env, "dave", "auto", false).await;
    let outcome = dave.call(PROVIDER).await;
    assert_not_connected(&outcome);
    let link = outcome["result"]["structuredContent"]["setup_url"].as_str().unwrap().to_owned();
    assert!(outcome["result"]["content"][0]["text"].as_str().unwrap().contains(&link));
    // The link works outside the MCP workflow; afterwards the tool just works.
    Browser::new().unwrap().connect(&link, "dave", "octo-dave").await.unwrap();
    assert_account(&dave.call(PROVIDER).await, "octo-dave");
    dave.close().await;
}

/// One round by hand: the `input_required` result and its `requestState`.
async fn first_round(py: &mut Py, provider: &str) -> (Value, String) {
    let r = py.ask(json!({"cmd": "call_once", "name": "whoami_on", "arguments": {"provider": provider}})).await;
    let ir = r["input_required"].clone();
    assert_eq!(ir["resultType"], "input_required", "{r}");
    assert_eq!(ir["inputRequests"]["connect"]["method"], "elicitation/create");
    let state = ir["requestState"].as_str().unwrap().to_owned();
    (ir, state)
}

async fn retry_with(py: &mut Py, provider: &str, state: &str) -> Value {
    py.ask(json!({
        "cmd": "call_once", "name": "whoami_on", "arguments": {"provider": provider},
        "request_state": state, "input_responses": {"connect": {"action": "accept"}}
    }))
    .await
}

fn assert_rejected(r: &Value) {
    assert_eq!(r["error"]["code"], -32602, "{r}");
    assert!(r["error"]["message"].as_str().unwrap().contains("requestState"), "{r}");
}

#[tokio::test]
async fn modern_tampered_request_state_is_rejected() {
    let env = start().await;
    let mut alice = Py::connect(&env, "alice", "auto", true).await;
    let (ir, state) = first_round(&mut alice, PROVIDER).await;
    let url = ir["inputRequests"]["connect"]["params"]["url"].as_str().unwrap().to_owned();
    Browser::new().unwrap().connect(&url, "alice", "octo-alice").await.unwrap();
    // Flip one character in the middle of the sealed state.
    let mut bytes = state.clone().into_bytes();
    let i = bytes.len() / 2;
    bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(bytes).unwrap();
    assert_rejected(&retry_with(&mut alice, PROVIDER, &tampered).await);
    assert_rejected(&retry_with(&mut alice, PROVIDER, "not-a-state").await);
    // The genuine state still works.
    assert_account(&retry_with(&mut alice, PROVIDER, &state).await, "octo-alice");
    alice.close().await;
}

#[tokio::test]
async fn modern_request_state_of_another_user_or_another_call_is_rejected() {
    let env = start().await;
    let mut alice = Py::connect(&env, "alice", "auto", true).await;
    let mut mallory = Py::connect(&env, "mallory", "auto", true).await;
    let (ir, alices_state) = first_round(&mut alice, PROVIDER).await;
    let url = ir["inputRequests"]["connect"]["params"]["url"].as_str().unwrap().to_owned();
    Browser::new().unwrap().connect(&url, "alice", "octo-alice").await.unwrap();
    // Mallory replays Alice's state with her own token: refused, and no token of Alice's.
    assert_rejected(&retry_with(&mut mallory, PROVIDER, &alices_state).await);
    // Alice's state for a different tool call (other arguments): refused.
    assert_rejected(&retry_with(&mut alice, "otherp", &alices_state).await);
    assert_account(&retry_with(&mut alice, PROVIDER, &alices_state).await, "octo-alice");
    alice.close().await;
    mallory.close().await;
    assert_eq!(env.stack.counts("mallory").await.unwrap(), (0, 0));
}

// --- 2025-11-25: -32042, the host shows the URL and repeats the call ---------------------

#[tokio::test]
async fn legacy_accept_connects_and_the_retry_returns_the_upstream_account() {
    let env = start().await;
    let mut alice = Py::connect(&env, "alice", LEGACY, true).await;
    let prompt = alice.call(PROVIDER).await;
    let url = prompted_url(&env, &prompt);
    let id = prompt["params"]["elicitationId"].as_str().unwrap().to_owned();
    assert!(url.ends_with(&id), "the URL carries the elicitation id and nothing else: {url}");
    // "Opened" without finishing: the retry gets the same -32042 again.
    let again = alice.answer("accept").await;
    assert_eq!(prompted_url(&env, &again), url);
    Browser::new().unwrap().connect(&url, "alice", "octo-alice").await.unwrap();
    let outcome = alice.answer("accept").await;
    assert_account(&outcome, "octo-alice");
    let rounds = outcome["rounds"].as_array().unwrap();
    assert_eq!(rounds.len(), 2, "{outcome}");
    assert!(rounds.iter().all(|r| r["error"]["code"] == -32042), "{outcome}");
    assert_eq!(rounds[0]["error"]["data"]["elicitations"][0]["elicitationId"], id.as_str());
    assert_eq!(env.stack.elicitation_status(&id).await.unwrap(), "completed");
    alice.close().await;
}

#[tokio::test]
async fn legacy_decline_on_the_consent_page_gives_a_normal_not_connected_result() {
    let env = start().await;
    let mut bob = Py::connect(&env, "bob", LEGACY, true).await;
    let prompt = bob.call(PROVIDER).await;
    let url = prompted_url(&env, &prompt);
    Browser::new().unwrap().decline(&url, "bob").await.unwrap();
    // The host repeats the call; the server reconciles that elicitation: declined, no new prompt.
    let outcome = bob.answer("accept").await;
    assert_not_connected(&outcome);
    assert_eq!(outcome["rounds"].as_array().unwrap().len(), 1);
    bob.close().await;
    assert_eq!(env.stack.counts("bob").await.unwrap(), (1, 0));
}

#[tokio::test]
async fn legacy_cancel_in_the_client_is_not_retried_and_a_new_call_offers_the_same_link() {
    let env = start().await;
    let mut carol = Py::connect(&env, "carol", LEGACY, true).await;
    let url = prompted_url(&env, &carol.call(PROVIDER).await);
    // -32042 has no answer to send: a host that cancels simply does not repeat the call.
    let outcome = carol.answer("cancel").await;
    assert_eq!(outcome["not_retried"]["actions"], json!(["cancel"]), "{outcome}");
    // Asked again later, the server offers the same pending elicitation, not a second one.
    assert_eq!(prompted_url(&env, &carol.call(PROVIDER).await), url);
    assert_eq!(carol.answer("decline").await["not_retried"]["actions"], json!(["decline"]));
    carol.close().await;
    assert_eq!(env.stack.counts("carol").await.unwrap(), (1, 0));
}

#[tokio::test]
async fn legacy_client_without_url_elicitation_gets_a_setup_link_and_no_error() {
    let env = start().await;
    let mut dave = Py::connect(&env, "dave", LEGACY, false).await;
    let outcome = dave.call(PROVIDER).await;
    assert_not_connected(&outcome);
    assert!(outcome["rounds"].as_array().unwrap().is_empty(), "no -32042 to a client without URL mode");
    let link = outcome["result"]["structuredContent"]["setup_url"].as_str().unwrap().to_owned();
    Browser::new().unwrap().connect(&link, "dave", "octo-dave").await.unwrap();
    assert_account(&dave.call(PROVIDER).await, "octo-dave");
    dave.close().await;
}

// --- MCP authorization ----------------------------------------------------------------

#[tokio::test]
async fn requests_without_a_valid_access_token_are_refused_with_401() {
    let env = start().await;
    let http = reqwest::Client::new();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let r = http.post(&env.mcp_url).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(challenge.contains("resource_metadata="), "{challenge}");
    for bad in ["garbage", "a.b.c"] {
        let r = http.post(&env.mcp_url).bearer_auth(bad).json(&body).send().await.unwrap();
        assert_eq!(r.status(), 401, "{bad}");
        assert!(r.headers()["www-authenticate"].to_str().unwrap().contains("invalid_token"));
    }
    // A genuine token of the same IdP for another resource (audience): refused.
    let other = Stack::start("https://another-resource.example/mcp").await.unwrap();
    let foreign = other.mcp_access_token("alice").await.unwrap();
    let r = http.post(&env.mcp_url).bearer_auth(&foreign).json(&body).send().await.unwrap();
    assert_eq!(r.status(), 401, "a token of another issuer and audience");
    // The metadata names the resource and its authorization server.
    let base = env.mcp_url.trim_end_matches("/mcp");
    let meta: Value =
        http.get(format!("{base}/.well-known/oauth-protected-resource")).send().await.unwrap().json().await.unwrap();
    assert_eq!(meta["resource"], env.mcp_url);
    assert_eq!(meta["authorization_servers"][0], env.stack.idp.issuer());
}
