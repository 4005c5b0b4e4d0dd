//! The one HTTP client webhook deliveries use, safe against server-side request forgery:
//! an endpoint URL is checked when it is registered and again before each delivery
//! ([`check_url`]), and every address it connects to by its resolver ([`GuardedResolver`]).
//! Redirects are not followed, and the timeout is short.

use super::ssrf::{AddressPolicy, GuardedResolver, Lookup, Refusal, check_url, refusal_of};
use std::sync::Arc;
use std::time::Duration;
use url::Url;

/// The delivery client: the guarded resolver, no redirects, no proxy from the
/// environment, a short timeout. It only posts, and checks each URL first: an IP literal
/// is never resolved, so the resolver alone would never see it.
pub struct DeliveryClient {
    http: reqwest::Client,
    policy: AddressPolicy,
}

/// A delivery that was not made or got no answer.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    #[error("refused: {0}")]
    Refused(Refusal),
    #[error("request failed: {0}")]
    Request(#[source] reqwest::Error),
}

impl DeliveryClient {
    pub fn new(policy: AddressPolicy, lookup: Arc<dyn Lookup>, timeout: Duration) -> reqwest::Result<Self> {
        Self::trusting(policy, lookup, timeout, &[])
    }

    /// [`Self::new`], trusting `cas` besides the system's store and the built-in Mozilla
    /// roots (`outbound.ca_file`).
    pub fn trusting(
        policy: AddressPolicy,
        lookup: Arc<dyn Lookup>,
        timeout: Duration,
        cas: &[reqwest::Certificate],
    ) -> reqwest::Result<Self> {
        let builder = cas.iter().fold(reqwest::Client::builder(), |b, ca| b.add_root_certificate(ca.clone()));
        let http = builder
            .dns_resolver(Arc::new(GuardedResolver::new(lookup, policy)))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()?;
        Ok(Self { http, policy })
    }

    /// POSTs `body` with `headers` to `url`, after checking it again.
    pub async fn post(
        &self,
        url: &Url,
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> Result<reqwest::Response, DeliveryError> {
        check_url(url, self.policy).map_err(DeliveryError::Refused)?;
        let mut req = self.http.post(url.clone()).body(body);
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        req.send().await.map_err(|e| match refusal_of(&e) {
            Some(r) => DeliveryError::Refused(r),
            None => DeliveryError::Request(e),
        })
    }
}
