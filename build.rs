use std::path::Path;
use std::process::Command;

fn main() {
    // `sqlx::migrate!` embeds the migrations at compile time: rebuild when one is added or changed.
    println!("cargo:rerun-if-changed=migrations");
    // The commit `mcp-connect --version` and the build-info metric name: MCP_CONNECT_COMMIT
    // when the builder sets it (a build from a source tarball), else git's, else "unknown".
    println!("cargo:rerun-if-env-changed=MCP_CONNECT_COMMIT");
    let commit = std::env::var("MCP_CONNECT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=MCP_CONNECT_COMMIT={}", commit.trim());
}

/// The checked-out commit (12 hex digits), watching the files that change with it.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // HEAD, the branch it names, and packed refs: a new commit or checkout changes one.
    let mut watched = vec!["HEAD".to_owned(), "packed-refs".to_owned()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(commit)
}
