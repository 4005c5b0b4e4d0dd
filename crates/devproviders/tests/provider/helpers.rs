//! Starting a provider and walking through its pages the way a browser would.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mcp_connect_devproviders::{ClientRegistration, DevProvider, DevProviderConfig, Role};
use reqwest::StatusCode;
use reqwest::header::LOCATION;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::time::Duration;
use url::Url;

pub const CLIENT_ID: &str = "test-app";
pub const CLIENT_SECRET: &str = "s3cret:with+odd&chars";
/// Carries a query of its own, to prove parameters are appended, not substituted.
pub const REDIRECT_URI: &str = "http://127.0.0.1:9/callback?tenant=t1";

pub fn client() -> ClientRegistration {
    ClientRegistration {
        client_id: CLIENT_ID.into(),
        client_secret: CLIENT_SECRET.into(),
        redirect_uris: vec![REDIRECT_URI.into()],
    }
}

pub async fn start(role: Role) -> DevProvider {
    start_with(DevProviderConfig { role, ..DevProviderConfig::default() }).await
}

pub async fn start_with(mut config: DevProviderConfig) -> DevProvider {
    config.display_name = match config.role {
        Role::IdentityProvider => "Dev Identity Provider".into(),
        Role::Downstream => "Dev Downstream".into(),
    };
    config.clients.push(client());
    DevProvider::start(config).await.expect("provider starts")
}

/// Redirects are off: every test looks at the provider's Location itself.
pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

pub struct Pkce {
    pub verifier: String,
    pub challenge: String,
}

pub fn pkce() -> Pkce {
    let verifier = URL_SAFE_NO_PAD.encode(rand::random::<[u8; 32]>());
    let challenge = URL_SAFE_NO_PAD.encode(Sha256::digest(verifier.as_bytes()));
    Pkce { verifier, challenge }
}

/// A complete, valid authorization request's parameters.
pub fn authorize_params(pkce: &Pkce, scope: &str) -> Vec<(String, String)> {
    [
        ("response_type", "code"),
        ("client_id", CLIENT_ID),
        ("redirect_uri", REDIRECT_URI),
        ("scope", scope),
        ("state", "st-1 & <odd> \"chars\""),
        ("code_challenge", &pkce.challenge),
        ("code_challenge_method", "S256"),
        ("nonce", "nonce-1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

pub fn authorize_url(provider: &DevProvider, params: &[(String, String)]) -> Url {
    let mut url = Url::parse(&format!("{}/authorize", provider.base_url())).unwrap();
    url.query_pairs_mut().extend_pairs(params);
    url
}

/// GET /authorize, expecting the page; returns its HTML.
pub async fn open_page(provider: &DevProvider, params: &[(String, String)]) -> String {
    let response = http().get(authorize_url(provider, params)).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    response.text().await.unwrap()
}

/// The hidden inputs of the page's form, as a browser would submit them.
pub fn hidden_inputs(html: &str) -> Vec<(String, String)> {
    html.split("<input type=\"hidden\" name=\"")
        .skip(1)
        .map(|rest| {
            let (name, rest) = rest.split_once('"').unwrap();
            let value = rest.split_once("value=\"").unwrap().1.split_once('"').unwrap().0;
            (unescape(name), unescape(value))
        })
        .collect()
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        let (entity, after) = rest[i + 1..].split_once(';').unwrap();
        let c = match entity {
            "amp" => '&',
            "lt" => '<',
            "gt" => '>',
            "quot" => '"',
            "apos" => '\'',
            e if e.starts_with("#x") => char::from_u32(u32::from_str_radix(&e[2..], 16).unwrap()).unwrap(),
            e if e.starts_with('#') => char::from_u32(e[1..].parse().unwrap()).unwrap(),
            e => panic!("unknown entity {e}"),
        };
        out.push(c);
        rest = after;
    }
    out.push_str(rest);
    out
}

/// Submits the page's form with a decision; returns the 303's Location.
pub async fn submit(provider: &DevProvider, html: &str, username: &str, decision: &str) -> Url {
    let mut form = hidden_inputs(html);
    form.push(("username".into(), username.into()));
    form.push(("decision".into(), decision.into()));
    let response = http().post(format!("{}/authorize", provider.base_url())).form(&form).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::SEE_OTHER);
    Url::parse(response.headers()[LOCATION].to_str().unwrap()).unwrap()
}

pub fn query(url: &Url) -> BTreeMap<String, String> {
    url.query_pairs().into_owned().collect()
}

/// Page, "allow", and the code out of the redirect.
pub async fn authorize(provider: &DevProvider, pkce: &Pkce, scope: &str, username: &str) -> String {
    let html = open_page(provider, &authorize_params(pkce, scope)).await;
    let location = submit(provider, &html, username, "allow").await;
    query(&location).remove("code").expect("a code in the redirect")
}

/// POST /token with client_secret_basic, form-urlencoding id and secret as RFC 6749 §2.3.1 says.
pub async fn token_request(provider: &DevProvider, form: &[(&str, &str)]) -> reqwest::Response {
    let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    http()
        .post(format!("{}/token", provider.base_url()))
        .basic_auth(enc(CLIENT_ID), Some(enc(CLIENT_SECRET)))
        .form(form)
        .send()
        .await
        .unwrap()
}

pub async fn exchange(provider: &DevProvider, code: &str, verifier: &str) -> reqwest::Response {
    token_request(
        provider,
        &[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", REDIRECT_URI),
            ("code_verifier", verifier),
        ],
    )
    .await
}

pub async fn refresh(provider: &DevProvider, refresh_token: &str) -> reqwest::Response {
    token_request(provider, &[("grant_type", "refresh_token"), ("refresh_token", refresh_token)]).await
}

/// Asserts an RFC 6749 §5.2 error and returns nothing else.
pub async fn assert_oauth_error(response: reqwest::Response, status: StatusCode, error: &str) {
    assert_eq!(response.status(), status);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], error, "{body}");
}

pub async fn json(response: reqwest::Response) -> serde_json::Value {
    assert_eq!(response.status(), StatusCode::OK);
    response.json().await.unwrap()
}

/// Runs the whole flow and returns the token response.
pub async fn tokens(provider: &DevProvider, scope: &str) -> serde_json::Value {
    let pkce = pkce();
    let code = authorize(provider, &pkce, scope, "alice").await;
    json(exchange(provider, &code, &pkce.verifier).await).await
}

pub async fn userinfo_status(provider: &DevProvider, access_token: &str) -> StatusCode {
    http().get(format!("{}/userinfo", provider.base_url())).bearer_auth(access_token).send().await.unwrap().status()
}

/// The claims of a JWT, without checking anything.
pub fn jwt_claims(jwt: &str) -> serde_json::Value {
    let payload = jwt.split('.').nth(1).unwrap();
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap()
}

pub async fn discover(provider: &DevProvider) -> openidconnect::core::CoreProviderMetadata {
    let issuer = openidconnect::IssuerUrl::new(provider.issuer()).unwrap();
    openidconnect::core::CoreProviderMetadata::discover_async(issuer, &http()).await.unwrap()
}

/// Verifies an ID token the way a relying party does (signature from the discovered JWKS,
/// iss, aud, exp, nonce) and returns its subject or openidconnect's complaint.
pub async fn verify_id_token(provider: &DevProvider, id_token: &str, nonce: &str) -> Result<String, String> {
    use openidconnect::core::{CoreIdToken, CoreIdTokenVerifier};
    use openidconnect::{ClientId, ClientSecret, IssuerUrl, Nonce};
    let metadata = discover(provider).await;
    let verifier = CoreIdTokenVerifier::new_confidential_client(
        ClientId::new(CLIENT_ID.into()),
        ClientSecret::new(CLIENT_SECRET.into()),
        IssuerUrl::new(provider.issuer()).unwrap(),
        metadata.jwks().clone(),
    );
    let token: CoreIdToken = id_token.parse().unwrap();
    token.claims(&verifier, &Nonce::new(nonce.into())).map(|c| c.subject().to_string()).map_err(|e| e.to_string())
}
