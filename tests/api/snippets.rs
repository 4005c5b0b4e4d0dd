//! The docs' programs, run as written (issue 41): docs/mcp-servers.md shows
//! `examples/snippets/{server,client}.{py,mjs}` byte for byte, and each runs against the
//! real `mcp-connect dev` the way a newcomer runs it: the env file the command writes, a
//! Python and a TypeScript server side by side (two `--mcp-url`s), each official client
//! against each server in its default revision and the other, the link completed in the
//! browser, the tool's first result printed.

use crate::dev_command::{dev_grant, start_dev_in};
use crate::sdks::{node_script, python, repo};
use crate::support::browser::Browser;
use crate::support::free_port;
use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// Every `<!-- snippet: PATH -->` of the document, with the code block that follows it.
fn snippets_of(doc: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join(doc)).unwrap();
    let mut out = Vec::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("<!-- snippet: ") {
        rest = &rest[at + "<!-- snippet: ".len()..];
        let (path, after) = rest.split_once(" -->").expect("a snippet marker ends with -->");
        let fence = after.find("```").expect("a code block follows the marker");
        let body = &after[fence..];
        let start = body.find('\n').unwrap() + 1;
        let end = body[start..].find("\n```").expect("the code block ends") + start + 1;
        out.push((path.to_owned(), body[start..end].to_owned()));
        rest = &body[end..];
    }
    out
}

#[test]
fn the_docs_show_the_snippet_files_as_they_are() {
    let shown = snippets_of("docs/mcp-servers.md");
    let paths: Vec<&str> = shown.iter().map(|(p, _)| p.as_str()).collect();
    for file in ["server.py", "server.mjs", "client.py", "client.mjs"] {
        assert!(paths.contains(&format!("examples/snippets/{file}").as_str()), "{file} is shown: {paths:?}");
    }
    for (path, block) in shown {
        let file = std::fs::read_to_string(repo().join(&path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(block == file, "docs/mcp-servers.md shows {path} otherwise than the file is: copy the file in");
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Lang {
    Python,
    TypeScript,
}

/// The program `examples/snippets/<name>.{py,mjs}` under the interpreter scripts/test made.
fn snippet(lang: Lang, name: &str) -> Command {
    let (program, script) = match lang {
        Lang::Python => (python(), repo().join(format!("examples/snippets/{name}.py"))),
        Lang::TypeScript => ("node".into(), node_script("examples/snippets", &format!("{name}.mjs"))),
    };
    let mut c = Command::new(program);
    c.arg(script);
    c.kill_on_drop(true).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
    c
}

/// A snippet server for `url`, with the env file's values and `key`; returns once it listens.
async fn serve(lang: Lang, env: &HashMap<String, String>, url: &str, key: &str) -> Child {
    let u = url::Url::parse(url).unwrap();
    let listen = format!("127.0.0.1:{}", u.port().unwrap());
    let mut c = snippet(lang, "server");
    c.envs(env).env("MCP_CONNECT_API_KEY", key).env("MCP_LISTEN", &listen).env("MCP_RESOURCE", url);
    let child = c.spawn().unwrap();
    let up = tokio::time::timeout(Duration::from_secs(30), async {
        while tokio::net::TcpStream::connect(&listen).await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(up.is_ok(), "the {lang:?} server listens on {listen} within 30 s (its stderr is above)");
    child
}

/// One newcomer's first tool call: the client snippet as `subject`, the link it prints
/// completed in the browser, Enter pressed, the result line read.
async fn first_result(env: &HashMap<String, String>, client: Lang, url: &str, protocol: &str, subject: &str) {
    let r = dev_grant(env, subject, Some(url)).await;
    assert_eq!(r.status(), 200);
    let token = r.json::<serde_json::Value>().await.unwrap()["access_token"].as_str().unwrap().to_owned();
    let mut c = snippet(client, "client");
    c.envs(env).env("MCP_URL", url).env("MCP_TOKEN", token).env("MCP_PROTOCOL", protocol);
    let mut child = c.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the client printed a line within 60 s")
            .unwrap()
            .expect("the client ended early (its stderr is above)")
    };
    let line = next().await;
    let link = line.strip_prefix("Open this link to connect: ").unwrap_or_else(|| panic!("a link first: {line}"));
    let account = format!("{subject}-at-dev");
    let app = crate::support::BaseOnly(env["MCP_CONNECT_URL"].clone());
    assert_eq!(Browser::new().connect(&app, link, subject, &account).await.status(), 200);
    stdin.write_all(b"\n").await.unwrap();
    let result = next().await;
    assert_eq!(result, format!("On dev you are {account}"), "{client:?} client, {protocol}, at {url}");
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "the {client:?} client exited with {status}");
}

#[tokio::test]
async fn the_snippets_give_a_first_tool_result_in_both_languages_and_revisions_side_by_side() {
    let db = crate::support::create_database().await;
    let (py_url, ts_url) =
        (format!("http://127.0.0.1:{}/mcp", free_port()), format!("http://127.0.0.1:{}/mcp", free_port()));
    let (_dev, env) = start_dev_in(Some(&db.url), None, &["--mcp-url", &py_url, "--mcp-url", &ts_url]);
    let _py = serve(Lang::Python, &env, &py_url, &env["MCP_CONNECT_API_KEY"]).await;
    let _ts = serve(Lang::TypeScript, &env, &ts_url, &env["MCP_CONNECT_API_KEY_2"]).await;
    // Each client in its default revision against the server of its language, then in the
    // other revision against the other language's server.
    first_result(&env, Lang::Python, &py_url, "", "alice").await;
    first_result(&env, Lang::TypeScript, &ts_url, "", "bob").await;
    first_result(&env, Lang::Python, &ts_url, "2025-11-25", "carol").await;
    first_result(&env, Lang::TypeScript, &py_url, "2026-07-28", "dave").await;
}
