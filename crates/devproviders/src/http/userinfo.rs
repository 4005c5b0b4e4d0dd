//! The UserInfo endpoint (OIDC Core §5.3), shaped so that GitHub-style (`id`, `login`) and
//! OIDC-style (`sub`, `preferred_username`) readers both find what they look for.

use crate::crypto::token_hash;
use crate::state::ProviderState;
use actix_web::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;
use sha2::{Digest, Sha256};
use time::OffsetDateTime;

pub(crate) async fn userinfo(state: web::Data<ProviderState>, req: HttpRequest) -> HttpResponse {
    state.record(|stats| stats.userinfo_calls += 1);
    let bearer = req.headers().get(AUTHORIZATION).and_then(|h| h.to_str().ok()).and_then(|h| {
        let (scheme, token) = h.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    });
    let now = OffsetDateTime::now_utc();
    let Some(info) = bearer.and_then(|token| state.grants().access_token(&token_hash(token), now)) else {
        // RFC 6750 §3.1.
        return HttpResponse::Unauthorized()
            .insert_header((WWW_AUTHENTICATE, "Bearer error=\"invalid_token\""))
            .json(json!({"error": "invalid_token"}));
    };
    if let Some(body) = state.switches.snapshot().userinfo_override {
        return HttpResponse::Ok().json(body);
    }
    let username = info.username;
    HttpResponse::Ok().json(json!({
        "sub": username,
        "id": numeric_id(&username),
        "login": username,
        "preferred_username": username,
        "name": username,
        "email": format!("{username}@dev.invalid"),
    }))
}

/// A stable positive number per name, below 2^53 so JavaScript readers keep it exact.
pub(crate) fn numeric_id(username: &str) -> u64 {
    let digest = Sha256::digest(username.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_be_bytes(first) >> 11).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_ids_are_stable_distinct_and_javascript_safe() {
        assert_eq!(numeric_id("alice"), numeric_id("alice"));
        assert_ne!(numeric_id("alice"), numeric_id("bob"));
        assert!(numeric_id("alice") < (1 << 53));
    }
}
