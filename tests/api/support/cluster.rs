//! A Kubernetes-style workload issuer for the tests: a real HTTP server on loopback that
//! serves what a cluster's API server does for service-account token issuance
//! (`/.well-known/openid-configuration` and `/openid/v1/jwks`), and mints tokens with the
//! claims a projected service-account token carries (`iss`, `sub`
//! `system:serviceaccount:<ns>:<name>`, `aud`, `exp`, `iat`, `nbf`, `jti`, and the
//! `kubernetes.io` object), signed ES256 with its current key. Its keys rotate as a
//! cluster's do: the new key is published beside the old, or the old one dropped.

use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse, ThumbprintHash};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};

struct Key {
    kid: String,
    der: Vec<u8>,
    jwk: Jwk,
}

fn make_key() -> Key {
    use p256::pkcs8::EncodePrivateKey;
    use rand::RngCore as _;
    let secret = loop {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        if let Ok(s) = p256::SecretKey::from_slice(&bytes) {
            break s;
        }
    };
    let der = secret.to_pkcs8_der().unwrap().as_bytes().to_vec();
    let mut jwk = Jwk::from_encoding_key(&EncodingKey::from_ec_der(&der), Algorithm::ES256).unwrap();
    let kid = jwk.thumbprint(ThumbprintHash::SHA256).unwrap();
    jwk.common.key_id = Some(kid.clone());
    jwk.common.public_key_use = Some(PublicKeyUse::Signature);
    Key { kid, der, jwk }
}

#[derive(Default)]
struct Keys {
    /// The signing key is the last; all are published.
    published: Vec<Key>,
    /// How many times the JWKS was fetched.
    fetched: usize,
}

pub struct Cluster {
    pub issuer: String,
    keys: Arc<Mutex<Keys>>,
    handle: actix_web::dev::ServerHandle,
}

impl Cluster {
    pub async fn start() -> Self {
        let keys = Arc::new(Mutex::new(Keys { published: vec![make_key()], fetched: 0 }));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let issuer = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let (k, iss) = (keys.clone(), issuer.clone());
        let server = actix_web::HttpServer::new(move || {
            let (k, iss) = (k.clone(), iss.clone());
            actix_web::App::new()
                .route(
                    "/.well-known/openid-configuration",
                    actix_web::web::get().to(move || {
                        let iss = iss.clone();
                        async move {
                            // As kube-apiserver serves it.
                            actix_web::HttpResponse::Ok().json(json!({
                                "issuer": iss,
                                "jwks_uri": format!("{iss}/openid/v1/jwks"),
                                "response_types_supported": ["id_token"],
                                "subject_types_supported": ["public"],
                                "id_token_signing_alg_values_supported": ["ES256"],
                            }))
                        }
                    }),
                )
                .route(
                    "/openid/v1/jwks",
                    actix_web::web::get().to(move || {
                        let k = k.clone();
                        async move {
                            let mut keys = k.lock().unwrap();
                            keys.fetched += 1;
                            let set = JwkSet { keys: keys.published.iter().map(|k| k.jwk.clone()).collect() };
                            actix_web::HttpResponse::Ok().json(set)
                        }
                    }),
                )
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Cluster { issuer, keys, handle }
    }

    /// The claims of a projected token of service account `ns`/`name` for `aud`, valid for
    /// `lifetime` seconds from now.
    pub fn claims(&self, ns: &str, name: &str, aud: &str, lifetime: i64) -> Value {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        json!({
            "aud": [aud],
            "exp": now + lifetime,
            "iat": now,
            "nbf": now,
            "iss": self.issuer,
            "jti": uuid::Uuid::new_v4().to_string(),
            "kubernetes.io": {
                "namespace": ns,
                "node": {"name": "node-1", "uid": uuid::Uuid::new_v4().to_string()},
                "pod": {"name": format!("{name}-7d9f8b"), "uid": uuid::Uuid::new_v4().to_string()},
                "serviceaccount": {"name": name, "uid": uuid::Uuid::new_v4().to_string()},
            },
            "sub": format!("system:serviceaccount:{ns}:{name}"),
        })
    }

    /// `claims` signed ES256 with the current key (no `typ`, as Kubernetes signs them).
    pub fn sign(&self, claims: &Value) -> String {
        let keys = self.keys.lock().unwrap();
        let key = keys.published.last().unwrap();
        sign_with(key, claims)
    }

    /// `claims` signed with a key the JWKS does not list.
    pub fn sign_unpublished(&self, claims: &Value) -> String {
        sign_with(&make_key(), claims)
    }

    /// A new signing key, published beside the old ones (`keep_old`) or alone.
    pub fn rotate(&self, keep_old: bool) {
        let mut keys = self.keys.lock().unwrap();
        if !keep_old {
            keys.published.clear();
        }
        keys.published.push(make_key());
    }

    /// The kid of the current key.
    pub fn kid(&self) -> String {
        self.keys.lock().unwrap().published.last().unwrap().kid.clone()
    }

    pub fn jwks_fetches(&self) -> usize {
        self.keys.lock().unwrap().fetched
    }

    pub async fn stop(self) {
        self.handle.stop(false).await;
    }
}

fn sign_with(key: &Key, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(key.kid.clone());
    header.typ = None;
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_ec_der(&key.der)).unwrap()
}

/// `claims` under `alg: none` (no signature) or HS256 keyed with `secret`.
pub fn forged(claims: &Value, hs256_secret: Option<&[u8]>, kid: &str) -> String {
    use base64::Engine as _;
    let b64 = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    match hs256_secret {
        None => {
            let header = json!({"alg": "none", "kid": kid});
            format!("{}.{}.", b64(header.to_string().as_bytes()), b64(claims.to_string().as_bytes()))
        }
        Some(secret) => {
            let mut header = Header::new(Algorithm::HS256);
            header.kid = Some(kid.to_owned());
            jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(secret).unwrap()).unwrap()
        }
    }
}
