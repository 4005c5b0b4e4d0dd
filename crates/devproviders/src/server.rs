//! [`DevProvider`]: binds 127.0.0.1, serves the endpoints on the current tokio runtime, and
//! gives tests a handle on its switches, stats and grants.

use crate::config::{ClientRegistration, DevProviderConfig};
use crate::keys::SigningKeys;
use crate::state::ProviderState;
use crate::stats::Stats;
use crate::switches::Switches;
use actix_web::dev::{Server, ServerHandle, Service};
use actix_web::middleware::DefaultHeaders;
use actix_web::{App, HttpServer, web};
use std::io;
use std::net::TcpListener;
use time::OffsetDateTime;

/// A running provider. Dropping it stops the server too (without waiting for it).
pub struct DevProvider {
    state: web::Data<ProviderState>,
    handle: ServerHandle,
    task: Option<tokio::task::JoinHandle<io::Result<()>>>,
    port: u16,
}

impl DevProvider {
    /// Generates the signing key, binds `127.0.0.1:<port>` and spawns the server on the
    /// current tokio runtime. Returns once the port is bound, so the URLs work at once.
    pub async fn start(config: DevProviderConfig) -> io::Result<DevProvider> {
        let keys = tokio::task::spawn_blocking(SigningKeys::generate)
            .await
            .map_err(io::Error::other)?
            .map_err(|e| io::Error::other(e.to_string()))?;
        let listener = TcpListener::bind(("127.0.0.1", config.port))?;
        let port = listener.local_addr()?.port();
        let url = config.public_url.clone().unwrap_or_else(|| format!("http://127.0.0.1:{port}"));
        let state = web::Data::new(ProviderState::new(config, url, keys));
        let server = build_server(state.clone(), listener)?;
        let handle = server.handle();
        let task = tokio::spawn(server);
        tracing::info!(port, role = ?state.role, "dev provider listening");
        Ok(DevProvider { state, handle, task: Some(task), port })
    }

    /// `http://127.0.0.1:<port>` (or the configured `public_url`), without a trailing slash.
    pub fn base_url(&self) -> String {
        self.state.issuer.trim_end_matches('/').to_owned()
    }

    /// The port it listens on (behind a `public_url`, not the one in its URLs).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The issuer identifier: the same as [`Self::base_url`].
    pub fn issuer(&self) -> String {
        self.base_url()
    }

    /// The switches the running server reads on every request.
    pub fn switches(&self) -> &Switches {
        &self.state.switches
    }

    /// A snapshot of what the server has seen so far.
    pub fn stats(&self) -> Stats {
        self.state.stats()
    }

    /// Registers another client, or replaces the one with the same id.
    pub fn add_client(&self, client: ClientRegistration) {
        self.state.add_client(client);
    }

    /// Test helper: `(access_token, refresh_token)` for `username`, as if `client_id` had
    /// completed a grant with `scope`. The access token follows the config (JWT or opaque).
    pub fn issue_grant(&self, client_id: &str, username: &str, scope: &str) -> (String, String) {
        self.issue_grant_at(client_id, username, scope, OffsetDateTime::now_utc())
    }

    /// [`Self::issue_grant`] as if done at `now`: a time long past gives an access token
    /// that has expired (`iat` and `exp` in the past), one ahead a token not valid yet.
    pub fn issue_grant_at(
        &self,
        client_id: &str,
        username: &str,
        scope: &str,
        now: OffsetDateTime,
    ) -> (String, String) {
        let grant = self.state.grants().new_grant(client_id, username, scope);
        let access_token = self.state.mint_access_token(grant, client_id, username, scope, now).unwrap_or_else(|e| {
            // Cannot happen with a 2048-bit key; an opaque token still lets the test go on.
            tracing::error!(error = %e, "cannot sign an access token; issuing an opaque one");
            self.state.mint_opaque_access_token(grant, now)
        });
        (access_token, self.state.mint_refresh_token(grant))
    }

    /// Test helper: a JWT with this header `typ` and these claims, signed with the
    /// published key, or forged as `forgery` says (what a resource server must refuse).
    pub fn sign_jwt(&self, typ: &str, claims: &serde_json::Value, forgery: Option<Forgery>) -> String {
        use crate::keys::Signing;
        let (signing, kid) = match &forgery {
            None => (Signing::Published, None),
            Some(Forgery::WrongKey) => (Signing::WrongKey, None),
            Some(Forgery::Unsigned) => (Signing::Unsigned, None),
            Some(Forgery::Hs256(secret)) => (Signing::Hs256(secret), None),
            Some(Forgery::UnknownKid) => (Signing::Published, Some("no-such-key")),
        };
        if matches!(forgery, Some(Forgery::WrongKey))
            && let Err(e) = self.state.keys.prepare_wrong_key()
        {
            tracing::error!(error = %e, "cannot make the wrong key");
        }
        self.state.keys.sign(typ, claims, signing, kid).unwrap_or_else(|e| {
            // Cannot happen with a 2048-bit key; the garbage left fails every check.
            tracing::error!(error = %e, "cannot sign a test JWT");
            String::new()
        })
    }

    /// Revokes every grant of `username`, as an administrator would: their access tokens stop
    /// working and their refresh tokens answer `invalid_grant`.
    pub fn revoke_all_for(&self, username: &str) {
        self.state.grants().revoke_user(username);
    }

    /// Stops the server without waiting for requests in flight (a hanging token request
    /// would otherwise hold it up) and waits until the port is released.
    pub async fn stop(mut self) {
        self.handle.stop(false).await;
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

// Shows where it listens and what it is; grants and keys stay out of logs.
impl std::fmt::Debug for DevProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevProvider")
            .field("base_url", &self.base_url())
            .field("role", &self.state.role)
            .field("display_name", &self.state.display_name)
            .finish_non_exhaustive()
    }
}

impl Drop for DevProvider {
    fn drop(&mut self) {
        if self.task.is_some() {
            // `stop` sends the command before returning its future; not awaiting is fine.
            drop(self.handle.stop(false));
        }
    }
}

fn build_server(state: web::Data<ProviderState>, listener: TcpListener) -> io::Result<Server> {
    let server = HttpServer::new(move || {
        App::new()
            .app_data(state.clone())
            // Tokens and pages are per request and must never be cached (RFC 6749 §5.1).
            .wrap(
                DefaultHeaders::new()
                    .add(("Cache-Control", "no-store"))
                    .add(("Pragma", "no-cache"))
                    .add(("X-Content-Type-Options", "nosniff"))
                    .add(("Referrer-Policy", "no-referrer"))
                    .add((
                        "Content-Security-Policy",
                        "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
                    )),
            )
            // Paths only: queries and bodies carry codes, states and tokens.
            .wrap_fn(|req, srv| {
                let (method, path) = (req.method().clone(), req.path().to_owned());
                let response = srv.call(req);
                async move {
                    let response = response.await?;
                    tracing::debug!(%method, path, status = response.status().as_u16(), "dev provider request");
                    Ok(response)
                }
            })
            .configure(crate::http::configure)
    })
    // One worker is plenty on one machine; handlers never block it (key generation and the
    // failure switches' waits are off-thread or async).
    .workers(1)
    // The embedding process owns the signals; tests and `mcp-connect dev` stop us explicitly.
    .disable_signals()
    .shutdown_timeout(1)
    .listen(listener)?
    .run();
    Ok(server)
}

/// How [`DevProvider::sign_jwt`] forges a token.
#[derive(Debug, Clone)]
pub enum Forgery {
    /// RS256 with a key that is not in the JWKS, under the published kid.
    WrongKey,
    /// `alg: none`, no signature.
    Unsigned,
    /// HS256 keyed with these bytes (the algorithm confusion: a "public" secret).
    Hs256(Vec<u8>),
    /// Signed with the published key, under a kid the JWKS does not list.
    UnknownKid,
}
