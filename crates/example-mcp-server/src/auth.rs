//! MCP authorization, resource-server side: every request to `/mcp` carries an access
//! token of the IdP, validated here (an RS256, PS256 or ES256 signature against the IdP's
//! JWKS, `typ` `at+jwt`, `iss`, `aud` = this server's resource identifier, `exp`; RFC 9068
//! §4). The resource identifier is this server's URL (RFC 9728 §1.2). The
//! subject of the MCP call is the token's `sub`, and only that: tool arguments never name
//! the user. A missing or bad token gets `401` with the RFC 9728 metadata pointer.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::RwLock;

/// The subject of a validated access token; put into the request's extensions by
/// [`require_bearer`] and read by the MCP handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject(pub String);

/// The validated access token itself, put beside the [`Subject`]: sent on to mcp-connect
/// as `subject_token`, to prove whose token the server asks for. Never logged.
#[derive(Clone)]
pub struct UserToken(pub mcp_connect_client::SubjectToken);

/// Why a token was refused. The detail goes to the log, never to the client.
#[derive(Debug, thiserror::Error)]
pub enum TokenRejection {
    #[error("not a JWT or not signed with RS256, PS256 or ES256: {0}")]
    Malformed(String),
    #[error("typ is not at+jwt")]
    WrongType,
    #[error("no key with that kid")]
    UnknownKey,
    #[error("rejected: {0}")]
    Invalid(jsonwebtoken::errors::Error),
    #[error("the JWKS could not be fetched: {0}")]
    Jwks(String),
}

#[derive(serde::Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

#[derive(serde::Deserialize)]
struct Claims {
    sub: String,
}

/// The asymmetric algorithms IdPs sign access tokens with; never `none` or HMAC.
pub fn accepted_alg(alg: Algorithm) -> bool {
    matches!(alg, Algorithm::RS256 | Algorithm::PS256 | Algorithm::ES256)
}

/// RFC 9728 §1.2: a protected resource's identifier is an absolute https URL (http on
/// loopback for development) without a fragment.
pub fn check_resource(resource: &str) -> Result<url::Url, String> {
    let u = url::Url::parse(resource).map_err(|e| format!("{resource:?} is not a URL ({e})"))?;
    let loopback = matches!(u.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"));
    match u.scheme() {
        "https" => {}
        "http" if loopback => {}
        _ => return Err(format!("{resource:?} must be an https URL (http on loopback only)")),
    }
    if u.fragment().is_some() || u.host_str().is_none() {
        return Err(format!("{resource:?} must have a host and no fragment"));
    }
    Ok(u)
}

/// Validates access tokens of one issuer for one audience.
pub struct AccessTokenValidator {
    issuer: String,
    audience: String,
    jwks_uri: String,
    http: reqwest::Client,
    keys: RwLock<(JwkSet, Instant)>,
}

/// A kid the cached JWKS lacks triggers a refetch at most this often (key rotation
/// without letting garbage tokens hammer the IdP).
const JWKS_REFRESH_MIN: Duration = Duration::from_secs(30);

impl AccessTokenValidator {
    /// Reads the issuer's metadata (OIDC discovery) and its JWKS. The metadata must name
    /// the same issuer (RFC 8414 §3.3).
    pub async fn discover(issuer: &str, audience: &str) -> anyhow::Result<Self> {
        check_resource(audience).map_err(|e| anyhow::anyhow!("resource: {e}"))?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()?;
        let url = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
        let d: Discovery = http.get(&url).send().await?.error_for_status()?.json().await?;
        anyhow::ensure!(d.issuer == issuer, "discovery names issuer {:?}, expected {issuer:?}", d.issuer);
        let keys = fetch_jwks(&http, &d.jwks_uri).await.map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(Self {
            issuer: issuer.to_owned(),
            audience: audience.to_owned(),
            jwks_uri: d.jwks_uri,
            http,
            keys: RwLock::new((keys, Instant::now())),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn audience(&self) -> &str {
        &self.audience
    }

    /// The token's subject, if the token is genuine, current, and meant for us.
    pub async fn validate(&self, token: &str) -> Result<Subject, TokenRejection> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| TokenRejection::Malformed(e.to_string()))?;
        if !accepted_alg(header.alg) {
            return Err(TokenRejection::Malformed(format!("{:?}", header.alg)));
        }
        let typ = header.typ.as_deref().unwrap_or_default().to_ascii_lowercase();
        if typ != "at+jwt" && typ != "application/at+jwt" {
            return Err(TokenRejection::WrongType);
        }
        let kid = header.kid.ok_or_else(|| TokenRejection::Malformed("no kid".to_owned()))?;
        let key = self.key(&kid).await?;
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[&self.issuer]);
        v.set_audience(&[&self.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        v.leeway = 30;
        v.validate_nbf = true;
        let data = jsonwebtoken::decode::<Claims>(token, &key, &v).map_err(TokenRejection::Invalid)?;
        if data.claims.sub.is_empty() {
            return Err(TokenRejection::Malformed("empty sub".to_owned()));
        }
        Ok(Subject(data.claims.sub))
    }

    async fn key(&self, kid: &str) -> Result<DecodingKey, TokenRejection> {
        {
            let keys = self.keys.read().await;
            if let Some(jwk) = keys.0.find(kid) {
                return DecodingKey::from_jwk(jwk).map_err(TokenRejection::Invalid);
            }
            if keys.1.elapsed() < JWKS_REFRESH_MIN {
                return Err(TokenRejection::UnknownKey);
            }
        }
        let fresh = fetch_jwks(&self.http, &self.jwks_uri).await?;
        let mut keys = self.keys.write().await;
        *keys = (fresh, Instant::now());
        let jwk = keys.0.find(kid).ok_or(TokenRejection::UnknownKey)?;
        DecodingKey::from_jwk(jwk).map_err(TokenRejection::Invalid)
    }
}

async fn fetch_jwks(http: &reqwest::Client, uri: &str) -> Result<JwkSet, TokenRejection> {
    let r = http.get(uri).send().await.map_err(|e| TokenRejection::Jwks(e.to_string()))?;
    let r = r.error_for_status().map_err(|e| TokenRejection::Jwks(e.to_string()))?;
    r.json().await.map_err(|e| TokenRejection::Jwks(e.to_string()))
}

/// What the middleware needs: the validator and where the RFC 9728 metadata lives.
pub struct AuthState {
    pub validator: AccessTokenValidator,
    pub resource_metadata_url: String,
}

/// Axum middleware: a valid bearer token or `401` (RFC 6750 §3, RFC 9728 §5.1).
pub async fn require_bearer(State(auth): State<Arc<AuthState>>, mut req: Request, next: Next) -> Response {
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim().to_owned());
    let Some(token) = token else {
        return unauthorized(&auth, None);
    };
    match auth.validator.validate(&token).await {
        Ok(subject) => {
            req.extensions_mut().insert(subject);
            req.extensions_mut().insert(UserToken(mcp_connect_client::SubjectToken::new(token)));
            next.run(req).await
        }
        Err(e) => {
            tracing::info!(reason = %e, "access token refused");
            unauthorized(&auth, Some("invalid_token"))
        }
    }
}

fn unauthorized(auth: &AuthState, error: Option<&str>) -> Response {
    let mut challenge = format!("Bearer resource_metadata=\"{}\"", auth.resource_metadata_url);
    if let Some(e) = error {
        challenge.push_str(&format!(", error=\"{e}\""));
    }
    let mut r = (StatusCode::UNAUTHORIZED, axum::Json(serde_json::json!({"error": error.unwrap_or("unauthorized")})))
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        r.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    r
}

/// `GET /.well-known/oauth-protected-resource` (RFC 9728): where to get a token for us.
pub async fn protected_resource_metadata(State(auth): State<Arc<AuthState>>) -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({
        "resource": auth.validator.audience(),
        "authorization_servers": [auth.validator.issuer()],
        "bearer_methods_supported": ["header"],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rs256_ps256_and_es256_are_accepted_and_nothing_else() {
        for (alg, ok) in [
            (Algorithm::RS256, true),
            (Algorithm::PS256, true),
            (Algorithm::ES256, true),
            (Algorithm::HS256, false),
            (Algorithm::HS512, false),
            (Algorithm::RS512, false),
            (Algorithm::ES384, false),
            (Algorithm::EdDSA, false),
        ] {
            assert_eq!(accepted_alg(alg), ok, "{alg:?}");
        }
    }

    #[test]
    fn the_resource_must_be_a_url() {
        assert!(check_resource("http://127.0.0.1:8090/mcp").is_ok());
        assert!(check_resource("https://mcp.example.com/mcp").is_ok());
        for bad in [
            "urn:mcp-connect:dev-mcp-server",
            "mcp-server",
            "",
            "http://mcp.example.com/mcp",
            "https://mcp.example.com/mcp#x",
            "ftp://mcp.example.com/",
        ] {
            assert!(check_resource(bad).is_err(), "{bad:?}");
        }
    }
}
