//! The one test harness of the workspace. The service's API tests use [`TestApp`] (a fresh
//! database, the real `Application`, dev IdP and provider, keys for two tenants); crates
//! built on mcp-connect (the client library, MCP servers) use the same thing as a
//! [`Stack`], with a [`Browser`] that clicks through the connect flow over HTTP as a person
//! would. Nothing is mocked. Each test's database is dropped when the test ends, and any
//! left by a crashed run are swept at the start of the next ([`db`]).
//!
//! [`Stack`] and [`Browser`] return `anyhow` errors with context (their callers
//! `unwrap()` them); [`TestApp`]'s helpers panic with a message, as assertions do.

use anyhow::{Result, anyhow, bail, ensure};
use mcp_connect_devproviders::{DEV_SUBJECT_GRANT_TYPE, DevProvider};
use std::sync::Arc;

mod app;
pub mod db;
pub mod otlp;
mod wait;

pub use app::*;
pub use db::{TestDatabase, database_server_url, sweep};
pub use wait::{eventually, eventually_ok, poll, poll_blocking};

/// The tenant the stack registers, and the provider it offers.
pub const TENANT: &str = "acme";
pub const TENANT_NAME: &str = "Acme Assistant";
pub const PROVIDER: &str = "testp";

/// The stack's proxy rules for [`PROVIDER`]: `/v1/proxy/testp/userinfo` reaches the dev
/// provider's `/userinfo` as the user, `GET` only, so a client's proxied call has a path to
/// reach and a path and a method the proxy refuses.
const PROXY_RULES: &str = "[providers.testp.proxy]\norigins = [\"{PROVIDER}\"]\npaths = [\"/userinfo\"]\n\
                           methods = [\"GET\"]\n";

/// A running IdP, provider and mcp-connect instance: the [`TestApp`] of the service's own
/// tests, seen through what a client of the service needs.
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
    /// The instance (and its database, dropped with it).
    pub app: TestApp,
}

impl Stack {
    /// Starts everything. `mcp_audience` is the resource identifier the MCP server under
    /// test accepts in access tokens.
    pub async fn start(mcp_audience: &str) -> Result<Stack> {
        let app = TestApp::start(Options {
            mcp_audience: Some(mcp_audience.to_owned()),
            extra_toml: PROXY_RULES.to_owned(),
            ..Options::default()
        })
        .await?;
        Ok(Stack {
            idp: app.idp.clone(),
            provider: app.provider.clone(),
            connect_base: app.base.clone(),
            api_key: app.key.clone(),
            pool: app.pool.sqlx_pool().clone(),
            mcp_audience: mcp_audience.to_owned(),
            app,
        })
    }

    /// An access token of the IdP for `subject` (the dev subject grant): what an MCP client
    /// holds after its user signed in.
    pub async fn mcp_access_token(&self, subject: &str) -> Result<String> {
        let r = reqwest::Client::new()
            .post(format!("{}/token", self.idp.base_url()))
            .basic_auth(MCP_CLIENT_ID, Some(app::MCP_CLIENT_SECRET))
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
