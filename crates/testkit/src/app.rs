//! The harness of the service's own API tests, and under [`crate::Stack`] of the other
//! crates' tests: a fresh database, the real `Application`, dev IdP and provider, API keys
//! for two tenants (`acme`, `beta`), and helpers that store grants through the real vault.
//!
//! A failed step here is the failure of the test that asked for it, so the helpers panic
//! with a message, as the tests' own assertions do; [`TestApp::start`] returns errors for
//! callers that report them (the [`crate::Stack`]).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::db::TestDatabase;
use anyhow::{Context, Result};
use mcp_connect::config::Config;
use mcp_connect::domain::{ConnectionId, ConnectionKey, KeyScope, ProviderId, Subject, TenantId};
use mcp_connect::store;
use mcp_connect::vault::{Field, RowBinding};
use mcp_connect::{app::AppState, startup::Application};
use mcp_connect_devproviders::{ClientRegistration, DevProvider, DevProviderConfig, Role};
use secrecy::{ExposeSecret, SecretString};
use std::collections::HashMap;
use std::sync::Arc;
use time::OffsetDateTime;

pub const KEY_A: &str = "k-old:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
pub const KEY_B: &str = "k-new:HxwdHhscGRobGBcWFRQTEhEQDw4NDAsKCQgHBgUEAwI=";

pub struct TestApp {
    pub base: String,
    /// The primary identity provider (dev IdP role): its `sub` is the MCP subject.
    pub idp: Arc<DevProvider>,
    /// A downstream OIDC provider, configured as `testp` (template `oidc`) and as `plainp`
    /// (template `oauth2`, explicit endpoints, RFC 9207 from the config).
    pub provider: Arc<DevProvider>,
    pub pool: mcp_connect::store::Db,
    pub state: actix_web::web::Data<AppState>,
    pub db_url: String,
    /// The database, dropped when the last instance on it is (`None`: one the test made
    /// elsewhere, see [`TestApp::start_on`]).
    pub db: Option<Arc<TestDatabase>>,
    /// Server-scope key of tenant `acme`.
    pub key: String,
    /// Admin-scope key of tenant `acme`.
    pub admin_key: String,
    /// Server-scope key of tenant `beta`.
    pub beta_key: String,
    pub client: reqwest::Client,
    /// Where `GET /metrics` is served (127.0.0.1), when the options turn metrics on.
    pub metrics_port: Option<u16>,
    /// The rows the test inserts are sealed with the keyring's key, as the releases before
    /// data keys sealed them ([`TestApp::seal_as_before_data_keys`]).
    pub keyring_seals: std::sync::atomic::AtomicBool,
}

pub struct Options {
    pub vault_keys: String,
    pub extra_toml: String,
    pub cache_enabled: bool,
    /// Replacements made in the configuration text (e.g. to drop a tenant).
    pub patch: Vec<(&'static str, String)>,
    /// Another primary IdP than the dev one (an independent peer, see `interop`).
    pub idp_issuer: Option<String>,
    /// More environment for the configuration (secrets of extra providers).
    pub env: Vec<(&'static str, String)>,
    /// The clock the app's time-keeping services read (default: the real one).
    pub clock: Option<Arc<mcp_connect::domain::ManualClock>>,
    /// The audience of the dev IdP's access tokens (the MCP server's resource identifier):
    /// set, the IdP issues JWT access tokens for it, and tenant `acme` takes them as
    /// `subject_token` (its `subject_token_audience`).
    pub mcp_audience: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            vault_keys: KEY_A.to_owned(),
            extra_toml: String::new(),
            cache_enabled: true,
            patch: Vec::new(),
            idp_issuer: None,
            env: Vec::new(),
            clock: None,
            mcp_audience: None,
        }
    }
}

pub fn config_toml(base: &str, idp: &str, provider: &str, extra: &str) -> String {
    format!(
        r#"
public_base_url = "{base}"
listen = "127.0.0.1:0"
log_format = "text"
[idp]
issuer = "{idp}"
client_id = "mcp-connect"
[api_keys]
cache_seconds = 1
[outbound]
timeout_seconds = 3
[webhooks]
allow_loopback = true
timeout_seconds = 2
poll_interval_ms = 200
[[tenants]]
id = "acme"
display_name = "Acme Assistant"
providers = ["github", "gitlab", "testp", "plainp", "deadrev"]
[[tenants]]
id = "beta"
display_name = "Beta Bot"
providers = ["github"]
[providers.github]
template = "github"
client_id = "gh-client"
[providers.gitlab]
template = "gitlab"
client_id = "gl-client"
[providers.testp]
template = "oidc"
display_name = "Test Provider"
issuer = "{provider}"
client_id = "testp-client"
scopes = ["openid", "profile"]
account_id_field = "id"
account_login_field = "login"
[providers.plainp]
template = "oauth2"
display_name = "Plain Provider"
authorize_url = "{provider}/authorize"
token_url = "{provider}/token"
userinfo_url = "{provider}/userinfo"
revocation_url = "{provider}/revoke"
issuer = "{provider}"
authorization_response_iss = true
client_id = "plainp-client"
scopes = ["read"]
login_hint = "subject"
[providers.deadrev]
template = "oauth2"
display_name = "Provider whose revocation endpoint is down"
authorize_url = "{provider}/authorize"
token_url = "{provider}/token"
revocation_url = "http://127.0.0.1:9/revoke"
client_id = "deadrev-client"
{extra}
"#
    )
}

/// The environment the test configuration reads: the database, the vault keys, every
/// client secret, the cache switch, and the options' extras.
pub fn config_env(db_url: &str, opts: &Options) -> HashMap<&'static str, String> {
    let mut env: HashMap<&str, String> = HashMap::from([
        ("MCP_CONNECT_DATABASE_URL", db_url.to_owned()),
        ("MCP_CONNECT_VAULT_KEYS", opts.vault_keys.clone()),
        ("MCP_CONNECT_IDP_CLIENT_SECRET", "idp-secret".to_owned()),
        ("MCP_CONNECT_PROVIDER_GITHUB_CLIENT_SECRET", "gh-secret".to_owned()),
        ("MCP_CONNECT_PROVIDER_GITLAB_CLIENT_SECRET", "gl-secret".to_owned()),
        ("MCP_CONNECT_PROVIDER_TESTP_CLIENT_SECRET", "testp-secret".to_owned()),
        ("MCP_CONNECT_PROVIDER_PLAINP_CLIENT_SECRET", "plainp-secret".to_owned()),
        ("MCP_CONNECT_PROVIDER_DEADREV_CLIENT_SECRET", "deadrev-secret".to_owned()),
        ("MCP_CONNECT_CACHE_ENABLED", opts.cache_enabled.to_string()),
        // No background re-seal unless a test asks for one: tests count what rotate-key
        // re-seals, and which rows it touches.
        ("MCP_CONNECT_VAULT_RESEAL_INTERVAL_SECONDS", "0".to_owned()),
    ]);
    env.extend(opts.env.iter().map(|(k, v)| (*k, v.clone())));
    env
}

/// The test configuration's text, with the options' extra TOML and patches applied.
pub fn config_text(base: &str, idp: &str, provider: &str, opts: &Options) -> Result<String> {
    // `{PROVIDER}` in the extra TOML: the dev provider's address, known once it runs.
    let mut toml = config_toml(base, idp, provider, &opts.extra_toml.replace("{PROVIDER}", provider));
    if let Some(audience) = &opts.mcp_audience {
        // The MCP server the IdP's access tokens are for is acme's: it may prove its
        // subjects with them (`subject_token`).
        let acme = "display_name = \"Acme Assistant\"";
        toml = toml.replace(acme, &format!("{acme}\nsubject_token_audience = \"{audience}\""));
    }
    for (from, to) in &opts.patch {
        anyhow::ensure!(toml.contains(from), "patch target {from:?} is in the test config");
        toml = toml.replace(from, to);
    }
    Ok(toml)
}

pub fn config_for(db_url: &str, base: &str, idp: &str, provider: &str, opts: &Options) -> Result<Config> {
    let env = config_env(db_url, opts);
    let toml = config_text(base, idp, provider, opts)?;
    Config::from_toml(&toml, &|k| env.get(k).cloned()).context("the test config is valid")
}

/// The tenants' providers: the IdP and one downstream provider (as `testp` and `plainp`).
pub async fn start_providers(mcp_audience: Option<&str>) -> Result<(Arc<DevProvider>, Arc<DevProvider>)> {
    let idp = DevProvider::start(DevProviderConfig {
        display_name: "Test Identity Provider".to_owned(),
        role: Role::IdentityProvider,
        jwt_access_token_audience: mcp_audience.map(str::to_owned),
        ..DevProviderConfig::default()
    })
    .await
    .context("start the IdP")?;
    let provider = DevProvider::start(DevProviderConfig {
        display_name: "Test Provider".to_owned(),
        role: Role::Downstream,
        ..DevProviderConfig::default()
    })
    .await
    .context("start the provider")?;
    idp.add_client(ClientRegistration {
        client_id: MCP_CLIENT_ID.to_owned(),
        client_secret: MCP_CLIENT_SECRET.to_owned(),
        redirect_uris: vec![],
    });
    Ok((Arc::new(idp), Arc::new(provider)))
}

/// A confidential client of the IdP that may use the dev subject grant, standing in for
/// an MCP client that signed its user in.
pub const MCP_CLIENT_ID: &str = "mcp-test-client";
pub(crate) const MCP_CLIENT_SECRET: &str = "mcp-test-client-secret";

/// Registers an app instance's redirect URIs with the IdP and the provider.
pub fn register(base: &str, idp: &DevProvider, provider: &DevProvider) {
    let client = |id: &str, secret: &str, redirect: String| ClientRegistration {
        client_id: id.to_owned(),
        client_secret: secret.to_owned(),
        redirect_uris: vec![redirect],
    };
    idp.add_client(client("mcp-connect", "idp-secret", format!("{base}/login/callback")));
    provider.add_client(client("testp-client", "testp-secret", format!("{base}/connect/testp/callback")));
    provider.add_client(client("plainp-client", "plainp-secret", format!("{base}/connect/plainp/callback")));
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(Options::default()).await
}

pub async fn spawn_app_with(opts: Options) -> TestApp {
    TestApp::start(opts).await.expect("the test app starts")
}

/// Another instance on the same database and providers (cross-instance tests).
pub async fn spawn_on(other: &TestApp, opts: &Options) -> TestApp {
    TestApp::start_on(&other.db_url, other.db.clone(), other.idp.clone(), other.provider.clone(), opts)
        .await
        .expect("another instance starts")
}

impl TestApp {
    /// A fresh database, providers and instance.
    pub async fn start(opts: Options) -> Result<TestApp> {
        let db = Arc::new(TestDatabase::create().await?);
        let (idp, provider) = start_providers(opts.mcp_audience.as_deref()).await?;
        Self::start_on(&db.url.clone(), Some(db), idp, provider, &opts).await
    }

    /// An instance on the database at `db_url` (kept alive by `db`, when the harness made
    /// it) and the given providers.
    pub async fn start_on(
        db_url: &str,
        db: Option<Arc<TestDatabase>>,
        idp: Arc<DevProvider>,
        provider: Arc<DevProvider>,
        opts: &Options,
    ) -> Result<TestApp> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let base = format!("http://127.0.0.1:{}", listener.local_addr()?.port());
        register(&base, &idp, &provider);
        let idp_issuer = opts.idp_issuer.clone().unwrap_or_else(|| idp.issuer());
        let config = config_for(db_url, &base, &idp_issuer, &provider.issuer(), opts)?;
        let app = match &opts.clock {
            Some(c) => Application::build_with_clock(config, listener, c.clone()).await,
            None => Application::build_with_listener(config, listener).await,
        }
        .context("the app builds")?;
        let state = app.state();
        let pool = state.pool.clone();
        let metrics_port = app.metrics_port();
        tokio::spawn(app.run_until_stopped());
        // The change listener connects in the background. Tests expect an instance that
        // hears changes from its first request (a key verified before the listener proved
        // itself is re-checked once it does), so wait for it as a load balancer waits for
        // readiness: on a loaded machine it has taken seconds. Not fatal: a test about a
        // listener that cannot connect goes on after the wait.
        let listening = || async { if state.caches.is_listening() { Ok(()) } else { Err(()) } };
        let _ = crate::poll(std::time::Duration::from_secs(20), listening).await;
        // The test's keys are written over the test database itself, not through a pooler a
        // test put before it (whose misconfiguration is what such a test is about).
        let direct = match &db {
            Some(d) if d.url != db_url => Some(sqlx::PgPool::connect(&d.url).await?),
            _ => None,
        };
        let writer = direct.clone().map_or_else(|| pool.clone(), store::Db::direct);
        let key = |tenant: &'static str, scope: KeyScope, name: Option<&'static str>| {
            let writer = writer.clone();
            async move {
                let tenant = TenantId::parse(tenant).map_err(|e| anyhow::anyhow!("tenant id: {}", e.0))?;
                let key = mcp_connect::flows::api_keys::create_api_key(&writer, &tenant, scope, name).await?;
                anyhow::Ok(key.key.expose_secret().to_owned())
            }
        };
        let (key, admin_key, beta_key) = (
            key("acme", KeyScope::Server, Some("test")).await?,
            key("acme", KeyScope::Admin, None).await?,
            key("beta", KeyScope::Server, None).await?,
        );
        if let Some(direct) = direct {
            direct.close().await;
        }
        Ok(TestApp {
            key,
            admin_key,
            beta_key,
            base,
            idp,
            provider,
            pool,
            state,
            db_url: db_url.to_owned(),
            db,
            metrics_port,
            keyring_seals: std::sync::atomic::AtomicBool::new(false),
            // Idle connections are dropped before the service's 5 s keep-alive ends them: a
            // test that waits on a browser must not send on a connection the server is closing.
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .pool_idle_timeout(std::time::Duration::from_secs(2))
                .build()?,
        })
    }
}

/// Anything with a service base URL: the browser helpers need no more.
pub trait HasBase {
    fn base(&self) -> &str;
}

impl HasBase for TestApp {
    fn base(&self) -> &str {
        &self.base
    }
}

/// A service started elsewhere (the `dev` binary).
pub struct BaseOnly(pub String);

impl HasBase for BaseOnly {
    fn base(&self) -> &str {
        &self.0
    }
}

impl TestApp {
    /// A first `POST /v1/token` for a subject without a connection: the elicitation's id
    /// and connect URL.
    pub async fn elicit(&self, subject: &str, provider: &str) -> (String, String) {
        let b = self.token_ok(serde_json::json!({"subject": subject, "provider": provider})).await;
        assert_eq!(b["status"], "connect_required", "{b}");
        (b["elicitation"]["id"].as_str().unwrap().to_owned(), b["elicitation"]["url"].as_str().unwrap().to_owned())
    }

    /// The vault's keys as `rotate-key` builds them from a keyring `spec` (the local key
    /// store), on this app's database.
    pub fn keys_of(&self, spec: &str) -> mcp_connect::keys::Keys {
        mcp_connect::keys::Keys::local(
            self.pool.clone(),
            mcp_connect::vault::Keyring::parse(spec).unwrap(),
            std::sync::Arc::new(mcp_connect::domain::SystemClock),
            mcp_connect::keys::CacheBound::default(),
        )
    }

    /// From now on the rows this test inserts are sealed as the releases before data keys
    /// sealed them: with the keyring's current key.
    pub fn seal_as_before_data_keys(&self) {
        self.keyring_seals.store(true, std::sync::atomic::Ordering::Relaxed);
    }

    pub async fn connection_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM connections").fetch_one(&self.pool).await.unwrap()
    }

    /// The audit trail's kinds, oldest first.
    pub async fn audit_kinds(&self) -> Vec<String> {
        sqlx::query_scalar("SELECT kind FROM audit_events ORDER BY id").fetch_all(&self.pool).await.unwrap()
    }

    pub async fn elicitation_status(&self, id: &str) -> String {
        sqlx::query_scalar("SELECT status FROM elicitations WHERE id = $1::uuid")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    pub async fn token(&self, key: &str, body: serde_json::Value) -> reqwest::Response {
        self.client.post(format!("{}/v1/token", self.base)).bearer_auth(key).json(&body).send().await.unwrap()
    }

    /// `POST /v1/token` with the acme key; asserts 200 and returns the JSON.
    pub async fn token_ok(&self, body: serde_json::Value) -> serde_json::Value {
        let r = self.token(&self.key, body).await;
        assert_eq!(r.status(), 200, "unexpected status");
        r.json().await.unwrap()
    }

    /// Stores a connection holding a real grant of the test provider for `upstream`.
    pub async fn insert_provider_grant(
        &self,
        subject: &str,
        upstream: &str,
        expires_at: Option<OffsetDateTime>,
    ) -> (ConnectionId, String, String) {
        let (access, refresh) = self.provider.issue_grant("testp-client", upstream, "openid profile");
        let id = self
            .insert_sealed("acme", subject, "testp", &access, Some(&refresh), &["openid", "profile"], expires_at)
            .await;
        (id, access, refresh)
    }

    /// A new operator-scope key (of no tenant), for `/operator/v1`.
    pub async fn operator_key(&self) -> String {
        let key = mcp_connect::flows::api_keys::create_operator_key(&self.pool, Some("test operator")).await.unwrap();
        key.key.expose_secret().to_owned()
    }

    /// `/operator/v1/...` with an operator key.
    pub async fn operator(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> reqwest::Response {
        let mut r = self.client.request(method, format!("{}/operator/v1{path}", self.base)).bearer_auth(key);
        if let Some(b) = body {
            r = r.json(&b);
        }
        r.send().await.unwrap()
    }

    /// `POST/GET/PUT/DELETE /admin/v1/...` with the acme admin key.
    pub async fn admin(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> reqwest::Response {
        let mut r = self.client.request(method, format!("{}/admin/v1{path}", self.base)).bearer_auth(&self.admin_key);
        if let Some(b) = body {
            r = r.json(&b);
        }
        r.send().await.unwrap()
    }

    /// Stores an active connection through the real vault code, as the callback would.
    pub async fn insert_connection(
        &self,
        tenant: &str,
        subject: &str,
        provider: &str,
        access_token: &str,
        scopes: &[&str],
        expires_at: Option<OffsetDateTime>,
    ) -> ConnectionId {
        let refresh = format!("refresh-{access_token}");
        self.insert_sealed(tenant, subject, provider, access_token, Some(&refresh), scopes, expires_at).await
    }

    #[expect(clippy::too_many_arguments, reason = "a test's row, spelled out at each call")]
    pub async fn insert_sealed(
        &self,
        tenant: &str,
        subject: &str,
        provider: &str,
        access_token: &str,
        refresh_token: Option<&str>,
        scopes: &[&str],
        expires_at: Option<OffsetDateTime>,
    ) -> ConnectionId {
        let mut conn = self.pool.sqlx_pool().acquire().await.unwrap();
        self.insert_sealed_on(&mut conn, tenant, subject, provider, access_token, refresh_token, scopes, expires_at)
            .await
    }

    /// [`Self::insert_sealed`] on a given connection (e.g. inside a test's open transaction).
    #[expect(clippy::too_many_arguments, reason = "a test's row, spelled out at each call")]
    pub async fn insert_sealed_on(
        &self,
        db: &mut sqlx::PgConnection,
        tenant: &str,
        subject: &str,
        provider: &str,
        access_token: &str,
        refresh_token: Option<&str>,
        scopes: &[&str],
        expires_at: Option<OffsetDateTime>,
    ) -> ConnectionId {
        self.insert_sealed_for(db, None, tenant, subject, provider, access_token, refresh_token, scopes, expires_at)
            .await
    }

    /// [`Self::insert_sealed_on`] for the subject of the IdP `issuer` names (`None`: the
    /// tenant's), as a row made before its tenant moved to another IdP.
    #[expect(clippy::too_many_arguments, reason = "a test's row, spelled out at each call")]
    pub async fn insert_sealed_for(
        &self,
        db: &mut sqlx::PgConnection,
        issuer: Option<&str>,
        tenant: &str,
        subject: &str,
        provider: &str,
        access_token: &str,
        refresh_token: Option<&str>,
        scopes: &[&str],
        expires_at: Option<OffsetDateTime>,
    ) -> ConnectionId {
        let (t, s, p) =
            (TenantId::parse(tenant).unwrap(), Subject::parse(subject).unwrap(), ProviderId::parse(provider).unwrap());
        let id = ConnectionId::generate();
        // The tenant's IdP's subject, as the callback records it (and binds into the seal).
        let issuer = match issuer {
            Some(i) => Some(i.to_owned()),
            None => self.state.directory.tenant_idp(&t).map(|i| i.issuer.as_str().to_owned()),
        };
        let row = RowBinding {
            tenant: &t,
            subject: &s,
            provider: &p,
            connection: id,
            generation: Some(mcp_connect::vault::FIRST_GENERATION),
            issuer: issuer.as_deref(),
        };
        // Sealed as the service seals now: under the tenant's data key (or, for a row of the
        // releases before data keys, the keyring's key).
        let vault = match self.keyring_seals.load(std::sync::atomic::Ordering::Relaxed) {
            true => self.state.keys.keyring().current().clone(),
            false => self.state.keys.sealing(mcp_connect::keys::Scope::Tenant(&t)).await.unwrap(),
        };
        let at = vault.seal(&row, Field::AccessToken, &SecretString::from(access_token.to_owned())).unwrap();
        let rt =
            refresh_token.map(|r| vault.seal(&row, Field::RefreshToken, &SecretString::from(r.to_owned())).unwrap());
        let scopes = mcp_connect::domain::Scopes::parse(scopes).unwrap();
        let key = ConnectionKey { tenant: t.clone(), subject: s.clone(), provider: p.clone() };
        let inserted = store::connections::insert_connection(
            &mut *db,
            &store::connections::NewConnection {
                id,
                key: &key,
                issuer: issuer.as_deref(),
                account_id: Some("4242"),
                account_login: Some("octo-alice"),
                scopes: &scopes,
                grant: store::connections::SealedGrant {
                    generation: mcp_connect::vault::FIRST_GENERATION,
                    key_id: vault.key_id(),
                    access_token_ct: &at,
                    refresh_token_ct: rt.as_deref(),
                    id_token_ct: None,
                    token_type: "Bearer",
                    access_expires_at: expires_at,
                },
            },
        )
        .await
        .unwrap();
        assert!(inserted, "a connection for {tenant}/{subject}/{provider} exists already");
        id
    }
}

/// Asserts an error response: status, stable code, and a JSON body shaped as documented.
pub async fn assert_error(r: reqwest::Response, status: u16, code: &str) -> serde_json::Value {
    assert_eq!(r.status().as_u16(), status, "status for {code}");
    let body: serde_json::Value = r.json().await.expect("error body is JSON");
    assert_eq!(body["error"], code, "body: {body}");
    assert!(body["error_description"].as_str().is_some_and(|d| !d.is_empty()));
    body
}

/// A port free on loopback just now (another process may take it before it is used).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}
