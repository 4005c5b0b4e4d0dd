//! Commands that never surprise: exit codes, messages that say where and what to do, and no
//! command but `migrate` (and `serve`, `dev`) changing the schema.

use crate::support::TestDatabase;
use crate::support::binary::{run, run_without};
use std::process::{Command, Output};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_usage_error_exits_64_and_help_exits_0() {
    let bin = env!("CARGO_BIN_EXE_mcp-connect");
    let o = Command::new(bin).arg("frobnicate").output().unwrap();
    assert_eq!(o.status.code(), Some(64), "{}", stderr(&o));
    let o = Command::new(bin).args(["apikey", "create"]).output().unwrap();
    assert_eq!(o.status.code(), Some(64), "a missing argument: {}", stderr(&o));
    let o = Command::new(bin).arg("--help").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let o = Command::new(bin).arg("--version").output().unwrap();
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn version_names_the_release_and_the_commit_it_was_built_from() {
    let o = Command::new(env!("CARGO_BIN_EXE_mcp-connect")).arg("--version").output().unwrap();
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.starts_with(&format!("mcp-connect {} (commit ", env!("CARGO_PKG_VERSION"))), "{out}");
    // Built from a git checkout (as the tests are): the commit checked out at build time,
    // which is the one checked out now unless a commit came in between.
    let head = Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).output().unwrap();
    let head = String::from_utf8(head.stdout).unwrap();
    assert!(!head.trim().is_empty(), "the tests run in a git checkout");
    assert!(out.contains(&format!("(commit {})", head.trim())), "{out} vs HEAD {head}");
}

#[tokio::test]
async fn a_configuration_error_exits_78_and_a_toml_error_names_its_line() {
    let db = TestDatabase::create().await.unwrap();
    let o = run(
        &db.url,
        Some("public_base_url = \"https://x.example\"\n\n[cache]\nenabled = maybe\n"),
        &["apikey", "list"],
    );
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("line 4, column"), "{}", stderr(&o));
    let o = run(&db.url, Some("public_base_url = \"ftp://x.example\"\n"), &["migrate"]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
}

#[tokio::test]
async fn an_unreachable_database_exits_69_and_says_where_without_the_password() {
    // Nothing listens on this port.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let o = run(&format!("postgres://postgres:hunter2secret@127.0.0.1:{port}/mcpc"), None, &["apikey", "list"]);
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("no PostgreSQL answers at 127.0.0.1:{port}")), "{}", stderr(&o));
    assert!(!stderr(&o).contains("hunter2secret"));
    // A server that answers, without the database.
    let mut url = url::Url::parse(&crate::support::database_server_url()).unwrap();
    url.set_path("/mcpc_no_such_database");
    let o = run(url.as_str(), None, &["migrate"]);
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("database \"mcpc_no_such_database\" does not exist") && e.contains("createdb"), "{e}");
}

async fn migrations_table_exists(db: &TestDatabase) -> bool {
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    let exists =
        sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL").fetch_one(&pool).await.unwrap();
    pool.close().await;
    exists
}

#[tokio::test]
async fn only_migrate_changes_the_schema_and_other_commands_refuse_one_not_their_own() {
    let db = TestDatabase::create().await.unwrap();
    // A command on an empty database: refused, and nothing migrated behind the operator's back.
    for args in [&["apikey", "list"][..], &["killswitch", "list"], &["cleanup"], &["tenant", "list"]] {
        let o = run(&db.url, None, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("run `mcp-connect migrate` first"), "{args:?}: {}", stderr(&o));
    }
    let o = run(&db.url, None, &["serve", "--no-migrate"]);
    assert!(stderr(&o).contains("schema is behind"), "serve --no-migrate refuses too: {}", stderr(&o));
    assert!(!migrations_table_exists(&db).await, "nothing was migrated");

    let o = run(&db.url, None, &["migrate"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&db.url, None, &["apikey", "list"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // A newer release migrated it since and took away what this binary uses (its
    // migration raised the compatibility level): refused, saying why, instead of failing
    // at random. (A newer release that only expands is served: upgrade.rs.)
    let pool = sqlx::PgPool::connect(&db.url).await.unwrap();
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (99991231000000, 'from the future', true, '\\x00', 0)",
    )
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("UPDATE schema_compat SET oldest_binary_level = $1")
        .bind(mcp_connect::store::SCHEMA_LEVEL + 1)
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
    for args in [&["apikey", "list"][..], &["migrate"], &["serve", "--no-migrate"], &["serve"]] {
        let o = run(&db.url, None, args);
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        assert!(stderr(&o).contains("needs binaries of compatibility level"), "{args:?}: {}", stderr(&o));
    }
}

#[tokio::test]
async fn apikey_create_needs_neither_idp_nor_provider_secrets() {
    let db = TestDatabase::create().await.unwrap();
    assert_eq!(run(&db.url, None, &["migrate"]).status.code(), Some(0));
    let secrets = [
        "MCP_CONNECT_IDP_CLIENT_SECRET",
        "MCP_CONNECT_PROVIDER_GITHUB_CLIENT_SECRET",
        "MCP_CONNECT_PROVIDER_GITLAB_CLIENT_SECRET",
        "MCP_CONNECT_PROVIDER_TESTP_CLIENT_SECRET",
        "MCP_CONNECT_PROVIDER_PLAINP_CLIENT_SECRET",
        "MCP_CONNECT_PROVIDER_DEADREV_CLIENT_SECRET",
        "MCP_CONNECT_VAULT_KEYS",
    ];
    let o = run_without(&db.url, None, &["apikey", "create", "--tenant", "acme", "--scope", "server"], &secrets);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("mcpc_"), "the key is printed once");
    // serve needs them all, and says which is missing.
    let o = run_without(&db.url, None, &["serve"], &["MCP_CONNECT_IDP_CLIENT_SECRET"]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
}

/// `apikey revoke` and `tenant deactivate` go through the flows the service uses: the
/// audit event is written, and the running service refuses at once.
#[tokio::test]
async fn apikey_revoke_and_tenant_deactivate_take_effect_in_the_running_service_with_their_audit_events() {
    let app = crate::support::spawn_app().await;
    let body = || serde_json::json!({"subject": "alice", "provider": "github"});
    let db = app.db_url.clone();
    let id = app.key[5..21].to_owned();
    let o = tokio::task::spawn_blocking(move || run(&db, None, &["apikey", "revoke", &id])).await.unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(app.state.caches.barrier(&app.pool).await, "the revocation's notification arrived");
    crate::support::assert_error(app.token(&app.key, body()).await, 401, "invalid_api_key").await;
    let db = app.db_url.clone();
    let id = app.key[5..21].to_owned();
    let o = tokio::task::spawn_blocking(move || run(&db, None, &["apikey", "revoke", &id])).await.unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no active key with id"), "{}", stderr(&o));

    assert_eq!(app.token(&app.beta_key, body()).await.status(), 200);
    let db = app.db_url.clone();
    let o = tokio::task::spawn_blocking(move || run(&db, None, &["tenant", "deactivate", "beta"])).await.unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("tenant beta is now inactive"));
    assert!(app.state.caches.barrier(&app.pool).await);
    crate::support::assert_error(app.token(&app.beta_key, body()).await, 403, "tenant_disabled").await;
    let kinds = app.audit_kinds().await;
    assert!(kinds.iter().any(|k| k == "api_key_revoked"), "{kinds:?}");
    let beta: Vec<String> =
        sqlx::query_scalar("SELECT kind FROM audit_events WHERE tenant_id = 'beta' AND kind = 'tenant_deactivated'")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert_eq!(beta.len(), 1);
}

/// A kill switch from the CLI is checked as the admin API's is: a tenant that does not
/// exist and a reason that could forge a log line are refused, and nothing is stored.
#[tokio::test]
async fn killswitch_set_refuses_an_unknown_tenant_and_a_reason_with_control_characters() {
    let app = crate::support::spawn_app().await;
    let set = |args: &'static [&'static str]| {
        let db = app.db_url.clone();
        tokio::task::spawn_blocking(move || run(&db, None, args))
    };
    let o = set(&["killswitch", "set", "github", "no_token_handouts", "--tenant", "nosuch"]).await.unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--tenant: no tenant nosuch"), "{}", stderr(&o));
    let o = set(&["killswitch", "set", "github", "no_token_handouts", "--reason", "ok\nFORGED LINE"]).await.unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--reason: reason must be at most 500 printable characters"), "{}", stderr(&o));
    let switches: i64 = sqlx::query_scalar("SELECT count(*) FROM kill_switches").fetch_one(&app.pool).await.unwrap();
    assert_eq!(switches, 0, "nothing is stored");
    assert!(!app.audit_kinds().await.iter().any(|k| k == "kill_switch_changed"));
}

/// `config check` reports what `serve` would refuse, without starting anything (nothing
/// listens, nothing is migrated), and says so when all is well.
#[tokio::test]
async fn config_check_says_valid_or_names_each_mistake_and_exits_78() {
    let db = TestDatabase::create().await.unwrap();
    let o = run(&db.url, None, &["config", "check"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.contains(": valid (2 tenants, 5 providers, 1 identity providers)"), "{out}");
    assert!(!migrations_table_exists(&db).await, "config check migrates nothing");
    // An IdP secret the service needs but the database commands do not: checked here.
    let o = run_without(&db.url, None, &["config", "check"], &["MCP_CONNECT_IDP_CLIENT_SECRET"]);
    assert_eq!(o.status.code(), Some(78), "{}", stderr(&o));
    assert!(stderr(&o).contains("idp.client_secret_file"), "{}", stderr(&o));
}

/// Listings print JSON for scripts with `--output json`, and the operator's audit listing
/// shows the events of no tenant (`login_failed`), which no tenant's admin API shows.
#[tokio::test]
async fn listings_print_json_and_the_operator_audit_shows_events_of_no_tenant() {
    let app = crate::support::spawn_app().await;
    sqlx::query("INSERT INTO audit_events (kind, detail) VALUES ('login_failed', '{\"reason\": \"idp_unavailable\"}')")
        .execute(&app.pool)
        .await
        .unwrap();
    app.insert_connection("acme", "alice", "github", "gho_x", &["repo"], None).await;
    let db = app.db_url.clone();
    let json = move |args: &'static [&'static str]| {
        let db = db.clone();
        async move {
            let o = tokio::task::spawn_blocking(move || run(&db, None, args)).await.unwrap();
            assert!(o.status.success(), "{args:?}: {}", stderr(&o));
            serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}"))
        }
    };
    let events = json(&["audit", "list", "--without-tenant", "--output", "json"]).await;
    let events = events.as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["kind"], "login_failed");
    assert_eq!(events[0]["tenant"], serde_json::Value::Null);
    assert_eq!(events[0]["detail"]["reason"], "idp_unavailable");
    let all = json(&["audit", "list", "--output", "json"]).await;
    let kinds: Vec<&str> = all.as_array().unwrap().iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert!(kinds.contains(&"login_failed") && kinds.contains(&"api_key_created"), "{kinds:?}");
    let acme = json(&["audit", "list", "--tenant", "acme", "--output", "json"]).await;
    assert!(acme.as_array().unwrap().iter().all(|e| e["tenant"] == "acme"), "{acme}");

    let keys = json(&["apikey", "list", "--output", "json"]).await;
    let keys = keys.as_array().unwrap();
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(keys.iter().all(|k| k["id"].as_str().unwrap().len() == 16 && k["revoked"] == false));
    assert!(!serde_json::to_string(keys).unwrap().contains("mcpc_"), "never the keys themselves");
    let tenants = json(&["tenant", "list", "--output", "json"]).await;
    assert_eq!(tenants[0]["id"], "acme");
    assert_eq!(tenants[0]["idp"], "default");
    assert_eq!(tenants[1]["providers"], serde_json::json!(["github"]));
    assert_eq!(json(&["killswitch", "list", "--output", "json"]).await, serde_json::json!([]));
}

#[test]
fn completions_are_printed_for_each_shell() {
    let bin = env!("CARGO_BIN_EXE_mcp-connect");
    for shell in ["bash", "zsh", "fish"] {
        let o = Command::new(bin).args(["completions", shell]).output().unwrap();
        assert!(o.status.success(), "{shell}: {}", stderr(&o));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(out.contains("mcp-connect") && out.contains("rotate-key") && out.contains("audit"), "{shell}");
    }
    let o = Command::new(bin).args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(o.status.code(), Some(64));
}

/// The operator-wide connection and webhook commands: a listing across tenants (never a
/// token, never a webhook URL's path), and an off-boarding that revokes at the provider,
/// closes the subject's links, is audited as the CLI's, and stops the running service's
/// hand-outs.
#[tokio::test]
async fn connections_revoke_off_boards_a_subject_everywhere_and_listings_show_no_secret() {
    let app = crate::support::spawn_app().await;
    let (alice, alice_access, _) = app.insert_provider_grant("alice", "octo-alice", None).await;
    app.insert_connection("acme", "alice", "github", "gho_alice", &["repo"], None).await;
    app.insert_connection("beta", "alice", "github", "gho_beta_alice", &["repo"], None).await;
    app.insert_connection("acme", "bob", "github", "gho_bob", &["repo"], None).await;
    let (link, _) = app.elicit("alice", "gitlab").await;
    let r = app
        .admin(
            reqwest::Method::POST,
            "/webhooks",
            Some(serde_json::json!({"url": "http://127.0.0.1:9/hook/s3cr3t-path", "events": ["connection.revoked"]})),
        )
        .await;
    assert_eq!(r.status(), 201, "{}", r.text().await.unwrap());

    let list = |args: &'static [&'static str]| {
        let db = app.db_url.clone();
        async move {
            let o = tokio::task::spawn_blocking(move || run(&db, None, args)).await.unwrap();
            assert!(o.status.success(), "{args:?}: {}", stderr(&o));
            String::from_utf8(o.stdout).unwrap()
        }
    };
    let all: serde_json::Value =
        serde_json::from_str(&list(&["connections", "list", "--output", "json"]).await).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 4, "{all}");
    let text = list(&["connections", "list", "--subject", "alice"]).await;
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(!text.contains("gho_") && !text.contains(&alice_access), "never a token");
    let hooks = list(&["webhooks", "list", "--output", "json"]).await;
    assert!(hooks.contains("\"host\": \"127.0.0.1:9\"") && !hooks.contains("s3cr3t"), "{hooks}");

    // Off-boarding alice in acme: both of her acme connections, at the provider too, and
    // her pending link; beta's alice and acme's bob keep theirs.
    // Off the test's runtime, which serves the provider the command calls.
    let text =
        crate::support::config_text(&app.base, &app.idp.issuer(), &app.provider.issuer(), &Default::default()).unwrap();
    let db = app.db_url.clone();
    let o = tokio::task::spawn_blocking(move || {
        run(&db, Some(&text), &["connections", "revoke", "--tenant", "acme", "--subject", "alice"])
    })
    .await
    .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(out.contains(&format!("revoked {alice} (testp): provider revoked")), "{out}");
    assert!(out.contains("2 connections revoked, 1 pending links closed"), "{out}");
    // The provider was told: the refresh token, then the access token (RFC 7009).
    let kinds: Vec<_> = app.provider.stats().revocations.iter().map(|r| r.kind).collect();
    assert_eq!(kinds, [mcp_connect_devproviders::TokenKind::Refresh, mcp_connect_devproviders::TokenKind::Access]);
    assert!(app.state.caches.barrier(&app.pool).await);
    let r = app.token_ok(serde_json::json!({"subject": "alice", "provider": "github"})).await;
    assert_eq!(r["status"], "connect_required", "the running service stopped handing it out");
    assert_eq!(app.elicitation_status(&link).await, "cancelled");
    let statuses: Vec<(String, String, String)> =
        sqlx::query_as("SELECT tenant_id, subject, status FROM connections ORDER BY tenant_id, subject, provider")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    let revoked: Vec<_> =
        statuses.iter().filter(|(_, _, s)| s == "revoked").map(|(t, s, _)| (t.as_str(), s.as_str())).collect();
    assert_eq!(revoked, [("acme", "alice"), ("acme", "alice")], "{statuses:?}");
    let by: Vec<serde_json::Value> =
        sqlx::query_scalar("SELECT detail FROM audit_events WHERE kind = 'connection_revoked'")
            .fetch_all(&app.pool)
            .await
            .unwrap();
    assert!(by.len() == 2 && by.iter().all(|d| d["by"] == "cli"), "{by:?}");
}
