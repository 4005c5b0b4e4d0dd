//! A browser for the HTTP-driven flow tests: a cookie jar, no automatic redirects (each
//! hop is asserted), and the clicks a person makes on the IdP's, our and the provider's
//! pages.

use crate::support::HasBase;

pub struct Browser {
    pub client: reqwest::Client,
}

pub fn location(r: &reqwest::Response) -> String {
    r.headers()
        .get("location")
        .unwrap_or_else(|| panic!("no Location on a {}", r.status()))
        .to_str()
        .unwrap()
        .to_owned()
}

/// The value of a hidden form field in a page.
pub fn form_value(html: &str, name: &str) -> String {
    let re = regex_lite::Regex::new(&format!(r#"name="{name}" value="([^"]*)""#)).unwrap();
    re.captures(html).unwrap_or_else(|| panic!("no {name} field in page:\n{html}"))[1].to_owned()
}

/// Absolute URL for a Location that may be a path on the app.
pub fn absolute(app: &impl HasBase, loc: &str) -> String {
    if loc.starts_with('/') { format!("{}{loc}", app.base()) } else { loc.to_owned() }
}

impl Default for Browser {
    fn default() -> Self {
        Self::new()
    }
}

impl Browser {
    pub fn new() -> Self {
        let client =
            reqwest::Client::builder().cookie_store(true).redirect(reqwest::redirect::Policy::none()).build().unwrap();
        Self { client }
    }

    pub async fn get(&self, url: &str) -> reqwest::Response {
        self.client.get(url).send().await.unwrap()
    }

    /// Answers an authorization page (IdP login or provider consent) as a person would:
    /// the form carries the original parameters plus the typed name and the button.
    /// Returns the redirect back to us.
    pub async fn answer_authorize(&self, authorize_url: &str, username: &str, decision: &str) -> String {
        let page = self.get(authorize_url).await;
        assert_eq!(page.status(), 200, "authorization page of {authorize_url}");
        let url = url::Url::parse(authorize_url).unwrap();
        let mut form: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        form.push(("username".into(), username.into()));
        form.push(("decision".into(), decision.into()));
        let mut post = url.clone();
        post.set_query(None);
        let r = self.client.post(post).form(&form).send().await.unwrap();
        assert_eq!(r.status(), 303, "authorization answer");
        location(&r)
    }

    /// Logs in at the IdP as `subject` through `/login`, and follows back to `return_to`.
    pub async fn login(&self, app: &impl HasBase, subject: &str) {
        let r = self.get(&format!("{}/login?return_to=/", app.base())).await;
        assert_eq!(r.status(), 303);
        let back = self.answer_authorize(&location(&r), subject, "allow").await;
        let r = self.get(&back).await;
        assert_eq!(r.status(), 303, "login callback: {}", r.text().await.unwrap());
    }

    /// Opens a connect URL and answers with the page (following a login redirect if the
    /// browser has no session, logging in as `subject`).
    pub async fn open(&self, app: &impl HasBase, connect_url: &str, subject: &str) -> reqwest::Response {
        let r = self.get(connect_url).await;
        if r.status() != 303 {
            return r;
        }
        let login = absolute(app, &location(&r));
        assert!(login.contains("/login?return_to="), "{login}");
        let r = self.get(&login).await;
        assert_eq!(r.status(), 303);
        let back = self.answer_authorize(&location(&r), subject, "allow").await;
        let r = self.get(&back).await;
        assert_eq!(r.status(), 303, "login callback");
        let here = absolute(app, &location(&r));
        assert_eq!(here, connect_url, "login returns to the connect page");
        self.get(&here).await
    }

    /// Clicks a button on our consent page.
    pub async fn consent(
        &self,
        app: &impl HasBase,
        provider: &str,
        consent_html: &str,
        decision: &str,
    ) -> reqwest::Response {
        let csrf = form_value(consent_html, "csrf");
        let e = form_value(consent_html, "e");
        self.client
            .post(format!("{}/connect/{provider}/authorize", app.base()))
            .form(&[("csrf", csrf.as_str()), ("e", e.as_str()), ("decision", decision)])
            .send()
            .await
            .unwrap()
    }

    /// The whole connect flow as `subject`, signing in at the provider as `upstream`.
    /// Returns the callback URL (not yet visited) so tests can replay or tamper with it.
    pub async fn connect_until_callback(
        &self,
        app: &impl HasBase,
        connect_url: &str,
        subject: &str,
        upstream: &str,
    ) -> String {
        let provider = connect_url.split("/connect/").nth(1).unwrap().split('?').next().unwrap().to_owned();
        let page = self.open(app, connect_url, subject).await;
        assert_eq!(page.status(), 200, "consent page");
        let html = page.text().await.unwrap();
        let r = self.consent(app, &provider, &html, "connect").await;
        assert_eq!(r.status(), 303, "connect click");
        self.answer_authorize(&location(&r), upstream, "allow").await
    }

    /// The whole flow, visiting the callback. Returns the callback response.
    pub async fn connect(
        &self,
        app: &impl HasBase,
        connect_url: &str,
        subject: &str,
        upstream: &str,
    ) -> reqwest::Response {
        let cb = self.connect_until_callback(app, connect_url, subject, upstream).await;
        self.get(&cb).await
    }
}
