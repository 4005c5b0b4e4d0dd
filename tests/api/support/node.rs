//! A test peer written in Node.js (the interop `oidc-provider`, the MCP SDK-built server):
//! started with its JSON configuration, ready once it prints one JSON line with
//! `"ready": true`, ended when its stdin closes (so a crashed test leaves nothing behind).

use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// A running Node.js peer; it ends when this is dropped.
pub struct NodePeer {
    _child: tokio::process::Child,
    _stdin: tokio::process::ChildStdin,
    /// The line it printed when ready.
    pub ready: Value,
}

/// Starts `dir/script` with `config`; `installed` is a path under `dir` that exists once its
/// packages are installed, `how` says how to install them.
pub async fn start(dir: &Path, script: &str, config: &Value, installed: &str, how: &str) -> NodePeer {
    assert!(dir.join(installed).exists(), "{script}'s packages are not installed: {how} (.ci/run does)");
    let mut child = tokio::process::Command::new("node")
        .arg(dir.join(script))
        .arg(config.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start node (Node.js is needed for {script}): {e}"));
    let stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{script} became ready within 30 s"))
        .unwrap()
        .unwrap_or_else(|| panic!("{script} ended before it was ready (its stderr is above)"));
    let ready: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(ready["ready"], true, "{line}");
    NodePeer { _child: child, _stdin: stdin, ready }
}
