//! Test support for crates built on mcp-connect (the client library, MCP servers): a
//! [`Stack`] of a dev identity provider, a dev downstream provider and the real
//! mcp-connect application on a fresh Postgres database, and a [`Browser`] that clicks
//! through the connect flow over HTTP as a person would. Nothing is mocked.
//!
//! Errors are `anyhow` with context rather than panics, so the crate obeys the workspace
//! lints; tests `unwrap()` them.

use anyhow::{Context, Result, anyhow, bail, ensure};
use mcp_connect::config::Config;
use mcp_connect::domain::{KeyScope, TenantId};
use mcp_connect::startup::Application;
use mcp_connect_devproviders::{ClientRegistration, DEV_SUBJECT_GRANT_TYPE, DevProvider, DevProviderConfig, Role};
use secrecy::ExposeSecret;
use sqlx::Connection;
use std::collections::HashMap;
use std::sync::Arc;

/// The tenant the stack registers, and the provider it offers.
pub const TENANT: &str = "acme";
pub const TENANT_NAME: &str = "Acme Assistant";
pub const PROVIDER: &str = "testp";
/// A confidential client of the IdP that may use the dev subject grant, standing in for
/// an MCP client that signed its user in.
pub const MCP_CLIENT_ID: &str = "mcp-test-client";
const MCP_CLIENT_SECRET: &str = "mcp-test-client-secret";
const VAULT_KEYS: &str = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// The Postgres server: `DATABASE_URL` (any database on it) or the local default.
pub fn database_server_url() -> String {
    std::env::var("DATABASE_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

/// Creates an empty database named `mcpc_test_<uuid>` (the CI script drops those) and
/// returns its URL.
pub async fn create_database() -> Result<String> {
    let server = database_server_url();
    let name = format!("mcpc_test_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&server)
        .await
        .with_context(|| "connect to Postgres (is it running on 127.0.0.1:5432 or at DATABASE_URL?)")?;
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).execute(&mut conn).await?;
    let mut url = url::Url::parse(&server).context("DATABASE_URL is not a URL")?;
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}

/// A running IdP, provider and mcp-connect instance.
pub struct Stack {
    /// The primary IdP of mcp-connect; its access tokens are JWTs for `mcp_audience`.
    pub idp: Arc<DevProvider>,
    /// The downstream provider, configured in mcp-connect as [`PROVIDER`].
    pub provider: Arc<DevProvider>,
    /// mcp-connect's public base URL.
    pub connect_base: String,
    /// A server-scope API key of [`TENANT`].
    pub api_key: String,
    pub pool: sqlx::PgPool,
    /// The audience of the IdP's access tokens: the MCP server's resource identifier.
    pub mcp_audience: String,
}

impl Stack {
    /// Starts everything. `mcp_audience` is the resource identifier the MCP server under
    /// test accepts in access tokens.
    pub async fn start(mcp_audience: &str) -> Result<Stack> {
        let db_url = create_database().await?;
        let idp = DevProvider::start(DevProviderConfig {
            display_name: "Test Identity Provider".to_owned(),
            role: Role::IdentityProvider,
            jwt_access_token_audience: Some(mcp_audience.to_owned()),
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
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let base = format!("http://127.0.0.1:{}", listener.local_addr()?.port());
        idp.add_client(ClientRegistration {
            client_id: "mcp-connect".to_owned(),
            client_secret: "idp-secret".to_owned(),
            redirect_uris: vec![format!("{base}/login/callback")],
        });
        idp.add_client(ClientRegistration {
            client_id: MCP_CLIENT_ID.to_owned(),
            client_secret: MCP_CLIENT_SECRET.to_owned(),
            redirect_uris: vec![],
        });
        provider.add_client(ClientRegistration {
            client_id: "testp-client".to_owned(),
            client_secret: "testp-secret".to_owned(),
            redirect_uris: vec![format!("{base}/connect/{PROVIDER}/callback")],
        });
        let env: HashMap<&str, String> = HashMap::from([
            ("MCP_CONNECT_DATABASE_URL", db_url.clone()),
            ("MCP_CONNECT_VAULT_KEYS", VAULT_KEYS.to_owned()),
            ("MCP_CONNECT_IDP_CLIENT_SECRET", "idp-secret".to_owned()),
            ("MCP_CONNECT_PROVIDER_TESTP_CLIENT_SECRET", "testp-secret".to_owned()),
        ]);
        let toml = config_toml(&base, &idp.issuer(), &provider.issuer());
        let config = Config::from_toml(&toml, &|k| env.get(k).cloned()).context("mcp-connect test config")?;
        let app = Application::build_with_listener(config, listener).await?;
        let pool = app.state().pool.clone();
        tokio::spawn(app.run_until_stopped());
        let tenant = TenantId::parse(TENANT).map_err(|e| anyhow!("tenant id: {}", e.0))?;
        let key = mcp_connect::cli::create_api_key(&pool, &tenant, KeyScope::Server, Some("testkit")).await?;
        Ok(Stack {
            idp: Arc::new(idp),
            provider: Arc::new(provider),
            connect_base: base,
            api_key: key.key.expose_secret().to_owned(),
            pool,
            mcp_audience: mcp_audience.to_owned(),
        })
    }

    /// An access token of the IdP for `subject` (the dev subject grant): what an MCP client
    /// holds after its user signed in.
    pub async fn mcp_access_token(&self, subject: &str) -> Result<String> {
        let r = reqwest::Client::new()
            .post(format!("{}/token", self.idp.base_url()))
            .basic_auth(MCP_CLIENT_ID, Some(MCP_CLIENT_SECRET))
            .form(&[("grant_type", DEV_SUBJECT_GRANT_TYPE), ("subject", subject), ("scope", "openid")])
            .send()
            .await?;
        ensure!(r.status().is_success(), "dev subject grant answered {}", r.status());
        let body: serde_json::Value = r.json().await?;
        body["access_token"].as_str().map(str::to_owned).ok_or_else(|| anyhow!("no access_token in {body}"))
    }

    /// The status column of an elicitation, read from the database.
    pub async fn elicitation_status(&self, id: &str) -> Result<String> {
        Ok(sqlx::query_scalar::<_, String>("SELECT status FROM elicitations WHERE id = $1::uuid")
            .bind(id)
            .fetch_one(&self.pool)
            .await?)
    }

    /// Status and cancel reason of each elicitation of `subject`, oldest first.
    pub async fn elicitation_outcomes(&self, subject: &str) -> Result<Vec<(String, Option<String>)>> {
        Ok(sqlx::query_as("SELECT status, cancel_reason FROM elicitations WHERE subject = $1 ORDER BY created_at, id")
            .bind(subject)
            .fetch_all(&self.pool)
            .await?)
    }

    /// How many elicitations and connections exist for `subject`.
    pub async fn counts(&self, subject: &str) -> Result<(i64, i64)> {
        let e = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM elicitations WHERE subject = $1")
            .bind(subject)
            .fetch_one(&self.pool)
            .await?;
        let c = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM connections WHERE subject = $1")
            .bind(subject)
            .fetch_one(&self.pool)
            .await?;
        Ok((e, c))
    }
}

fn config_toml(base: &str, idp: &str, provider: &str) -> String {
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
[[tenants]]
id = "{TENANT}"
display_name = "{TENANT_NAME}"
providers = ["{PROVIDER}"]
[providers.{PROVIDER}]
template = "oidc"
display_name = "Test Provider"
issuer = "{provider}"
client_id = "testp-client"
scopes = ["openid", "profile"]
account_id_field = "id"
account_login_field = "login"
"#
    )
}

/// A person's browser: a cookie jar, no automatic redirects (each hop is checked).
pub struct Browser {
    client: reqwest::Client,
}

fn location(r: &reqwest::Response) -> Result<String> {
    let loc = r.headers().get("location").ok_or_else(|| anyhow!("no Location on a {}", r.status()))?;
    Ok(loc.to_str()?.to_owned())
}

fn form_value(html: &str, name: &str) -> Result<String> {
    let re = regex_lite::Regex::new(&format!(r#"name="{name}" value="([^"]*)""#))?;
    let caps = re.captures(html).ok_or_else(|| anyhow!("no {name} field in the page"))?;
    Ok(caps[1].to_owned())
}

fn absolute(base: &url::Url, loc: &str) -> Result<String> {
    Ok(base.join(loc)?.to_string())
}

impl Browser {
    pub fn new() -> Result<Self> {
        let client =
            reqwest::Client::builder().cookie_store(true).redirect(reqwest::redirect::Policy::none()).build()?;
        Ok(Self { client })
    }

    /// Answers an authorization page (IdP sign-in or provider consent) with the typed name
    /// and the button; returns the redirect back.
    async fn answer_authorize(&self, authorize_url: &str, username: &str, decision: &str) -> Result<String> {
        let page = self.client.get(authorize_url).send().await?;
        ensure!(page.status() == 200, "authorization page answered {}", page.status());
        let url = url::Url::parse(authorize_url)?;
        let mut form: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        form.push(("username".into(), username.into()));
        form.push(("decision".into(), decision.into()));
        let mut post = url.clone();
        post.set_query(None);
        let r = self.client.post(post).form(&form).send().await?;
        ensure!(r.status() == 303, "authorization answer was {}", r.status());
        location(&r)
    }

    /// Opens a connect URL, signing in at the IdP as `subject` if there is no session, and
    /// returns our consent page's HTML.
    pub async fn open_consent(&self, connect_url: &str, subject: &str) -> Result<String> {
        let (status, html) = self.open_page(connect_url, subject).await?;
        ensure!(status == 200, "connect page answered {status}");
        Ok(html)
    }

    /// Opens a connect URL as [`Self::open_consent`] does; returns whatever page we show
    /// (status and HTML), a refusal or an error page too.
    pub async fn open_page(&self, connect_url: &str, subject: &str) -> Result<(u16, String)> {
        let base = url::Url::parse(connect_url)?;
        let mut r = self.client.get(connect_url).send().await?;
        if r.status() == 303 {
            let login = absolute(&base, &location(&r)?)?;
            let r2 = self.client.get(&login).send().await?;
            ensure!(r2.status() == 303, "/login answered {}", r2.status());
            let back = self.answer_authorize(&location(&r2)?, subject, "allow").await?;
            let r3 = self.client.get(&back).send().await?;
            ensure!(r3.status() == 303, "login callback answered {}", r3.status());
            r = self.client.get(absolute(&base, &location(&r3)?)?).send().await?;
        }
        let status = r.status().as_u16();
        Ok((status, r.text().await?))
    }

    async fn click(&self, connect_url: &str, html: &str, decision: &str) -> Result<reqwest::Response> {
        let base = url::Url::parse(connect_url)?;
        let provider = base
            .path_segments()
            .and_then(|mut s| s.nth(1).map(str::to_owned))
            .ok_or_else(|| anyhow!("not a connect URL: {connect_url}"))?;
        let csrf = form_value(html, "csrf")?;
        let e = form_value(html, "e")?;
        let post = base.join(&format!("/connect/{provider}/authorize"))?;
        Ok(self
            .client
            .post(post)
            .form(&[("csrf", csrf.as_str()), ("e", e.as_str()), ("decision", decision)])
            .send()
            .await?)
    }

    /// The whole flow as `subject`: sign in, Connect on our page, allow at the provider as
    /// `upstream`, back to the callback. Fails unless the callback reports success.
    pub async fn connect(&self, connect_url: &str, subject: &str, upstream: &str) -> Result<()> {
        let html = self.open_consent(connect_url, subject).await?;
        let r = self.click(connect_url, &html, "connect").await?;
        ensure!(r.status() == 303, "Connect click answered {}", r.status());
        let callback = self.answer_authorize(&location(&r)?, upstream, "allow").await?;
        let r = self.client.get(&callback).send().await?;
        let status = r.status();
        let html = r.text().await?;
        if status != 200 || !html.contains("Connected") {
            bail!("callback answered {status}");
        }
        Ok(())
    }

    /// Signs in as `subject` and clicks Decline on our consent page.
    pub async fn decline(&self, connect_url: &str, subject: &str) -> Result<()> {
        let html = self.open_consent(connect_url, subject).await?;
        let r = self.click(connect_url, &html, "decline").await?;
        ensure!(r.status().is_success() || r.status().is_redirection(), "Decline click answered {}", r.status());
        Ok(())
    }
}
