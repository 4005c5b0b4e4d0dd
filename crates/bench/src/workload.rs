//! Issue 44's row: the cached hand-out authenticated by a workload token (a Kubernetes-style
//! projected service-account token, ES256, with a projected token's claims) against the
//! same hand-out authenticated by the bench tenant's API key, on one instance (cache on).
//!
//! The bench serves the issuer itself (its discovery document and JWKS on loopback); the
//! bench tenant trusts it with one rule. After a warm-up with the key (every connection
//! cached) and one request with the token (verified once, kept until its `exp`), 4-second
//! saturating loops alternate: key, token, key, … [`ROUNDS`] times; each token loop is
//! divided by the mean of the key loops just before and after it, and the ratio is the
//! median of its rounds (as row 14 judges the key stores).

use crate::http1::Target;
use crate::load::{self, Summary};
use crate::phase::Phase;
use crate::progress;
use anyhow::Context;
use serde::Serialize;
use std::time::Duration;

const ROUNDS: usize = 3;
const LOOP: Duration = Duration::from_secs(4);
const AUDIENCE: &str = "mcp-connect-bench";
const SUBJECT: &str = "system:serviceaccount:bench:mcp-server";

#[derive(Debug, Clone, Serialize)]
pub struct WorkloadRun {
    /// The loops in the order they ran: `api_key`, then `workload`, `api_key`, …
    pub loops: Vec<(String, Summary)>,
    /// Each round: the token loop ÷ the mean of the key loops on either side.
    pub rounds: Vec<f64>,
    /// Their median.
    pub ratio: f64,
    /// The bearer's length: the token's against the key's (bytes of every request).
    pub token_bytes: usize,
    pub key_bytes: usize,
}

impl WorkloadRun {
    pub fn errors(&self) -> u64 {
        self.loops.iter().map(|(_, s)| s.errors).sum()
    }
}

/// The issuer: one P-256 key, its discovery document and JWKS on loopback.
struct Issuer {
    url: String,
    der: Vec<u8>,
    kid: String,
    handle: actix_web::dev::ServerHandle,
}

impl Issuer {
    async fn start() -> anyhow::Result<Issuer> {
        use jsonwebtoken::jwk::{Jwk, JwkSet, PublicKeyUse, ThumbprintHash};
        use p256::pkcs8::EncodePrivateKey;
        use rand::RngCore as _;
        let secret = loop {
            let mut b = [0u8; 32];
            rand::rng().fill_bytes(&mut b);
            if let Ok(s) = p256::SecretKey::from_slice(&b) {
                break s;
            }
        };
        let der = secret.to_pkcs8_der()?.as_bytes().to_vec();
        let key = jsonwebtoken::EncodingKey::from_ec_der(&der);
        let mut jwk = Jwk::from_encoding_key(&key, jsonwebtoken::Algorithm::ES256)?;
        let kid = jwk.thumbprint(ThumbprintHash::SHA256)?;
        jwk.common.key_id = Some(kid.clone());
        jwk.common.public_key_use = Some(PublicKeyUse::Signature);
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://127.0.0.1:{}", listener.local_addr()?.port());
        let discovery = serde_json::json!({"issuer": url, "jwks_uri": format!("{url}/openid/v1/jwks")});
        let jwks = serde_json::to_value(JwkSet { keys: vec![jwk] })?;
        let server = actix_web::HttpServer::new(move || {
            let (d, j) = (discovery.clone(), jwks.clone());
            actix_web::App::new()
                .route(
                    "/.well-known/openid-configuration",
                    actix_web::web::get().to(move || {
                        let d = d.clone();
                        async move { actix_web::HttpResponse::Ok().json(d) }
                    }),
                )
                .route(
                    "/openid/v1/jwks",
                    actix_web::web::get().to(move || {
                        let j = j.clone();
                        async move { actix_web::HttpResponse::Ok().json(j) }
                    }),
                )
        })
        .workers(1)
        .disable_signals()
        .listen(listener)?
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Ok(Issuer { url, der, kid, handle })
    }

    /// A projected service-account token's claims, valid for 15 minutes.
    fn token(&self) -> anyhow::Result<String> {
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        let claims = serde_json::json!({
            "aud": [AUDIENCE], "exp": now + 900, "iat": now, "nbf": now, "iss": self.url,
            "jti": uuid::Uuid::new_v4().to_string(), "sub": SUBJECT,
            "kubernetes.io": {
                "namespace": "bench",
                "node": {"name": "node-1", "uid": uuid::Uuid::new_v4().to_string()},
                "pod": {"name": "mcp-server-7d9f8b", "uid": uuid::Uuid::new_v4().to_string()},
                "serviceaccount": {"name": "mcp-server", "uid": uuid::Uuid::new_v4().to_string()},
            },
        });
        let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        header.kid = Some(self.kid.clone());
        Ok(jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_ec_der(&self.der))?)
    }
}

impl Phase<'_> {
    /// The workload row (see the module doc).
    pub async fn workload_identity(&self) -> anyhow::Result<WorkloadRun> {
        let issuer = Issuer::start().await?;
        let out = self.workload_loops(&issuer).await;
        sqlx::query("UPDATE tenants SET workload_issuers = NULL WHERE id = $1")
            .bind(crate::db::TENANT)
            .execute(self.pool)
            .await?;
        issuer.handle.stop(false).await;
        out
    }

    async fn workload_loops(&self, issuer: &Issuer) -> anyhow::Result<WorkloadRun> {
        let (keys, conns, threads) = (self.keys, self.args.concurrency as usize, self.args.client_threads as usize);
        let svc = self.setup.start("workload", true).await?;
        let result = async {
            // Set once the instance runs (its file names the bench tenant without issuers,
            // and a file is the whole truth for its tenants' issuers at start); the
            // instance reads the change from its notification.
            let trusted = serde_json::json!([{
                "name": "cluster", "issuer": issuer.url, "audience": AUDIENCE,
                "rules": [{"claims": {"sub": SUBJECT}, "scope": "server"}],
            }]);
            sqlx::query("UPDATE tenants SET workload_issuers = $2 WHERE id = $1")
                .bind(crate::db::TENANT)
                .bind(&trusted)
                .execute(self.pool)
                .await?;
            let token = issuer.token()?;
            let by_key = Target::token(svc.addr, self.api_key);
            let by_token = Target::token(svc.addr, &token);
            progress(self.started, "workload identity: warm-up with the key, one request with the token");
            let t = by_key.clone();
            let warm = self.load(move || load::sweep(&t, keys, conns, threads)).await?;
            anyhow::ensure!(warm.errors == 0, "warm-up: {}", warm.first_error.unwrap_or_default());
            // Until the instance has read the change (at most 10 s).
            let mut taken = false;
            for _ in 0..50 {
                let t = by_token.clone();
                let s = self.load(move || load::closed_loop(&t, keys, 1, 1, Duration::from_millis(100))).await?;
                if s.errors == 0 {
                    taken = true;
                    break;
                }
                let why = s.first_error.unwrap_or_default();
                anyhow::ensure!(why.contains("invalid_api_key"), "the workload token was refused: {why}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            anyhow::ensure!(taken, "the instance did not take the workload token within 10 s");
            // The token's own sweep: its hand-outs are rows of another caller, and each
            // loop's first hand-out of a connection in a minute opens its row; the key's
            // were opened by the warm-up, so without this the token's loops alone pay for
            // opening 100,000 rows.
            let t = by_token.clone();
            let warm = self.load(move || load::sweep(&t, keys, conns, threads)).await?;
            anyhow::ensure!(warm.errors == 0, "token warm-up: {}", warm.first_error.unwrap_or_default());
            let mut loops = Vec::new();
            let order = std::iter::once(false).chain((0..ROUNDS).flat_map(|_| [true, false]));
            for workload in order {
                let t = if workload { by_token.clone() } else { by_key.clone() };
                let s = self.load(move || load::closed_loop(&t, keys, conns, threads, LOOP)).await?;
                loops.push((if workload { "workload" } else { "api_key" }.to_owned(), s));
            }
            let rounds: Vec<f64> = loops
                .windows(3)
                .filter(|w| w[1].0 == "workload")
                .map(|w| w[1].1.rps / ((w[0].1.rps + w[2].1.rps) / 2.0).max(1e-9))
                .collect();
            let mut sorted = rounds.clone();
            sorted.sort_by(f64::total_cmp);
            let ratio = *sorted.get(sorted.len() / 2).context("no rounds")?;
            anyhow::Ok(WorkloadRun { loops, rounds, ratio, token_bytes: token.len(), key_bytes: self.api_key.len() })
        }
        .await;
        if result.is_err() {
            eprintln!("--- {} (tail) ---\n{}", svc.log_path().display(), svc.log_tail(20).await);
        }
        svc.stop().await;
        result
    }
}
