//! The Python and TypeScript SDK packages end to end, across languages: the example MCP
//! servers (`examples/python-server`, `examples/typescript-server`, each on its official
//! MCP SDK and our package) driven by the other language's official MCP client
//! (`crates/example-mcp-server/tests/mcp_client.py` on the Python SDK,
//! `tests/sdk/ts-client/mcp_client.mjs` on the TypeScript SDKs), in both revisions, against
//! the real mcp-connect, IdP and provider. The person is played in Chromium (accept) or
//! over HTTP (decline, a setup link), and the client's `accept` is sent before the person
//! finishes, so the 2026-07-28 retry is the one that waits (a 2025-11-25 retry is answered
//! at once: that revision's client hears `notifications/elicitation/complete` instead).
//!
//! Needs what `scripts/test` installs: `.venv-mcp` with `mcp` and `clients/python`, and the
//! Node packages of `examples/typescript-server` and `tests/sdk/ts-client`.

use crate::support::chrome::{Chrome, Setup};
use crate::support::chrome::{answer_at_the_provider, callback_heading, on_the_consent_page, open_and_sign_in};
use crate::support::{Browser, PROVIDER, Stack};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const LEGACY: &str = "legacy";
const MODERN: &str = "auto";

pub(crate) fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn python() -> PathBuf {
    let p = std::env::var_os("MCP_TEST_PYTHON").map_or_else(|| repo().join(".venv-mcp/bin/python"), PathBuf::from);
    assert!(p.exists(), "{}: run scripts/test, which makes .venv-mcp with the MCP SDK and clients/python", p.display());
    p
}

pub(crate) fn node_script(dir: &str, script: &str) -> PathBuf {
    let d = repo().join(dir);
    assert!(d.join("node_modules").exists(), "{}: run scripts/test, which runs npm ci there", d.display());
    d.join(script)
}

#[derive(Clone, Copy, Debug)]
enum Lang {
    Python,
    TypeScript,
}

impl Lang {
    /// The example server's command.
    fn server(self) -> Command {
        self.run("examples/python-server/server.py", ("examples/typescript-server", "server.mjs"))
    }

    /// The MCP client driver's command (one line protocol, see `mcp_client.py`).
    fn client(self) -> Command {
        self.run("crates/example-mcp-server/tests/mcp_client.py", ("tests/sdk/ts-client", "mcp_client.mjs"))
    }

    /// The Python script under `.venv-mcp`'s python, or the Node script of a package
    /// whose `node_modules` scripts/test installed; ended with the test.
    fn run(self, python_script: &str, (node_dir, node_file): (&str, &str)) -> Command {
        let (program, script) = match self {
            Lang::Python => (python(), repo().join(python_script)),
            Lang::TypeScript => (PathBuf::from("node"), node_script(node_dir, node_file)),
        };
        let mut c = Command::new(program);
        c.arg(script).kill_on_drop(true);
        c
    }
}

/// mcp-connect with its IdP and provider, and an example MCP server in `lang`.
struct Env {
    stack: Stack,
    mcp_url: String,
    _server: Child,
}

async fn start(server: Lang) -> Env {
    // The port is chosen before the server binds it (the IdP's access tokens name its URL
    // as audience), so another test may take it in between: tried again on a new port.
    for _ in 0..2 {
        if let Some(env) = try_start(server, false).await {
            return env;
        }
    }
    try_start(server, true).await.expect("asserted inside")
}

/// [`start`] once: `None` when the server did not come up (`last`: assert instead).
async fn try_start(server: Lang, last: bool) -> Option<Env> {
    // The server's port comes first: the IdP's access tokens name its URL as audience.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let mcp_url = format!("{base}/mcp");
    let stack = Stack::start(&mcp_url).await.unwrap();
    let app = &stack.app;
    let state_key = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 32]>())
    };
    let mut child = server
        .server()
        .env("MCP_LISTEN", format!("127.0.0.1:{port}"))
        .env("MCP_PUBLIC_URL", &base)
        .env("MCP_ISSUER", app.idp.issuer())
        .env("MCP_CONNECT_URL", &app.base)
        .env("MCP_CONNECT_API_KEY", &app.key)
        .env("MCP_STATE_KEY", state_key)
        .env("MCP_PROVIDERS", format!("{PROVIDER}={}/userinfo", app.provider.base_url()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("{server:?} server: {e}"));
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(line) = out.next_line().await.unwrap() {
            if line.starts_with("listening on") {
                return true;
            }
        }
        false
    })
    .await;
    if ready == Ok(false) && !last {
        // It exited before listening (its stderr is above: usually the port taken).
        return None;
    }
    assert_eq!(ready, Ok(true), "the {server:?} server said `listening on` within 30 s (its stderr is above)");
    // Keep reading its stdout, so a chatty server never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = out.next_line().await {} });
    Some(Env { stack, mcp_url, _server: child })
}

/// One MCP client process (one user, one MCP session).
struct Client {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Client {
    async fn connect(lang: Lang, env: &Env, subject: &str, mode: &str, url_elicitation: bool) -> Client {
        let mut child = lang
            .client()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{lang:?} client: {e}"));
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut c = Client { child, stdin, lines };
        let token = env.stack.mcp_access_token(subject).await.unwrap();
        let hello = c
            .ask(json!({"cmd": "connect", "url": env.mcp_url, "token": token, "mode": mode, "url_elicitation": url_elicitation}))
            .await;
        assert_eq!(hello["ok"], true, "{hello}");
        let expected = if mode == LEGACY { "2025-11-25" } else { "2026-07-28" };
        assert_eq!(hello["protocol_version"], expected, "negotiated: {hello}");
        c
    }

    async fn send(&mut self, v: Value) {
        self.stdin.write_all(format!("{v}\n").as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    async fn recv(&mut self) -> Value {
        let line = tokio::time::timeout(Duration::from_secs(90), self.lines.next_line())
            .await
            .expect("the MCP client answered within 90 s")
            .unwrap()
            .expect("the MCP client ended early (its stderr is above)");
        serde_json::from_str(&line).unwrap()
    }

    async fn ask(&mut self, v: Value) -> Value {
        self.send(v).await;
        self.recv().await
    }

    async fn call(&mut self) -> Value {
        self.ask(json!({"cmd": "call", "name": "whoami_on", "arguments": {"provider": PROVIDER}})).await
    }

    async fn close(mut self) {
        assert_eq!(self.ask(json!({"cmd": "close"})).await["ok"], true);
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await.unwrap().unwrap();
        assert!(status.success(), "the MCP client exited with {status}");
    }
}

/// The prompt's URL: our connect page for the provider, and the message names the MCP
/// server (both example servers are "whoami": the Python SDK sends the server's name, the
/// TypeScript one the `serverName` option) and the provider's display name.
fn prompted_url(env: &Env, event: &Value) -> String {
    assert_eq!(event["event"], "elicit", "expected a URL prompt: {event}");
    let p = &event["params"];
    assert_eq!(p["mode"], "url", "{event}");
    let url = p["url"].as_str().unwrap().to_owned();
    assert!(url.starts_with(&format!("{}/connect/{PROVIDER}?e=", env.stack.connect_base)), "{url}");
    let says = "whoami needs access to your Test Provider account.";
    assert!(p["message"].as_str().is_some_and(|m| m.starts_with(says)), "{event}");
    url
}

fn assert_account(outcome: &Value, login: &str) {
    let r = &outcome["result"];
    assert_ne!(r["isError"], true, "{outcome}");
    assert_eq!(r["structuredContent"]["connected"], true, "{outcome}");
    assert_eq!(r["structuredContent"]["login"], login, "{outcome}");
    assert!(r["content"][0]["text"].as_str().unwrap().contains(login), "{outcome}");
}

fn assert_not_connected(outcome: &Value) {
    let r = &outcome["result"];
    assert_ne!(r["isError"], true, "decline/cancel is not an error: {outcome}");
    assert_eq!(r["structuredContent"]["connected"], false, "{outcome}");
    assert!(r["content"][0]["text"].as_str().unwrap().starts_with("Not connected"), "{outcome}");
}

/// The person connects `subject` in Chromium, signing in at the provider as `account`.
async fn connect_in_chromium(env: &Env, url: &str, subject: &str, account: &str) {
    let id = url.split("?e=").nth(1).unwrap().to_owned();
    let chrome = Chrome::start("sdks", Setup::default()).await;
    open_and_sign_in(&chrome, &env.stack.app, url, subject).await;
    on_the_consent_page(&chrome, &env.stack.app, &id).await;
    chrome.click("button[name=decision][value=connect]").await;
    answer_at_the_provider(&chrome, &env.stack.app, account, "allow").await;
    assert_eq!(callback_heading(&chrome, &env.stack.app).await, "Connected");
    chrome.close().await;
}

/// Accept in the client at once, then connect in the browser while the retry is held: the
/// retry returns the account, with no second prompt and one grant.
async fn accept_then_connect_in_chromium(client: Lang, server: Lang, mode: &str) {
    let env = start(server).await;
    let mut alice = Client::connect(client, &env, "alice", mode, true).await;
    let url = prompted_url(&env, &alice.call().await);
    // "Opened it": the SDK (2026-07-28) or the host (2025-11-25) retries right away; the
    // server's retry waits at mcp-connect while the person is still in the browser.
    alice.send(json!({"answer": "accept"})).await;
    connect_in_chromium(&env, &url, "alice", "octo-alice").await;
    let mut outcome = alice.recv().await;
    if mode == LEGACY && outcome["event"] == "elicit" {
        // 2025-11-25 has no waiting retry: a host that repeats the call at once gets the
        // same link again (its client would hear notifications/elicitation/complete).
        assert_eq!(prompted_url(&env, &outcome), url, "the same link, not a second one");
        outcome = alice.ask(json!({"answer": "accept"})).await;
    }
    assert_account(&outcome, "octo-alice");
    if mode == LEGACY {
        assert!(outcome["rounds"].as_array().unwrap().len() <= 2, "{outcome}");
    }
    // Connected now: the next call needs no prompt.
    assert_account(&alice.call().await, "octo-alice");
    alice.close().await;
    assert_eq!(env.stack.app.provider.stats().authorization_code_exchanges, 1, "one grant");
    assert_eq!(env.stack.app.connection_count().await, 1);
}

/// Declined on our consent page: the client's `accept` ends in a normal "not connected".
async fn decline_on_the_page(client: Lang, server: Lang, mode: &str) {
    let env = start(server).await;
    let mut bob = Client::connect(client, &env, "bob", mode, true).await;
    let url = prompted_url(&env, &bob.call().await);
    Browser::new().unwrap().decline(&url, "bob").await.unwrap();
    let outcome = bob.ask(json!({"answer": "accept"})).await;
    assert_not_connected(&outcome);
    bob.close().await;
    assert_eq!(env.stack.app.connection_count().await, 0);
}

/// Cancel and decline in the client: normal results, no loop of prompts; 2026-07-28 closes
/// the link at mcp-connect, 2025-11-25 simply does not repeat the call.
async fn cancel_in_the_client(client: Lang, server: Lang, mode: &str) {
    let env = start(server).await;
    let mut carol = Client::connect(client, &env, "carol", mode, true).await;
    let first = prompted_url(&env, &carol.call().await);
    let outcome = carol.ask(json!({"answer": "cancel"})).await;
    if mode == LEGACY {
        assert_eq!(outcome["not_retried"]["actions"], json!(["cancel"]), "{outcome}");
        // Asked again later: the same pending link, not a second one.
        assert_eq!(prompted_url(&env, &carol.call().await), first);
        assert_eq!(carol.ask(json!({"answer": "decline"})).await["not_retried"]["actions"], json!(["decline"]));
    } else {
        assert_not_connected(&outcome);
        let second = prompted_url(&env, &carol.call().await);
        assert_ne!(first, second, "a closed link is never offered again");
        assert_not_connected(&carol.ask(json!({"answer": "decline"})).await);
        assert_eq!(
            env.stack.elicitation_outcomes("carol").await.unwrap(),
            [("cancelled".to_owned(), Some("cancel".to_owned())), ("cancelled".to_owned(), Some("decline".to_owned()))]
        );
    }
    carol.close().await;
    assert_eq!(env.stack.app.connection_count().await, 0);
}

/// A client without URL elicitation: a normal result naming the link, never a form; the
/// link works outside the workflow and the tool then just works.
async fn setup_link(client: Lang, server: Lang, mode: &str) {
    let env = start(server).await;
    let mut dave = Client::connect(client, &env, "dave", mode, false).await;
    let outcome = dave.call().await;
    assert_not_connected(&outcome);
    if mode == LEGACY {
        assert!(outcome["rounds"].as_array().unwrap().is_empty(), "no -32042 to a client without URL mode: {outcome}");
    }
    let link = outcome["result"]["structuredContent"]["setup_url"].as_str().unwrap().to_owned();
    assert!(outcome["result"]["content"][0]["text"].as_str().unwrap().contains(&link));
    Browser::new().unwrap().connect(&link, "dave", "octo-dave").await.unwrap();
    assert_account(&dave.call().await, "octo-dave");
    dave.close().await;
}

macro_rules! matrix {
    ($($name:ident: $case:ident($client:ident, $server:ident, $mode:ident);)*) => {$(
        #[tokio::test]
        async fn $name() {
            $case(Lang::$client, Lang::$server, $mode).await;
        }
    )*};
}

matrix! {
    python_client_typescript_server_modern_accept_in_chromium_while_the_retry_waits: accept_then_connect_in_chromium(Python, TypeScript, MODERN);
    python_client_typescript_server_legacy_accept_in_chromium_then_the_repeated_call_gets_the_account: accept_then_connect_in_chromium(Python, TypeScript, LEGACY);
    typescript_client_python_server_modern_accept_in_chromium_while_the_retry_waits: accept_then_connect_in_chromium(TypeScript, Python, MODERN);
    typescript_client_python_server_legacy_accept_in_chromium_then_the_repeated_call_gets_the_account: accept_then_connect_in_chromium(TypeScript, Python, LEGACY);
    python_client_typescript_server_modern_decline_on_the_page: decline_on_the_page(Python, TypeScript, MODERN);
    python_client_typescript_server_legacy_decline_on_the_page: decline_on_the_page(Python, TypeScript, LEGACY);
    typescript_client_python_server_modern_decline_on_the_page: decline_on_the_page(TypeScript, Python, MODERN);
    typescript_client_python_server_legacy_decline_on_the_page: decline_on_the_page(TypeScript, Python, LEGACY);
    python_client_typescript_server_modern_cancel_in_the_client: cancel_in_the_client(Python, TypeScript, MODERN);
    python_client_typescript_server_legacy_cancel_in_the_client: cancel_in_the_client(Python, TypeScript, LEGACY);
    typescript_client_python_server_modern_cancel_in_the_client: cancel_in_the_client(TypeScript, Python, MODERN);
    typescript_client_python_server_legacy_cancel_in_the_client: cancel_in_the_client(TypeScript, Python, LEGACY);
    python_client_typescript_server_modern_without_url_elicitation_gets_a_setup_link: setup_link(Python, TypeScript, MODERN);
    python_client_typescript_server_legacy_without_url_elicitation_gets_a_setup_link: setup_link(Python, TypeScript, LEGACY);
    typescript_client_python_server_modern_without_url_elicitation_gets_a_setup_link: setup_link(TypeScript, Python, MODERN);
    typescript_client_python_server_legacy_without_url_elicitation_gets_a_setup_link: setup_link(TypeScript, Python, LEGACY);
}
