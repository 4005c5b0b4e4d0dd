//! Interop against a peer we did not write: panva's OpenID-certified `oidc-provider`
//! (pinned in `tests/interop/package-lock.json`, started here on loopback by
//! `tests/interop/oidc-server.mjs`), as the primary IdP and as a downstream provider. Our
//! dev providers share our reading of the specs; this one does not. They stay for the
//! misbehaviour only they can produce.
//!
//! Needs Node.js and `npm ci --prefix tests/interop` (`.ci/run` does both).

use crate::support::browser::{Browser, absolute, location};
use crate::support::chrome::{Chrome, Setup};
use crate::support::{Options, TestApp, spawn_app_with};
use serde_json::{Value, json};
use std::path::PathBuf;

/// One `oidc-provider` process. It exits when its stdin closes, so a crashed test leaves
/// nothing behind.
pub struct Peer {
    _node: crate::support::node::NodePeer,
    pub issuer: String,
    pub port: u16,
    http: reqwest::Client,
}

impl Peer {
    pub async fn start(config: Value) -> Peer {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
        let how = "run `npm ci --prefix tests/interop`";
        let node =
            crate::support::node::start(&dir, "oidc-server.mjs", &config, "node_modules/oidc-provider", how).await;
        let ready = &node.ready;
        Peer {
            issuer: ready["issuer"].as_str().unwrap().to_owned(),
            port: u16::try_from(ready["port"].as_u64().unwrap()).unwrap(),
            _node: node,
            http: reqwest::Client::new(),
        }
    }

    pub fn origin(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn admin(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut r = self.http.request(method, format!("{}/__admin/{path}", self.origin()));
        if let Some(b) = body {
            r = r.json(&b);
        }
        let r = r.send().await.unwrap();
        assert!(r.status().is_success(), "admin {path}: {}", r.status());
        r.json().await.unwrap()
    }

    pub async fn stats(&self) -> Value {
        self.admin(reqwest::Method::GET, "stats", None).await
    }

    pub async fn rotate_keys(&self) -> Value {
        self.admin(reqwest::Method::POST, "rotate-keys", Some(json!({"keep_old": false}))).await
    }

    pub async fn add_client(&self, id: &str, secret: &str, redirect: String, post_logout: Option<String>) {
        let mut c = json!({"client_id": id, "client_secret": secret, "redirect_uris": [redirect]});
        if let Some(p) = post_logout {
            c["post_logout_redirect_uris"] = json!([p]);
        }
        self.admin(reqwest::Method::POST, "clients", Some(c)).await;
    }

    /// A client registered for `private_key_jwt` (RFC 7523): no secret, its keys at `jwks_uri`.
    pub async fn add_key_client(&self, id: &str, jwks_uri: String, redirect: String) {
        let c = json!({
            "client_id": id,
            "redirect_uris": [redirect],
            "token_endpoint_auth_method": "private_key_jwt",
            "token_endpoint_auth_signing_alg": "ES256",
            "jwks_uri": jwks_uri,
        });
        self.admin(reqwest::Method::POST, "clients", Some(c)).await;
    }

    pub async fn discovery(&self) -> Value {
        let url = format!("{}/.well-known/openid-configuration", self.issuer.trim_end_matches('/'));
        self.http.get(url).send().await.unwrap().json().await.unwrap()
    }

    /// RFC 7662 introspection as the downstream client: is this token still alive here?
    pub async fn token_active(&self, token: &str) -> bool {
        let url = self.discovery().await["introspection_endpoint"].as_str().unwrap().to_owned();
        let r = self
            .http
            .post(url)
            // RFC 6749 §2.3.1: id and secret form-urlencoded, then Basic.
            .basic_auth(enc(PEER_CLIENT), Some(enc(PEER_SECRET)))
            .form(&[("token", token)])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json::<Value>().await.unwrap()["active"] == true
    }

    /// The userinfo endpoint with a downstream access token: its `sub`, or the status.
    pub async fn userinfo(&self, token: &str) -> Result<String, u16> {
        let url = self.discovery().await["userinfo_endpoint"].as_str().unwrap().to_owned();
        let r = self.http.get(url).bearer_auth(token).send().await.unwrap();
        if r.status() != 200 {
            return Err(r.status().as_u16());
        }
        Ok(r.json::<Value>().await.unwrap()["sub"].as_str().unwrap().to_owned())
    }
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

const PEER_CLIENT: &str = "peer-client";
const PEER_SECRET: &str = "peer-secret:with/odd+chars";

/// The service with `idp` as its primary IdP and `provider` as downstream provider `peer`.
pub struct Interop {
    pub app: TestApp,
    pub idp: Peer,
    pub provider: Peer,
}

async fn interop(idp: Value, provider: Value) -> Interop {
    interop_with(idp, provider, |_| String::new()).await
}

/// [`interop`], with more provider entries (TOML) made from the provider peer.
async fn interop_with(idp: Value, provider: Value, more: impl Fn(&Peer) -> String) -> Interop {
    let (idp, provider) = tokio::join!(Peer::start(idp), Peer::start(provider));
    let more = more(&provider);
    let opts = Options {
        idp_issuer: Some(idp.issuer.clone()),
        extra_toml: format!(
            "[providers.peer]\ntemplate = \"oidc\"\ndisplay_name = \"Peer Provider\"\nissuer = \"{}\"\n\
             client_id = \"{PEER_CLIENT}\"\nscopes = [\"openid\"]\naccount_id_field = \"sub\"\n\
             account_login_field = \"preferred_username\"\n{more}",
            provider.issuer
        ),
        patch: vec![(
            "providers = [\"github\", \"gitlab\", \"testp\", \"plainp\", \"deadrev\"]",
            format!(
                "providers = [\"github\", \"gitlab\", \"testp\", \"plainp\", \"deadrev\", \"peer\"{}]",
                regex_lite::Regex::new(r"\[providers\.(\w+)\]")
                    .unwrap()
                    .captures_iter(&more)
                    .map(|c| format!(", \"{}\"", &c[1]))
                    .collect::<String>()
            ),
        )],
        env: vec![
            ("MCP_CONNECT_PROVIDER_PEER_CLIENT_SECRET", PEER_SECRET.to_owned()),
            ("MCP_CONNECT_PROVIDER_PEERPLAIN_CLIENT_SECRET", PEER_SECRET.to_owned()),
            ("MCP_CONNECT_PROVIDER_PEERLOOSE_CLIENT_SECRET", PEER_SECRET.to_owned()),
        ],
        ..Options::default()
    };
    let app = spawn_app_with(opts).await;
    idp.add_client(
        "mcp-connect",
        "idp-secret",
        format!("{}/login/callback", app.base),
        Some(format!("{}/logout/done", app.base)),
    )
    .await;
    provider.add_client(PEER_CLIENT, PEER_SECRET, format!("{}/connect/peer/callback", app.base), None).await;
    for extra in ["peerplain", "peerloose"] {
        let c = format!("{extra}-client");
        provider.add_client(&c, PEER_SECRET, format!("{}/connect/{extra}/callback", app.base), None).await;
    }
    Interop { app, idp, provider }
}

/// Signs in at a peer's login page as `name`, starting at `url` and following the peer's
/// redirects until the browser is sent away from the peer; returns that address.
pub(crate) async fn sign_in_at(b: &Browser, peer: &Peer, url: &str, name: &str) -> String {
    let on_peer = |loc: &str| url::Url::parse(&peer.origin()).unwrap().join(loc).unwrap().to_string();
    let mut next = on_peer(url);
    for _ in 0..10 {
        let r = b.get(&next).await;
        let status = r.status().as_u16();
        let to = if matches!(status, 302 | 303) {
            on_peer(&location(&r))
        } else {
            assert_eq!(status, 200, "the peer's page at {next}");
            let html = r.text().await.unwrap();
            let re = regex_lite::Regex::new(r#"<form id="login-form" method="post" action="([^"]+)""#).unwrap();
            let action = re.captures(&html).unwrap_or_else(|| panic!("no login form at {next}:\n{html}"))[1]
                .replace("&amp;", "&");
            let r = b
                .client
                .post(on_peer(&action))
                .form(&[("username", name), ("decision", "allow")])
                .send()
                .await
                .unwrap();
            assert!(matches!(r.status().as_u16(), 302 | 303), "sign-in answer {}", r.status());
            on_peer(&location(&r))
        };
        if !to.starts_with(&peer.origin()) {
            return to;
        }
        next = to;
    }
    panic!("the peer kept redirecting");
}

/// The whole connect flow over HTTP (cookie jar, every hop followed by hand): sign in at
/// the IdP as `subject`, Connect, sign in at the provider as `upstream`. Returns the
/// callback's answer.
async fn connect(x: &Interop, b: &Browser, url: &str, subject: &str, upstream: &str) -> reqwest::Response {
    connect_to(x, "peer", b, url, subject, upstream).await
}

async fn connect_to(
    x: &Interop,
    provider: &str,
    b: &Browser,
    url: &str,
    subject: &str,
    upstream: &str,
) -> reqwest::Response {
    let r = b.get(url).await;
    assert_eq!(r.status(), 303, "to our sign-in");
    let r = b.get(&absolute(&x.app, &location(&r))).await;
    assert_eq!(r.status(), 303, "to the IdP");
    let back = sign_in_at(b, &x.idp, &location(&r), subject).await;
    assert!(back.starts_with(&format!("{}/login/callback?", x.app.base)), "{back}");
    assert!(back.contains("iss="), "RFC 9207: the IdP names itself in its answer");
    let r = b.get(&back).await;
    assert_eq!(r.status(), 303, "login callback");
    assert_eq!(absolute(&x.app, &location(&r)), url);
    let page = b.get(url).await;
    assert_eq!(page.status(), 200, "consent page");
    let html = page.text().await.unwrap();
    let r = b.consent(&x.app, provider, &html, "connect").await;
    assert_eq!(r.status(), 303, "to the provider");
    let cb = sign_in_at(b, &x.provider, &location(&r), upstream).await;
    assert!(cb.starts_with(&format!("{}/connect/{provider}/callback?", x.app.base)), "{cb}");
    b.get(&cb).await
}

fn peer_config(alg: &str) -> Value {
    json!({"port": 0, "alg": alg})
}

async fn token(x: &Interop, subject: &str, elicitation: Option<&str>) -> Value {
    let mut body = json!({"subject": subject, "provider": "peer"});
    if let Some(id) = elicitation {
        body["elicitation_id"] = json!(id);
    }
    x.app.token_ok(body).await
}

#[tokio::test]
async fn an_independent_openid_provider_as_idp_and_as_provider_connects_alice_in_chromium() {
    let x = interop(peer_config("ES256"), peer_config("PS256")).await;
    assert_eq!(x.idp.discovery().await["id_token_signing_alg_values_supported"], json!(["ES256"]));
    let (id, url) = x.app.elicit("alice", "peer").await;
    let chrome = Chrome::start("interop-connect", Setup::default()).await;
    chrome.goto(&url).await;
    chrome.wait_for_url(&format!("{}/interaction/", x.idp.origin())).await;
    chrome.screenshot("idp-login").await;
    chrome.type_into("input[name=username]", "alice").await;
    chrome.click("button[name=decision][value=allow]").await;
    chrome.wait_for_url(&format!("{}/connect/peer?e={id}", x.app.base)).await;
    let consent = chrome.assert_our_page().await;
    assert!(consent.contains("Peer Provider"), "{consent}");
    chrome.screenshot("consent").await;
    chrome.click("button[name=decision][value=connect]").await;
    chrome.wait_for_url(&format!("{}/interaction/", x.provider.origin())).await;
    chrome.type_into("input[name=username]", "alice-upstream").await;
    chrome.click("button[name=decision][value=allow]").await;
    chrome.wait_for_url(&format!("{}/connect/peer/callback?", x.app.base)).await;
    chrome.assert_our_page().await;
    assert_eq!(chrome.text("h1").await, "Connected");
    chrome.screenshot("connected").await;
    chrome.close().await;
    let t = token(&x, "alice", Some(&id)).await;
    assert_eq!(t["status"], "connected", "{t}");
    assert_eq!(t["account"]["login"], "alice-upstream");
    assert_eq!(x.provider.userinfo(t["access_token"].as_str().unwrap()).await, Ok("alice-upstream".to_owned()));
}

#[tokio::test]
async fn rotating_refresh_tokens_of_an_independent_provider_are_used_once_each() {
    let mut provider = peer_config("RS256");
    provider["access_ttl"] = json!(2);
    let x = interop(peer_config("RS256"), provider).await;
    let (id, url) = x.app.elicit("alice", "peer").await;
    assert_eq!(connect(&x, &Browser::new(), &url, "alice", "alice-up").await.status(), 200);
    // A 2 s access token is always within the refresh margin: each call refreshes, with
    // the refresh token the previous refresh returned.
    let mut seen: Vec<String> = Vec::new();
    for i in 0..4 {
        let t = token(&x, "alice", (i == 0).then_some(id.as_str())).await;
        assert_eq!(t["status"], "connected", "{t}");
        let access = t["access_token"].as_str().unwrap().to_owned();
        assert!(!seen.contains(&access), "a new access token each time");
        assert_eq!(x.provider.userinfo(&access).await, Ok("alice-up".to_owned()));
        seen.push(access);
    }
    let stats = x.provider.stats().await;
    assert_eq!(stats["refresh_token_rotations"], 4, "{stats}");
    assert_eq!(stats["refresh_token_reuse_detected"], 0, "{stats}");
    assert_eq!(stats["token_requests"]["by_grant_type"]["refresh_token"], 4, "{stats}");
}

#[tokio::test]
async fn revoking_a_connection_ends_the_grant_at_an_independent_provider() {
    let x = interop(peer_config("RS256"), peer_config("RS256")).await;
    let (id, url) = x.app.elicit("alice", "peer").await;
    assert_eq!(connect(&x, &Browser::new(), &url, "alice", "alice-up").await.status(), 200);
    let t = token(&x, "alice", Some(&id)).await;
    let access = t["access_token"].as_str().unwrap().to_owned();
    assert!(x.provider.token_active(&access).await);
    let r = x
        .app
        .admin(reqwest::Method::POST, &format!("/connections/{}/revoke", t["connection_id"].as_str().unwrap()), None)
        .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["provider_result"], "revoked", "{body}");
    assert!(!x.provider.token_active(&access).await, "the provider says the token is dead");
    assert_eq!(x.provider.userinfo(&access).await, Err(401));
    assert_eq!(token(&x, "alice", None).await["status"], "connect_required");
}

#[tokio::test]
async fn an_issuer_ending_in_a_slash_is_compared_exactly_in_discovery_rfc9207_and_the_id_token() {
    let mut provider = peer_config("RS256");
    provider["issuer_path"] = json!("/realm/");
    // The same peer twice more: as a plain OAuth 2 provider whose issuer (with its slash)
    // is configured for the RFC 9207 check, and as an OIDC provider configured without the
    // slash, which OpenID Connect Discovery §4.3 says is another issuer.
    let x = interop_with(peer_config("RS256"), provider, |p| {
        let base = p.issuer.trim_end_matches('/');
        format!(
            "[providers.peerplain]\ntemplate = \"oauth2\"\nissuer = \"{}\"\nauthorization_response_iss = true\n\
             authorize_url = \"{base}/auth\"\ntoken_url = \"{base}/token\"\nuserinfo_url = \"{base}/me\"\n\
             client_id = \"peerplain-client\"\nscopes = [\"openid\"]\naccount_id_field = \"sub\"\n\
             [providers.peerloose]\ntemplate = \"oidc\"\nissuer = \"{base}\"\nclient_id = \"peerloose-client\"\n\
             scopes = [\"openid\"]\naccount_id_field = \"sub\"\n",
            p.issuer
        )
    })
    .await;
    assert!(x.provider.issuer.ends_with("/realm/"), "{}", x.provider.issuer);
    let (id, url) = x.app.elicit("alice", "peer").await;
    let r = connect(&x, &Browser::new(), &url, "alice", "alice-up").await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(token(&x, "alice", Some(&id)).await["status"], "connected");
    // RFC 9207 against a configured issuer that ends in a slash.
    let (id, url) = x.app.elicit("alice", "peerplain").await;
    let r = connect_to(&x, "peerplain", &Browser::new(), &url, "alice", "alice-up").await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    assert_eq!(x.app.elicitation_status(&id).await, "completed");
    // Discovery names `…/realm/`; `…/realm` was configured: not the same issuer, refused
    // before a link is made (a retry would not change it).
    let r = x.app.token(&x.app.key, json!({"subject": "alice", "provider": "peerloose"})).await;
    crate::support::assert_error(r, 502, "provider_misconfigured").await;
}

#[tokio::test]
async fn a_signing_key_rotation_at_the_idp_is_followed_at_the_next_sign_in() {
    let x = interop(peer_config("RS256"), peer_config("RS256")).await;
    let (_, url) = x.app.elicit("alice", "peer").await;
    assert_eq!(connect(&x, &Browser::new(), &url, "alice", "alice-up").await.status(), 200);
    // The IdP signs with a new key from now on and publishes only that one; our copy of
    // its JWKS (cached for an hour) does not have it.
    let rotated = x.idp.rotate_keys().await;
    assert_ne!(rotated["kid"], rotated["previous_kid"]);
    let (_, url) = x.app.elicit("bob", "peer").await;
    let r = connect(&x, &Browser::new(), &url, "bob", "bob-up").await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

#[tokio::test]
async fn bob_on_alices_link_signs_out_and_back_in_as_alice_in_chromium() {
    let x = interop(peer_config("RS256"), peer_config("RS256")).await;
    let (id, url) = x.app.elicit("alice", "peer").await;
    let chrome = Chrome::start("interop-switch", Setup::default()).await;
    chrome.goto(&url).await;
    chrome.wait_for_url(&format!("{}/interaction/", x.idp.origin())).await;
    chrome.type_into("input[name=username]", "bob").await;
    chrome.click("button[name=decision][value=allow]").await;
    chrome.wait_for_url(&format!("{}/connect/peer?e={id}", x.app.base)).await;
    assert_eq!(chrome.text("h1").await, "This link was made for another account");
    chrome.screenshot("refused").await;
    chrome.click("#sign-out").await;
    // Signed out here and, through RP-initiated logout, at the IdP; then back to us.
    chrome.wait_for_url(&format!("{}/logout/done", x.app.base)).await;
    chrome.assert_our_page().await;
    chrome.screenshot("signed-out").await;
    chrome.click("#sign-in-again").await;
    // The IdP asks who is signing in instead of signing bob in again.
    chrome.wait_for_url(&format!("{}/interaction/", x.idp.origin())).await;
    chrome.screenshot("choose-account").await;
    chrome.type_into("input[name=username]", "alice").await;
    chrome.click("button[name=decision][value=allow]").await;
    chrome.wait_for_url(&format!("{}/connect/peer?e={id}", x.app.base)).await;
    chrome.find("button[name=decision][value=connect]").await;
    chrome.click("button[name=decision][value=connect]").await;
    chrome.wait_for_url(&format!("{}/interaction/", x.provider.origin())).await;
    chrome.type_into("input[name=username]", "alice-up").await;
    chrome.click("button[name=decision][value=allow]").await;
    chrome.wait_for_url(&format!("{}/connect/peer/callback?", x.app.base)).await;
    assert_eq!(chrome.text("h1").await, "Connected");
    chrome.close().await;
    assert_eq!(token(&x, "alice", Some(&id)).await["status"], "connected");
    let logins = x.idp.stats().await;
    assert_eq!(logins["last_login"], "alice", "{logins}");
}

#[tokio::test]
async fn private_key_jwt_connects_refreshes_and_revokes_at_an_independent_provider_that_refuses_a_secret() {
    let mut provider = peer_config("ES256");
    provider["access_ttl"] = json!(2);
    let jwt = |p: &Peer| {
        format!(
            "[providers.peerjwt]\ntemplate = \"oidc\"\ndisplay_name = \"Peer JWT\"\nissuer = \"{}\"\n\
             client_id = \"peerjwt-client\"\nscopes = [\"openid\"]\naccount_id_field = \"sub\"\n\
             account_login_field = \"preferred_username\"\ntoken_endpoint_auth_method = \"private_key_jwt\"\n",
            p.issuer
        )
    };
    let x = interop_with(peer_config("RS256"), provider, jwt).await;
    let (jwks_uri, redirect) =
        (format!("{}/.well-known/jwks.json", x.app.base), format!("{}/connect/peerjwt/callback", x.app.base));
    // What the provider registers: our public key, fetched from us; no secret of ours.
    let set: Value = x.app.client.get(&jwks_uri).send().await.unwrap().json().await.unwrap();
    assert_eq!(set["keys"].as_array().map(Vec::len), Some(1), "{set}");
    assert!(set["keys"][0].get("d").is_none(), "only the public half: {set}");
    x.provider.add_key_client("peerjwt-client", jwks_uri, redirect).await;

    let (id, url) = x.app.elicit("alice", "peerjwt").await;
    let r = connect_to(&x, "peerjwt", &Browser::new(), &url, "alice", "alice-up").await;
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let body = json!({"subject": "alice", "provider": "peerjwt", "elicitation_id": id});
    let first = x.app.token_ok(body).await;
    assert_eq!(first["status"], "connected", "{first}");
    // A 2 s access token: the next hand-out refreshes again, authenticated the same way.
    let t = x.app.token_ok(json!({"subject": "alice", "provider": "peerjwt"})).await;
    let access = t["access_token"].as_str().unwrap().to_owned();
    assert_ne!(access, first["access_token"].as_str().unwrap(), "refreshed");
    assert_eq!(x.provider.userinfo(&access).await, Ok("alice-up".to_owned()));
    let r = x
        .app
        .admin(reqwest::Method::POST, &format!("/connections/{}/revoke", t["connection_id"].as_str().unwrap()), None)
        .await;
    let revoked: Value = r.json().await.unwrap();
    assert_eq!(revoked["provider_result"], "revoked", "{revoked}");
    assert_eq!(x.provider.userinfo(&access).await, Err(401), "the provider ended the grant");

    let stats = x.provider.stats().await;
    // Within the refresh margin, every hand-out refreshed (the first one too).
    let refreshes = stats["token_requests"]["by_grant_type"]["refresh_token"].as_u64().unwrap_or(0);
    assert!(refreshes >= 2, "{stats}");
    let auth = &stats["client_auth"];
    assert_eq!(auth["token"], json!({"private_key_jwt": 1 + refreshes}), "code and refreshes, no secret: {stats}");
    assert!(auth["revocation"]["private_key_jwt"].as_u64() >= Some(1), "{stats}");
    assert!(auth["revocation"].get("client_secret_basic").is_none(), "{stats}");

    // The provider checks what it is given. A refresh with a grant it does not know shows
    // how far a request got: `invalid_grant` past the client check, `invalid_client` not.
    let token_url = x.provider.discovery().await["token_endpoint"].as_str().unwrap().to_owned();
    let answer = |client: &'static str, auth: Vec<(&'static str, String)>, basic: Option<&'static str>| {
        let token_url = token_url.clone();
        async move {
            let mut form = vec![("grant_type", "refresh_token".to_owned()), ("refresh_token", "unknown".to_owned())];
            form.extend(auth);
            let mut r = reqwest::Client::new().post(token_url);
            r = match basic {
                // RFC 6749 §2.3.1: form-encoded, then Basic.
                Some(secret) => r.basic_auth(enc(client), Some(enc(secret))),
                None => {
                    form.push(("client_id", client.to_owned()));
                    r
                }
            };
            let body: Value = r.form(&form).send().await.unwrap().json().await.unwrap();
            body["error"].as_str().unwrap_or_default().to_owned()
        }
    };
    let keys = x.app.state.resolver.client_keys().unwrap();
    let now = time::OffsetDateTime::now_utc();
    let signed = |aud: String, at: time::OffsetDateTime| {
        let keys = keys.clone();
        async move {
            let a = keys.assertion("peerjwt-client", &aud, at).await.unwrap();
            vec![
                ("client_assertion_type", mcp_connect::keys::client_keys::JWT_BEARER.to_owned()),
                ("client_assertion", a),
            ]
        }
    };
    let ours = signed(token_url.clone(), now).await;
    assert_eq!(answer("peerjwt-client", ours, None).await, "invalid_grant", "our assertion is taken");
    let elsewhere = signed("https://elsewhere.example/token".to_owned(), now).await;
    assert_eq!(answer("peerjwt-client", elsewhere, None).await, "invalid_client", "another audience");
    let expired = signed(token_url.clone(), now - time::Duration::minutes(10)).await;
    assert_eq!(answer("peerjwt-client", expired, None).await, "invalid_client", "expired");
    // A secret: taken from the client registered with one, refused from this one.
    assert_eq!(answer(PEER_CLIENT, Vec::new(), Some(PEER_SECRET)).await, "invalid_grant");
    assert_eq!(answer("peerjwt-client", Vec::new(), Some(PEER_SECRET)).await, "invalid_client");
}
