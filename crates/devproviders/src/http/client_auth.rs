//! Client authentication for `/token` and `/revoke` (RFC 6749 §2.3.1), as an extractor: a
//! handler that takes [`ClientForm`] cannot run for an unauthenticated client.

use super::error::OAuthError;
use super::params::Params;
use crate::config::ClientRegistration;
use crate::crypto::constant_time_eq;
use crate::state::ProviderState;
use actix_web::dev::Payload;
use actix_web::http::header::{AUTHORIZATION, HeaderValue};
use actix_web::{FromRequest, HttpRequest, web};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use std::future::Future;
use std::pin::Pin;

/// A form body from a client whose credentials checked out.
pub(crate) struct ClientForm {
    pub client: ClientRegistration,
    pub params: Params,
}

impl FromRequest for ClientForm {
    type Error = OAuthError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, Self::Error>>>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let req = req.clone();
        let form = web::Form::<Vec<(String, String)>>::from_request(&req, payload);
        Box::pin(async move {
            let web::Form(pairs) = form
                .await
                .map_err(|_| OAuthError::invalid_request("the body must be application/x-www-form-urlencoded"))?;
            let params =
                Params::from_pairs(pairs).map_err(|_| OAuthError::invalid_request("a parameter is repeated"))?;
            let state = req.app_data::<web::Data<ProviderState>>().ok_or_else(OAuthError::server_error)?;
            let client = authenticate(state, req.headers().get(AUTHORIZATION), &params)?;
            Ok(ClientForm { client, params })
        })
    }
}

fn authenticate(
    state: &ProviderState,
    authorization: Option<&HeaderValue>,
    params: &Params,
) -> Result<ClientRegistration, OAuthError> {
    let (client_id, secret) = credentials(authorization, params)?;
    let client = state.client(&client_id).ok_or_else(OAuthError::invalid_client)?;
    if !constant_time_eq(&client.client_secret, &secret) {
        return Err(OAuthError::invalid_client());
    }
    Ok(client)
}

/// client_secret_basic or client_secret_post; RFC 6749 §2.3 forbids using both at once.
fn credentials(authorization: Option<&HeaderValue>, params: &Params) -> Result<(String, String), OAuthError> {
    let basic = authorization.and_then(|h| h.to_str().ok()).and_then(|h| {
        let (scheme, rest) = h.split_once(' ')?;
        scheme.eq_ignore_ascii_case("basic").then(|| rest.trim().to_owned())
    });
    match (basic, params.get("client_secret")) {
        (Some(_), Some(_)) => Err(OAuthError::invalid_request("use one client authentication method, not two")),
        (Some(encoded), None) => {
            let (id, secret) = decode_basic(&encoded).ok_or_else(OAuthError::invalid_client)?;
            // A client_id in the body is allowed alongside Basic, but it must name the same client.
            if params.get("client_id").is_some_and(|body_id| body_id != id) {
                return Err(OAuthError::invalid_client());
            }
            Ok((id, secret))
        }
        (None, Some(secret)) => {
            let id = params.get("client_id").ok_or_else(OAuthError::invalid_client)?;
            Ok((id.to_owned(), secret.to_owned()))
        }
        (None, None) => Err(OAuthError::invalid_client()),
    }
}

/// RFC 6749 §2.3.1: id and secret are each form-urlencoded before being joined by ':' and
/// base64-encoded, so a ':' inside the id arrives as %3A.
fn decode_basic(encoded: &str) -> Option<(String, String)> {
    let decoded = String::from_utf8(STANDARD.decode(encoded).ok()?).ok()?;
    let (id, secret) = decoded.split_once(':')?;
    Some((form_decode(id)?, form_decode(secret)?))
}

/// application/x-www-form-urlencoded decoding of one value: '+' is a space, %XX a byte.
fn form_decode(value: &str) -> Option<String> {
    let hex = |b: u8| char::from(b).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let mut out = Vec::with_capacity(value.len());
    let mut bytes = value.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let (hi, lo) = (hex(bytes.next()?)?, hex(bytes.next()?)?);
                out.push(hi << 4 | lo);
            }
            _ => out.push(b),
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(list: &[(&str, &str)]) -> Params {
        Params::from_pairs(list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()).unwrap()
    }

    fn basic(raw: &str) -> HeaderValue {
        HeaderValue::from_str(&format!("Basic {}", STANDARD.encode(raw))).unwrap()
    }

    #[test]
    fn basic_credentials_are_form_decoded() {
        let header = basic("my%3Aapp:s%2Bcret+x");
        let (id, secret) = credentials(Some(&header), &params(&[])).unwrap();
        assert_eq!(id, "my:app");
        assert_eq!(secret, "s+cret x");
    }

    #[test]
    fn body_credentials_are_accepted() {
        let (id, secret) = credentials(None, &params(&[("client_id", "app"), ("client_secret", "s")])).unwrap();
        assert_eq!((id.as_str(), secret.as_str()), ("app", "s"));
    }

    #[test]
    fn two_authentication_methods_at_once_are_refused() {
        let err = credentials(Some(&basic("app:s")), &params(&[("client_secret", "s")])).unwrap_err();
        assert_eq!(err.code(), "invalid_request");
    }

    #[test]
    fn a_body_client_id_naming_another_client_than_basic_is_refused() {
        let err = credentials(Some(&basic("app:s")), &params(&[("client_id", "other")])).unwrap_err();
        assert_eq!(err.code(), "invalid_client");
    }

    #[test]
    fn no_credentials_at_all_is_invalid_client() {
        assert_eq!(credentials(None, &params(&[("client_id", "app")])).unwrap_err().code(), "invalid_client");
    }

    #[test]
    fn a_malformed_percent_escape_is_refused() {
        assert_eq!(form_decode("a%2"), None);
        assert_eq!(form_decode("a%zz"), None);
        assert_eq!(form_decode("a%20b").as_deref(), Some("a b"));
    }
}
