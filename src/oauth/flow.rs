//! The authorization-code flow with PKCE (RFC 6749 §4.1, RFC 7636), shared by the login
//! at the primary IdP and by downstream providers: building the authorization URL,
//! exchanging the code, refreshing, and verifying OIDC ID tokens (OIDC Core §3.1.3.7).

use super::id_token::IdTokenRefusal;
use crate::keys::client_keys::JWT_BEARER;
use crate::net::http::{Outbound, OutboundError};
use oauth2::basic::{BasicErrorResponse, BasicErrorResponseType, BasicRevocationErrorResponse, BasicTokenType};
use oauth2::{
    AuthUrl, AuthorizationCode, Client, CsrfToken, EndpointNotSet, EndpointSet, PkceCodeChallenge, PkceCodeVerifier,
    RedirectUrl, RefreshToken, RequestTokenError, Scope, StandardRevocableToken, StandardTokenResponse, TokenResponse,
    TokenUrl,
};
use openidconnect::core::{CoreIdToken, CoreIdTokenVerifier, CoreJsonWebKeySet, CoreJwsSigningAlgorithm};
use openidconnect::{ClientId, IssuerUrl, Nonce};
use secrecy::{ExposeSecret, SecretString};
use std::time::Duration;
use url::Url;

/// An authorization server, resolved (configuration plus discovery) and ready to use.
#[derive(Debug)]
pub struct AuthServer {
    pub client_id: String,
    pub client_secret: SecretString,
    pub authorize_url: Url,
    pub token_url: Url,
    pub userinfo_url: Option<Url>,
    pub revocation_url: Option<Url>,
    /// OpenID Connect RP-Initiated Logout 1.0: where to end the person's session at the IdP.
    pub end_session_url: Option<Url>,
    /// The issuer: compared with RFC 9207 `iss` and with the ID token's `iss`.
    pub issuer: Option<String>,
    /// RFC 9207 is in force: every authorization response must carry `iss` = `issuer`.
    pub iss_parameter_required: bool,
    /// Signature keys for ID tokens; `Some` exactly when ID tokens are verified.
    pub jwks: Option<CoreJsonWebKeySet>,
    /// The signature algorithms accepted for ID tokens (see [`id_token_algs`]).
    pub id_token_algs: Vec<CoreJwsSigningAlgorithm>,
    /// Tolerance for `exp` and `iat` against our clock.
    pub clock_skew: time::Duration,
    /// The origins its discovery put endpoints on that are reached guarded (see
    /// `net::http`); every request for this server goes through it.
    pub guard: crate::net::http::Guard,
    /// RFC 8707: the resource the tokens are for (a remote MCP server), sent on the
    /// authorization, token and refresh requests.
    pub resource: Option<String>,
    /// The scopes the resource's metadata lists (RFC 9728 `scopes_supported`): asked for
    /// when the connect names none, as the MCP authorization spec says.
    pub scopes_supported: Vec<String>,
    /// How the client authenticates at the token and revocation endpoints.
    pub client_auth: crate::providers::client_auth::ClientAuth,
    /// The service's client signing keys, for `private_key_jwt`.
    pub client_keys: Option<std::sync::Arc<crate::keys::client_keys::ClientKeys>>,
}

/// The asymmetric algorithms real IdPs sign ID tokens with. Never `none`, never HMAC (whose
/// key would be our client secret, known to the IdP and to whoever stole it from us).
const ACCEPTED_ID_TOKEN_ALGS: [CoreJwsSigningAlgorithm; 3] = [
    CoreJwsSigningAlgorithm::RsaSsaPkcs1V15Sha256,
    CoreJwsSigningAlgorithm::RsaSsaPssSha256,
    CoreJwsSigningAlgorithm::EcdsaP256Sha256,
];

/// The algorithms to accept from a server: RS256, PS256 and ES256, narrowed to those its
/// discovery document lists in `id_token_signing_alg_values_supported` where it has one.
pub fn id_token_algs(advertised: Option<&[String]>) -> Vec<CoreJwsSigningAlgorithm> {
    ACCEPTED_ID_TOKEN_ALGS
        .into_iter()
        .filter(|alg| {
            advertised.is_none_or(|list| {
                let name = serde_json::to_value(alg).ok();
                list.iter().any(|a| name.as_ref().and_then(|n| n.as_str()) == Some(a.as_str()))
            })
        })
        .collect()
}

/// The `kid` in a compact JWS header, if any (no signature checked: only to decide whether
/// the JWKS must be fetched again).
pub fn jws_key_id(raw: &str) -> Option<String> {
    use base64::Engine;
    let header = raw.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(header).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    v.get("kid")?.as_str().map(str::to_owned)
}

/// Whether `jwks` holds a key with this id.
pub fn jwks_has_key(jwks: &CoreJsonWebKeySet, kid: &str) -> bool {
    use openidconnect::JsonWebKey;
    jwks.keys().iter().any(|k| k.key_id().is_some_and(|id| id.as_str() == kid))
}

#[derive(Debug, thiserror::Error)]
pub enum FlowError {
    #[error("the grant is no longer valid (invalid_grant)")]
    InvalidGrant,
    #[error("provider temporarily unavailable: {0}")]
    Transient(String),
    #[error("provider answered outside the protocol: {0}")]
    Protocol(String),
    #[error("ID token rejected: {0}")]
    IdToken(super::id_token::IdTokenRefusal),
}

impl FlowError {
    /// A short, stable reason code for audit events and logs.
    pub fn reason(&self) -> &'static str {
        match self {
            FlowError::InvalidGrant => "invalid_grant",
            FlowError::Transient(_) => "provider_unavailable",
            FlowError::Protocol(_) => "provider_protocol_error",
            FlowError::IdToken(r) => r.code(),
        }
    }
}

/// The `id_token` field of a token response (OIDC Core §3.1.3.3).
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct IdTokenField {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id_token: Option<String>,
}

impl std::fmt::Debug for IdTokenField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdTokenField { .. }")
    }
}

impl oauth2::ExtraTokenFields for IdTokenField {}

type ProviderTokenResponse = StandardTokenResponse<IdTokenField, BasicTokenType>;
type CodeClient = Client<
    BasicErrorResponse,
    ProviderTokenResponse,
    oauth2::basic::BasicTokenIntrospectionResponse,
    StandardRevocableToken,
    BasicRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointSet,
>;

/// Tokens from a token endpoint. Every value is a secret.
pub struct TokenSet {
    pub access_token: SecretString,
    pub refresh_token: Option<SecretString>,
    pub id_token: Option<SecretString>,
    pub token_type: String,
    /// `None` when the provider did not say: unknown expiry, not "never expires".
    pub expires_in: Option<Duration>,
    pub scope: Option<String>,
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSet")
            .field("has_refresh_token", &self.refresh_token.is_some())
            .field("has_id_token", &self.id_token.is_some())
            .field("expires_in", &self.expires_in)
            .finish_non_exhaustive()
    }
}

/// What the browser is sent to, and what must be remembered (sealed) until the callback.
pub struct AuthorizeRequest {
    pub url: Url,
    pub state: String,
    pub pkce_verifier: String,
    pub nonce: Option<String>,
}

fn client(server: &AuthServer, redirect_uri: &Url) -> CodeClient {
    use crate::providers::client_auth::ClientAuth;
    let c = Client::new(oauth2::ClientId::new(server.client_id.clone()))
        .set_auth_uri(AuthUrl::from_url(server.authorize_url.clone()))
        .set_token_uri(TokenUrl::from_url(server.token_url.clone()))
        .set_redirect_uri(RedirectUrl::from_url(redirect_uri.clone()));
    let secret = || oauth2::ClientSecret::new(server.client_secret.expose_secret().to_owned());
    match server.client_auth {
        ClientAuth::Basic => c.set_client_secret(secret()),
        ClientAuth::Post => c.set_client_secret(secret()).set_auth_type(oauth2::AuthType::RequestBody),
        // A public client, or one that proves itself with an assertion (added per request):
        // its id in the body, no secret.
        ClientAuth::Public | ClientAuth::PrivateKeyJwt => c.set_auth_type(oauth2::AuthType::RequestBody),
    }
}

/// RFC 7523 §2.2: for `private_key_jwt`, a fresh assertion naming us, for `endpoint`: the
/// URL the request goes to (the token endpoint, RFC 7523 §3's audience; the revocation
/// endpoint for a revocation). Bound to the one endpoint that receives it, an assertion is
/// no use anywhere else: a server whose metadata names another server's token endpoint
/// beside its own revocation endpoint gets nothing it can replay there.
async fn client_assertion(server: &AuthServer, endpoint: &Url) -> Result<Option<String>, FlowError> {
    use crate::providers::client_auth::ClientAuth;
    if server.client_auth != ClientAuth::PrivateKeyJwt {
        return Ok(None);
    }
    let keys = server.client_keys.as_ref().ok_or_else(|| FlowError::Protocol("no client signing key".to_owned()))?;
    let now = time::OffsetDateTime::now_utc();
    match keys.assertion(&server.client_id, endpoint.as_str(), now).await {
        Ok(a) => Ok(Some(a)),
        // The key is sealed: a key store or database that does not answer is an outage.
        Err(e) if e.is_transient() => Err(FlowError::Transient(format!("client assertion: {e}"))),
        Err(e) => Err(FlowError::Protocol(format!("client assertion: {e}"))),
    }
}

/// Builds the authorization URL with a 256-bit state, PKCE S256 and, for OIDC, a nonce.
pub fn authorize(
    server: &AuthServer,
    redirect_uri: &Url,
    scope: &str,
    extra_params: &[(String, String)],
    oidc: bool,
) -> AuthorizeRequest {
    let state = crate::crypto::random_token(32);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256_len(64);
    let nonce = oidc.then(|| crate::crypto::random_token(32));
    let c = client(server, redirect_uri);
    let state_for_url = state.clone();
    let mut req = c.authorize_url(move || CsrfToken::new(state_for_url)).set_pkce_challenge(challenge);
    if !scope.is_empty() {
        // Joined by the caller with the provider's separator (Slack uses commas).
        req = req.add_scope(Scope::new(scope.to_owned()));
    }
    if let Some(n) = &nonce {
        req = req.add_extra_param("nonce", n.clone());
    }
    for (k, v) in extra_params {
        req = req.add_extra_param(k.clone(), v.clone());
    }
    if let Some(r) = &server.resource {
        req = req.add_extra_param("resource", r.clone());
    }
    let (url, _) = req.url();
    AuthorizeRequest { url, state, pkce_verifier: verifier.secret().to_owned(), nonce }
}

/// RFC 9207 §2.4: an `iss` that is present is compared with the issuer (exactly, as a
/// string) whether or not the server advertises support; where the server does advertise
/// it (or the configuration says so), a missing `iss` is a mix-up attempt too.
pub fn check_iss(server: &AuthServer, iss: Option<&str>) -> Result<(), &'static str> {
    check_iss_parameter(server.issuer.as_deref(), server.iss_parameter_required, iss)
}

/// [`check_iss`] on its inputs alone.
pub fn check_iss_parameter(expected: Option<&str>, required: bool, iss: Option<&str>) -> Result<(), &'static str> {
    match (iss, expected) {
        (Some(got), Some(expected)) if got == expected => Ok(()),
        (Some(_), Some(_)) => Err("iss_mismatch"),
        // Nothing to compare with: refused where the parameter is required.
        (Some(_), None) | (None, None) if required => Err("issuer_unknown"),
        (None, Some(_)) if required => Err("iss_missing"),
        _ => Ok(()),
    }
}

fn map_token_error<E: std::error::Error>(e: RequestTokenError<E, BasicErrorResponse>) -> FlowError {
    match e {
        RequestTokenError::ServerResponse(r) => match r.error() {
            BasicErrorResponseType::InvalidGrant => FlowError::InvalidGrant,
            BasicErrorResponseType::Extension(code) if code == "temporarily_unavailable" || code == "server_error" => {
                FlowError::Transient(code.clone())
            }
            other => {
                FlowError::Protocol(server_error_answer(other.as_ref(), r.error_description().map(String::as_str)))
            }
        },
        RequestTokenError::Request(e) => FlowError::Transient(e.to_string()),
        // A body that is not a token response: commonly a 5xx page from a proxy.
        RequestTokenError::Parse(_, _) => FlowError::Transient("unparseable token response".to_owned()),
        RequestTokenError::Other(s) => FlowError::Protocol(s),
    }
}

/// An authorization server's error answer (RFC 6749 §5.2) as the log shows it: its code and
/// description, each cut short and stripped of control characters (a description is the
/// server's text: it names a field, never one of our secrets, which the server does not
/// echo; a line break in it would forge a log line).
pub fn server_error_answer(code: &str, description: Option<&str>) -> String {
    // A server that echoes what it was sent (a code, a refresh token, a secret) would put it
    // in our log: any run of 16 or more token characters is left out.
    let clean = |s: &str, max: usize| {
        let kept: String = s.chars().filter(|c| !c.is_control()).take(max).collect();
        let token_char = |c: char| c.is_ascii_alphanumeric() || "-._~+/=".contains(c);
        let mut out = String::with_capacity(kept.len());
        let mut run = String::new();
        for c in kept.chars().chain(std::iter::once(' ')) {
            if token_char(c) {
                run.push(c);
                continue;
            }
            out.push_str(if run.len() >= 16 { "[…]" } else { &run });
            run.clear();
            out.push(c);
        }
        out.pop();
        out
    };
    match description {
        Some(d) => format!("error response {} ({:?})", clean(code, 64), clean(d, 200)),
        None => format!("error response {}", clean(code, 64)),
    }
}

fn token_set(r: ProviderTokenResponse) -> TokenSet {
    TokenSet {
        access_token: SecretString::from(r.access_token().secret().to_owned()),
        refresh_token: r.refresh_token().map(|t| SecretString::from(t.secret().to_owned())),
        id_token: r.extra_fields().id_token.clone().map(SecretString::from),
        token_type: "Bearer".to_owned(),
        expires_in: r.expires_in(),
        scope: r.scopes().map(|s| s.iter().map(|x| x.as_str()).collect::<Vec<_>>().join(" ")),
    }
}

/// Exchanges an authorization code with the PKCE verifier.
pub async fn exchange_code(
    server: &AuthServer,
    http: &Outbound,
    redirect_uri: &Url,
    code: &str,
    pkce_verifier: &str,
) -> Result<TokenSet, FlowError> {
    let c = client(server, redirect_uri);
    let http = http.with_guard(&server.guard);
    let mut req = c
        .exchange_code(AuthorizationCode::new(code.to_owned()))
        .set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier.to_owned()));
    if let Some(r) = &server.resource {
        req = req.add_extra_param("resource", r.clone());
    }
    if let Some(a) = client_assertion(server, &server.token_url).await? {
        req = req.add_extra_param("client_assertion_type", JWT_BEARER).add_extra_param("client_assertion", a);
    }
    let resp = req.request_async(&http.as_client()).await.map_err(map_token_error::<OutboundError>)?;
    Ok(token_set(resp))
}

/// Uses a refresh token (RFC 6749 §6).
pub async fn refresh(
    server: &AuthServer,
    http: &Outbound,
    redirect_uri: &Url,
    refresh_token: &SecretString,
) -> Result<TokenSet, FlowError> {
    let c = client(server, redirect_uri);
    let http = http.with_guard(&server.guard);
    let rt = RefreshToken::new(refresh_token.expose_secret().to_owned());
    let mut req = c.exchange_refresh_token(&rt);
    // Without it a server of several resources answers `invalid_target`, or a token for
    // another audience.
    if let Some(r) = &server.resource {
        req = req.add_extra_param("resource", r.clone());
    }
    if let Some(a) = client_assertion(server, &server.token_url).await? {
        req = req.add_extra_param("client_assertion_type", JWT_BEARER).add_extra_param("client_assertion", a);
    }
    let resp = req.request_async(&http.as_client()).await.map_err(map_token_error::<OutboundError>)?;
    Ok(token_set(resp))
}

/// RFC 7009: revokes each token at the server's revocation endpoint, in the order given
/// (the refresh token first: revoking it ends the whole grant at most providers). Returns
/// what the provider did, for the audit trail: `revoked`, `no_revocation_endpoint`, or
/// `failed: <what>` (never a token).
pub async fn revoke_tokens(server: &AuthServer, http: &Outbound, tokens: &[(&'static str, &SecretString)]) -> String {
    let Some(url) = &server.revocation_url else { return "no_revocation_endpoint".to_owned() };
    let http = http.with_guard(&server.guard);
    let mut failures = Vec::new();
    for (hint, token) in tokens {
        // One assertion per request (a server may refuse a `jti` it saw).
        let assertion = match client_assertion(server, url).await {
            Ok(a) => a,
            Err(e) => {
                failures.push(format!("{hint}: {e}"));
                continue;
            }
        };
        let credential = assertion.as_deref().unwrap_or(server.client_secret.expose_secret());
        let (form, basic) = server.client_auth.form(
            &server.client_id,
            credential,
            vec![("token", token.expose_secret()), ("token_type_hint", hint)],
        );
        let sent = http.post_form(url, basic, &form).await;
        // RFC 7009 §2.2: 200 whether or not the token was still valid.
        match sent {
            Ok(200) => {}
            Ok(status) => failures.push(format!("{hint}: HTTP {status}")),
            Err(e) => failures.push(format!("{hint}: {e}")),
        }
    }
    if failures.is_empty() { "revoked".to_owned() } else { format!("failed: {}", failures.join("; ")) }
}

/// The tokens of a fresh token response in revocation order (refresh token first).
pub fn revocation_order(tokens: &TokenSet) -> Vec<(&'static str, &SecretString)> {
    let mut out = Vec::with_capacity(2);
    if let Some(rt) = &tokens.refresh_token {
        out.push(("refresh_token", rt));
    }
    out.push(("access_token", &tokens.access_token));
    out
}

/// The claims of a verified ID token that the flow uses.
#[derive(Debug, Clone)]
pub struct VerifiedIdToken {
    pub subject: String,
    pub issuer: String,
}

/// Verifies an ID token (OIDC Core §3.1.3.7) as of `now`: signature against the server's
/// JWKS with an accepted algorithm, `iss` exactly, `aud` containing our client id and no
/// untrusted other audience, `azp` (when present, or required by several audiences) equal
/// to our client id, `exp` and `iat` within the clock skew, and `nonce`.
pub fn verify_id_token(
    server: &AuthServer,
    raw: &SecretString,
    nonce: &str,
    now: time::OffsetDateTime,
) -> Result<VerifiedIdToken, FlowError> {
    let (Some(issuer), Some(jwks)) = (&server.issuer, &server.jwks) else {
        return Err(FlowError::IdToken(IdTokenRefusal::NotVerifiable));
    };
    if server.id_token_algs.is_empty() {
        return Err(FlowError::IdToken(IdTokenRefusal::NotVerifiable));
    }
    let issuer_url = IssuerUrl::new(issuer.clone()).map_err(|_| FlowError::IdToken(IdTokenRefusal::NotVerifiable))?;
    let to_chrono = |t: time::OffsetDateTime| {
        chrono::DateTime::from_timestamp(t.unix_timestamp(), t.nanosecond())
            .ok_or(FlowError::IdToken(IdTokenRefusal::Other))
    };
    // exp: valid while `now - skew < exp`. iat: not later than `now + skew`.
    let (lenient_now, latest_iat) = (to_chrono(now - server.clock_skew)?, to_chrono(now + server.clock_skew)?);
    // openidconnect reports a refused `iat` as `Expired`; this tells the two apart.
    let iat_refused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = iat_refused.clone();
    let verifier =
        CoreIdTokenVerifier::new_public_client(ClientId::new(server.client_id.clone()), issuer_url, jwks.clone())
            .set_allowed_algs(server.id_token_algs.clone())
            .set_time_fn(move || lenient_now)
            .set_issue_time_verifier_fn(move |iat| {
                if iat > latest_iat {
                    seen.store(true, std::sync::atomic::Ordering::Relaxed);
                    Err(format!("issued in the future ({iat})"))
                } else {
                    Ok(())
                }
            });
    let token: CoreIdToken = raw.expose_secret().parse().map_err(|_| FlowError::IdToken(IdTokenRefusal::Malformed))?;
    let claims = token.claims(&verifier, &Nonce::new(nonce.to_owned())).map_err(|e| {
        FlowError::IdToken(IdTokenRefusal::of(&e, iat_refused.load(std::sync::atomic::Ordering::Relaxed)))
    })?;
    check_authorized_party(&server.client_id, claims.audiences().len(), claims.authorized_party().map(|a| a.as_str()))
        .map_err(|_| FlowError::IdToken(IdTokenRefusal::Azp))?;
    Ok(VerifiedIdToken { subject: claims.subject().as_str().to_owned(), issuer: claims.issuer().as_str().to_owned() })
}

/// OIDC Core §3.1.3.7 steps 4-5, which openidconnect leaves to its users: an `azp` that is
/// present must be our client id, and a token for several audiences must name one.
pub fn check_authorized_party(client_id: &str, audiences: usize, azp: Option<&str>) -> Result<(), &'static str> {
    match azp {
        Some(a) if a == client_id => Ok(()),
        Some(_) => Err("azp is another client"),
        None if audiences > 1 => Err("several audiences and no azp"),
        None => Ok(()),
    }
}

/// OIDC Core §5.3.2: the `sub` of a UserInfo answer must be exactly the ID token's `sub`
/// (otherwise the answer may be about someone else, and must not be used).
pub fn check_userinfo_subject(id_token_subject: &str, userinfo: &serde_json::Value) -> Result<(), &'static str> {
    match userinfo.get("sub") {
        None => Err("userinfo_without_sub"),
        Some(serde_json::Value::String(s)) if s == id_token_subject => Ok(()),
        Some(_) => Err("userinfo_sub_mismatch"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(iss_required: bool) -> AuthServer {
        AuthServer {
            client_id: "c".into(),
            client_secret: SecretString::from("s"),
            authorize_url: Url::parse("https://p.example/authorize").unwrap(),
            token_url: Url::parse("https://p.example/token").unwrap(),
            userinfo_url: None,
            revocation_url: None,
            end_session_url: None,
            issuer: Some("https://p.example".into()),
            iss_parameter_required: iss_required,
            jwks: None,
            id_token_algs: id_token_algs(None),
            clock_skew: time::Duration::seconds(60),
            guard: crate::net::http::Guard::default(),
            resource: None,
            scopes_supported: Vec::new(),
            client_auth: crate::providers::client_auth::ClientAuth::Basic,
            client_keys: None,
        }
    }

    #[test]
    fn the_authorize_url_carries_state_s256_challenge_nonce_and_extras() {
        let s = server(false);
        let r = authorize(
            &s,
            &Url::parse("https://c.example/cb").unwrap(),
            "a b",
            &[("access_type".into(), "offline".into())],
            true,
        );
        let q: std::collections::HashMap<_, _> = r.url.query_pairs().into_owned().collect();
        assert_eq!(q["state"], r.state);
        assert_eq!(r.state.len(), 43);
        assert_eq!(q["code_challenge_method"], "S256");
        assert_ne!(q["code_challenge"], r.pkce_verifier);
        assert_eq!(q["redirect_uri"], "https://c.example/cb");
        assert_eq!(q["scope"], "a b");
        assert_eq!(q["nonce"], r.nonce.clone().unwrap());
        assert_eq!(q["access_type"], "offline");
        assert_eq!(q["response_type"], "code");
    }

    #[test]
    fn iss_is_checked_whenever_present_and_required_where_advertised() {
        assert_eq!(check_iss(&server(false), None), Ok(()));
        assert_eq!(check_iss(&server(true), Some("https://p.example")), Ok(()));
        assert_eq!(check_iss(&server(true), None), Err("iss_missing"));
        assert_eq!(check_iss(&server(true), Some("https://evil.example")), Err("iss_mismatch"));
        // RFC 9207 §2.4: present means compared, advertised or not.
        assert_eq!(check_iss(&server(false), Some("https://evil.example")), Err("iss_mismatch"));
        assert_eq!(check_iss(&server(false), Some("https://p.example")), Ok(()));
    }

    #[test]
    fn a_servers_error_answer_is_logged_cleaned_and_without_anything_token_like() {
        assert_eq!(
            server_error_answer("invalid_request", Some("client_id: expected string")),
            "error response invalid_request (\"client_id: expected string\")"
        );
        let echoed =
            server_error_answer("invalid_grant", Some("refresh token rt_8f3kQ2xZ9vLmN0pA7sW1 is unknown\nforged"));
        assert!(!echoed.contains("rt_8f3kQ2xZ9vLmN0pA7sW1") && !echoed.contains('\n'), "{echoed}");
        assert!(echoed.contains("refresh token […] is unknown"), "{echoed}");
        assert_eq!(server_error_answer("x", None), "error response x");
    }

    #[test]
    fn iss_is_compared_exactly_as_a_string() {
        type Case<'a> = (Option<&'a str>, bool, Option<&'a str>, Result<(), &'a str>);
        let cases: &[Case] = &[
            (Some("https://p.example/"), true, Some("https://p.example/"), Ok(())),
            (Some("https://p.example/"), true, Some("https://p.example"), Err("iss_mismatch")),
            (Some("https://p.example"), false, Some("https://p.example/"), Err("iss_mismatch")),
            (Some("https://p.example"), false, Some("HTTPS://p.example"), Err("iss_mismatch")),
            (Some("https://p.example"), false, Some(""), Err("iss_mismatch")),
            (None, true, Some("https://p.example"), Err("issuer_unknown")),
            (None, true, None, Err("issuer_unknown")),
            (None, false, Some("https://p.example"), Ok(())),
            (None, false, None, Ok(())),
        ];
        for (expected, required, got, want) in cases {
            assert_eq!(check_iss_parameter(*expected, *required, *got), *want, "{expected:?} {required} {got:?}");
        }
    }

    #[test]
    fn only_rs256_ps256_and_es256_are_accepted_as_advertised() {
        use CoreJwsSigningAlgorithm::*;
        let list = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let cases: Vec<(Option<Vec<String>>, Vec<CoreJwsSigningAlgorithm>)> = vec![
            (Option::None, vec![RsaSsaPkcs1V15Sha256, RsaSsaPssSha256, EcdsaP256Sha256]),
            (Some(list(&["RS256"])), vec![RsaSsaPkcs1V15Sha256]),
            (Some(list(&["ES256", "PS256"])), vec![RsaSsaPssSha256, EcdsaP256Sha256]),
            (Some(list(&["none", "HS256", "RS256"])), vec![RsaSsaPkcs1V15Sha256]),
            (Some(list(&["none", "HS256", "HS512"])), vec![]),
            (Some(list(&["RS512", "ES384", "EdDSA"])), vec![]),
            (Some(list(&[])), vec![]),
        ];
        for (advertised, want) in cases {
            assert_eq!(id_token_algs(advertised.as_deref()), want, "{advertised:?}");
        }
    }

    #[test]
    fn azp_must_be_our_client_when_present_or_when_there_are_several_audiences() {
        let cases = [
            (1, None, Ok(())),
            (1, Some("c"), Ok(())),
            (3, Some("c"), Ok(())),
            (1, Some("other"), Err("azp is another client")),
            (2, Some("other"), Err("azp is another client")),
            (2, None, Err("several audiences and no azp")),
        ];
        for (auds, azp, want) in cases {
            assert_eq!(check_authorized_party("c", auds, azp), want, "{auds} {azp:?}");
        }
    }

    #[test]
    fn the_kid_is_read_from_a_jws_header_only() {
        use base64::Engine;
        let enc = |v: serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        let jwt =
            format!("{}.{}.sig", enc(serde_json::json!({"alg": "ES256", "kid": "k2"})), enc(serde_json::json!({})));
        assert_eq!(jws_key_id(&jwt).as_deref(), Some("k2"));
        let no_kid = format!("{}.e30.sig", enc(serde_json::json!({"alg": "RS256"})));
        assert_eq!(jws_key_id(&no_kid), None);
        assert_eq!(jws_key_id("not a jwt"), None);
        assert_eq!(jws_key_id(""), None);
    }

    #[test]
    fn the_userinfo_subject_must_be_the_id_tokens() {
        use serde_json::json;
        let cases = [
            (json!({"sub": "u1", "login": "x"}), Ok(())),
            (json!({"sub": "u2"}), Err("userinfo_sub_mismatch")),
            (json!({"sub": "U1"}), Err("userinfo_sub_mismatch")),
            (json!({"sub": "u1 "}), Err("userinfo_sub_mismatch")),
            (json!({"sub": 1}), Err("userinfo_sub_mismatch")),
            (json!({"sub": null}), Err("userinfo_sub_mismatch")),
            (json!({"id": "u1"}), Err("userinfo_without_sub")),
        ];
        for (info, want) in cases {
            assert_eq!(check_userinfo_subject("u1", &info), want, "{info}");
        }
    }
}
