//! The authorization server of a provider, resolved: for a remote MCP server
//! (`template = "mcp"`) by discovery (`oauth::mcp`) and a client registration of
//! mcp-connect's own there; for every other provider by `oauth::resolve`. Every use of a
//! provider's server (the consent page, Connect, the callback, refresh, revocation) goes
//! through [`provider_server`].
//!
//! How mcp-connect becomes a client of a remote MCP server's authorization server, in the
//! order the MCP authorization spec prefers: a `client_id` configured (registered by
//! hand); a Client ID Metadata Document where the server fetches one (`client_id` is the
//! URL of the document this service serves at `/clients/<provider>`: a public client, PKCE
//! only); else dynamic registration (RFC 7591), stored (`remote_mcp_clients`, the secret
//! sealed) so that every instance and every later refresh uses the same client.

use crate::app::AppState;
use crate::oauth::flow::AuthServer;
use crate::oauth::mcp::{self, Discovered};
use crate::oauth::resolve::ResolveError;
use crate::providers::client_auth::{self, ClientAuth};
use crate::providers::{McpClient, Provider, RemoteMcp, Upstream};
use crate::store::{self, remote_clients::RemoteClientRow};
use secrecy::{ExposeSecret, SecretString};
use std::sync::Arc;
use url::Url;

const SECRET_PURPOSE: &str = "remote_mcp_client_secret";

/// The provider's authorization server, resolved and cached.
pub async fn provider_server(state: &AppState, p: &Provider) -> Result<Arc<AuthServer>, ResolveError> {
    match &p.upstream {
        Upstream::RemoteMcp(m) => state.resolver.provider_with(p, build(state, p, m)).await,
        Upstream::OAuth(_) | Upstream::Typed(_) => state.resolver.provider(&state.outbound, p).await,
    }
}

/// `<public base>/clients/<provider>`: the Client ID Metadata Document's URL, and so the
/// client id.
pub fn client_metadata_url(urls: &crate::app::PublicUrls, p: &Provider) -> Url {
    let mut u = urls.base.clone();
    u.set_path(&format!("/clients/{}", p.id));
    u
}

/// The Client ID Metadata Document of a remote MCP server provider (`None` for another).
pub fn client_metadata(urls: &crate::app::PublicUrls, p: &Provider) -> Option<serde_json::Value> {
    p.resource()?;
    Some(serde_json::json!({
        "client_id": client_metadata_url(urls, p).as_str(),
        "client_name": "mcp-connect",
        "client_uri": urls.base.as_str(),
        "redirect_uris": [urls.provider_redirect_uri(&p.id).as_str()],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }))
}

async fn build(state: &AppState, p: &Provider, m: &RemoteMcp) -> Result<Arc<AuthServer>, ResolveError> {
    let d = mcp::discover(&state.outbound, &m.resource, p.policy.allow_private_endpoints).await?;
    pinned(&state.pool, p, m, &d).await?;
    let redirect = state.urls.provider_redirect_uri(&p.id);
    let stored = store::remote_clients::find(&state.pool, &p.id, &d.server.issuer, redirect.as_str())
        .await
        .map_err(|_| store_fault(p, "read"))?;
    let (client_id, client_secret, client_auth) = if let McpClient::Configured(c) = &m.client {
        let auth = client_auth::choose(c.auth, d.server.auth_methods.as_deref(), c.has_secret())
            .map_err(|e| ResolveError::Invalid(p.id.to_string(), e))?;
        (c.id.clone(), c.secret.clone(), auth)
    } else if let Some(row) = stored {
        // Registered before: kept (the grants made with it refresh with it), even if the
        // server has since begun to read metadata documents.
        opened(&state.keys, p, &d.server.issuer, &redirect, row).await?
    } else if d.server.client_id_metadata_documents {
        (client_metadata_url(&state.urls, p).to_string(), SecretString::from(String::new()), ClientAuth::Public)
    } else if let Some(url) = &d.server.registration_url {
        registered(state, p, &d, url).await?
    } else {
        return Err(ResolveError::Invalid(
            p.id.to_string(),
            "its authorization server takes neither client ID metadata documents nor registrations: configure a \
             client_id registered there"
                .to_owned(),
        ));
    };
    Ok(Arc::new(AuthServer {
        client_id,
        client_secret,
        authorize_url: d.server.authorize_url,
        token_url: d.server.token_url,
        userinfo_url: None,
        revocation_url: d.server.revocation_url,
        end_session_url: None,
        issuer: Some(d.server.issuer),
        iss_parameter_required: m.authorization_response_iss || d.server.iss_parameter_supported,
        jwks: None,
        id_token_algs: Vec::new(),
        clock_skew: p.policy.clock_skew,
        guard: d.guard,
        resource: Some(d.resource),
        scopes_supported: d.scopes_supported,
        client_auth,
        client_keys: state.resolver.client_keys(),
    }))
}

/// The authorization server found is the one pinned for the provider: the one its
/// configuration names (`issuer`), else the first one found. Another is refused (the
/// metadata document changed, or was forged): our client, the person's code and the
/// stored refresh tokens go to the server the grants were made at, or nowhere.
async fn pinned(pool: &crate::store::Db, p: &Provider, m: &RemoteMcp, d: &Discovered) -> Result<(), ResolveError> {
    let refuse = |pinned: &str, how: &str| {
        ResolveError::Invalid(
            p.id.to_string(),
            format!(
                "its authorization server is now {:?}, not {pinned:?} ({how}): refused; if the move is real, name \
                 the new one as the provider's `issuer`",
                d.server.issuer
            ),
        )
    };
    if let Some(configured) = &m.issuer {
        if configured.as_str() != d.server.issuer {
            return Err(refuse(configured.as_str(), "the configuration's issuer"));
        }
        return store::remote_clients::pin_issuer(pool, &p.id, &d.server.issuer, true)
            .await
            .map_err(|_| store_fault(p, "pinned"));
    }
    store::remote_clients::pin_issuer(pool, &p.id, &d.server.issuer, false)
        .await
        .map_err(|_| store_fault(p, "pinned"))?;
    match store::remote_clients::pinned_issuer(pool, &p.id).await {
        Ok(Some(pin)) if pin == d.server.issuer => Ok(()),
        Ok(Some(pin)) => {
            tracing::error!(provider = %p.id, pinned = %pin, found = %d.server.issuer, "a remote MCP server names another authorization server than the one pinned; refused");
            Err(refuse(&pin, "pinned when it was first found"))
        }
        _ => Err(store_fault(p, "pinned")),
    }
}

fn store_fault(p: &Provider, what: &str) -> ResolveError {
    ResolveError::Unavailable(p.id.to_string(), format!("the client registration could not be {what}"))
}

/// What a registration's sealed secret is bound to: its provider, server, redirect URI
/// and client id.
fn binding(provider: &str, issuer: &str, redirect: &str, client_id: &str) -> Vec<u8> {
    [provider, issuer, redirect, client_id].join("\0").into_bytes()
}

/// A stored registration's client id, secret (opened) and authentication method.
async fn opened(
    keys: &crate::keys::Keys,
    p: &Provider,
    issuer: &str,
    redirect: &Url,
    row: RemoteClientRow,
) -> Result<(String, SecretString, ClientAuth), ResolveError> {
    let secret = match (&row.key_id, &row.secret_ct) {
        (Some(key_id), Some(ct)) => {
            let b = binding(p.id.as_str(), issuer, redirect.as_str(), &row.client_id);
            let key = keys.opening(key_id, crate::keys::Scope::Service).await.map_err(|_| store_fault(p, "opened"))?;
            let opened = key.open_aux(SECRET_PURPOSE, &b, ct).map_err(|_| store_fault(p, "opened"))?;
            SecretString::from(String::from_utf8(opened.to_vec()).map_err(|_| store_fault(p, "opened"))?)
        }
        _ => SecretString::from(String::new()),
    };
    // A row of the release before registered asking for HTTP Basic.
    let auth = match row.token_endpoint_auth_method.as_deref() {
        Some(name) => ClientAuth::parse(name).ok_or_else(|| store_fault(p, "read"))?,
        None if secret.expose_secret().is_empty() => ClientAuth::Public,
        None => ClientAuth::Basic,
    };
    // As a registration's answer is checked: a method that sends a secret has one.
    if auth.sends_secret() && secret.expose_secret().is_empty() {
        return Err(store_fault(p, "read"));
    }
    Ok((row.client_id, secret, auth))
}

/// Key rotation: a registration's secret opened with `from` and sealed again with `to`.
pub fn reseal(
    from: &crate::vault::SealKey,
    to: &crate::vault::SealKey,
    row: &store::remote_clients::SealedClientRow,
) -> Result<Vec<u8>, crate::vault::VaultError> {
    let b = binding(row.provider_id.as_str(), &row.issuer, &row.redirect_uri, &row.client_id);
    let plain = from.open_aux(SECRET_PURPOSE, &b, &row.secret_ct)?;
    to.seal_aux(SECRET_PURPOSE, &b, &plain)
}

/// A new registration at `url` for this provider (of the registrations made at once, the
/// first stored is everyone's).
async fn registered(
    state: &AppState,
    p: &Provider,
    d: &Discovered,
    url: &Url,
) -> Result<(String, SecretString, ClientAuth), ResolveError> {
    let redirect = state.urls.provider_redirect_uri(&p.id);
    let r = mcp::register(&state.outbound, d, url, &format!("mcp-connect ({})", p.display_name), &redirect).await?;
    tracing::info!(provider = %p.id, client_id = %r.client_id, token_endpoint_auth_method = r.auth.as_str(), "registered at the remote MCP server's authorization server");
    let bound = binding(p.id.as_str(), &d.server.issuer, redirect.as_str(), &r.client_id);
    let key = state.keys.sealing(crate::keys::Scope::Service).await.map_err(|_| store_fault(p, "sealed"))?;
    let sealed = match &r.client_secret {
        Some(s) => Some(key.seal_aux(SECRET_PURPOSE, &bound, s.as_bytes()).map_err(|_| store_fault(p, "sealed"))?),
        None => None,
    };
    let new = RemoteClientRow {
        client_id: r.client_id.clone(),
        key_id: sealed.as_ref().map(|_| key.key_id().to_owned()),
        secret_ct: sealed,
        token_endpoint_auth_method: Some(r.auth.as_str().to_owned()),
    };
    store::remote_clients::insert(&state.pool, &p.id, &d.server.issuer, redirect.as_str(), &new)
        .await
        .map_err(|_| store_fault(p, "stored"))?;
    let row = store::remote_clients::find(&state.pool, &p.id, &d.server.issuer, redirect.as_str())
        .await
        .map_err(|_| store_fault(p, "read"))?
        .ok_or_else(|| store_fault(p, "read"))?;
    opened(&state.keys, p, &d.server.issuer, &redirect, row).await
}
