//! Fetching a server's own documents (OpenID discovery, RFC 8414 server metadata, RFC 9728
//! resource metadata, JWKS) and admitting the origins they name. One rule for every kind
//! of discovery: what the operator configured is reached as it is; any other origin a
//! document names is someone else's word, so it is reached only over the SSRF guard
//! ([`Reach::Public`], or [`Reach::Private`] where the operator allowed private endpoints
//! for this server), and the guard is kept with what was found, so every later call to it
//! (token, refresh, revocation, registration) goes through the same check.

use super::http::{Guard, Outbound, OutboundError, Reach};
use super::ssrf::check_url;
use std::collections::HashMap;
use std::sync::Arc;
use url::{Origin, Url};

/// The origins one server's discovery may reach, and the guard built while it runs.
#[derive(Debug)]
pub struct Admission {
    configured: Vec<Origin>,
    reach: Reach,
    /// Whose origin the configured one is, for the refusal: "the issuer", "the server".
    whose: &'static str,
    guard: HashMap<String, Reach>,
}

/// A document that could not be had: its origin refused, or the fetch failed.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// The reason, safe to show an operator (names what, the URL and the rule).
    #[error("{0}")]
    Refused(String),
    #[error("{url}: {source}")]
    Fetch {
        url: String,
        #[source]
        source: OutboundError,
    },
}

impl Admission {
    /// `configured`: the origins the operator's configuration names (reached as they are);
    /// `allow_private`: whether other origins may be private or loopback addresses.
    pub fn new(configured: Vec<Origin>, allow_private: bool, whose: &'static str) -> Self {
        let reach = if allow_private { Reach::Private } else { Reach::Public };
        Self { configured, reach, whose, guard: HashMap::new() }
    }

    /// Admits `url`, which a server's document named as its `what`: on a configured origin
    /// as it is; else checked against the address policy (an IP literal here, a name on
    /// every connection by the guarded resolver) and its origin added to the guard.
    pub fn admit(&mut self, url: &Url, what: &str) -> Result<(), MetadataError> {
        if self.configured.contains(&url.origin()) {
            return Ok(());
        }
        check_url(url, self.reach.policy()).map_err(|r| {
            let hint = if self.reach == Reach::Private { "" } else { " (set allow_private_endpoints to allow it)" };
            MetadataError::Refused(format!("{what} {url} is on another origin than {} and {r}{hint}", self.whose))
        })?;
        self.guard.insert(url.origin().ascii_serialization(), self.reach);
        Ok(())
    }

    /// The guard as it stands: every origin admitted so far.
    pub fn guard(&self) -> Guard {
        Arc::new(self.guard.clone())
    }

    /// GETs the JSON document at `url` (its `what`), after admitting it, through the guard.
    pub async fn get_json(
        &mut self,
        http: &Outbound,
        url: &Url,
        what: &str,
    ) -> Result<serde_json::Value, MetadataError> {
        self.admit(url, what)?;
        http.with_guard(&self.guard())
            .get_json(url, None)
            .await
            .map_err(|source| MetadataError::Fetch { url: url.to_string(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::ssrf::Refusal;

    #[test]
    fn configured_origins_pass_as_they_are_and_others_only_through_the_guard() {
        let configured = vec![Url::parse("http://127.0.0.1:8080/").unwrap().origin()];
        let url = |s: &str| Url::parse(s).unwrap();
        let mut public = Admission::new(configured.clone(), false, "the issuer");
        // The operator's word: loopback and plain http, not guarded.
        public.admit(&url("http://127.0.0.1:8080/token"), "token_endpoint").unwrap();
        assert!(public.guard().is_empty());
        // Another public https origin: admitted, and guarded.
        public.admit(&url("https://as.example.com/token"), "token_endpoint").unwrap();
        assert_eq!(public.guard().get("https://as.example.com"), Some(&Reach::Public));
        // Another origin on loopback, or plain http: refused, with what, where and why.
        for (bad, rule) in
            [("https://127.0.0.1:9/token", Refusal::Loopback), ("http://as.example.com/token", Refusal::NotHttps)]
        {
            let MetadataError::Refused(why) = public.admit(&url(bad), "token_endpoint").unwrap_err() else {
                panic!("{bad}: not a refusal");
            };
            assert!(why.starts_with(&format!("token_endpoint {bad} is on another origin than the issuer")), "{why}");
            assert!(why.contains("allow_private_endpoints"), "{why}");
            assert!(why.contains(&rule.to_string()), "{bad}: {why}");
        }
        // Allowed private endpoints: loopback passes, guarded as private; metadata never.
        let mut private = Admission::new(configured, true, "the server");
        private.admit(&url("http://127.0.0.1:9/token"), "token_endpoint").unwrap();
        assert_eq!(private.guard().get("http://127.0.0.1:9"), Some(&Reach::Private));
        let MetadataError::Refused(why) = private.admit(&url("http://169.254.169.254/latest"), "jwks_uri").unwrap_err()
        else {
            panic!("link-local admitted");
        };
        assert!(why.contains("than the server") && !why.contains("allow_private_endpoints"), "{why}");
    }
}
