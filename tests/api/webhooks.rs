//! The foundations of signed webhooks: signatures checked by the official Standard Webhooks
//! verifier from PyPI, and the delivery client's refusal of internal addresses, proven
//! with a resolver that answers the address under test (no packet is sent to it).

use mcp_connect::net::delivery::{DeliveryClient, DeliveryError};
use mcp_connect::net::ssrf::{AddressPolicy, Lookup, Refusal};
use mcp_connect::webhooks::sign::{new_secret, sign};
use secrecy::{ExposeSecret, SecretString};
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use time::OffsetDateTime;

/// Verifies with PyPI's `standardwebhooks`; returns its verdict (`ok`, or the error's class
/// and message).
async fn python_verifies(secret: &SecretString, body: &str, id: &str, timestamp: i64, signature: &str) -> String {
    let d = crate::support::receiver::Delivery {
        id: id.to_owned(),
        timestamp: timestamp.to_string(),
        signature: signature.to_owned(),
        body: body.to_owned(),
        answered: 0,
    };
    crate::support::receiver::python_verdicts(secret.expose_secret(), &[d]).await.remove(0)
}

#[tokio::test]
async fn signatures_verify_with_the_official_standardwebhooks_package_and_fail_when_anything_differs() {
    let (secret, old, other) = (new_secret(), new_secret(), new_secret());
    let body = r#"{"type":"connection.revoked","data":{"subject":"alice","by":"subject"}}"#;
    let now = OffsetDateTime::now_utc();
    let s = sign(&[&secret, &old], "msg_2c0e1a", now, body.as_bytes()).unwrap();
    assert_eq!(python_verifies(&secret, body, &s.id, s.timestamp, &s.signature).await, "ok");
    assert_eq!(python_verifies(&old, body, &s.id, s.timestamp, &s.signature).await, "ok", "the rotated-out secret");
    let tampered = body.replace("alice", "mallory");
    let mismatch = "WebhookVerificationError: No matching signature found";
    assert_eq!(python_verifies(&secret, &tampered, &s.id, s.timestamp, &s.signature).await, mismatch);
    assert_eq!(python_verifies(&other, body, &s.id, s.timestamp, &s.signature).await, mismatch);
    assert_eq!(python_verifies(&secret, body, "msg_other", s.timestamp, &s.signature).await, mismatch);
    // A delivery signed more than 5 minutes ago is refused, as a replay would be.
    let stale = sign(&[&secret], "msg_2c0e1a", now - time::Duration::minutes(6), body.as_bytes()).unwrap();
    assert_eq!(
        python_verifies(&secret, body, &stale.id, stale.timestamp, &stale.signature).await,
        "WebhookVerificationError: Message timestamp too old"
    );
}

/// Answers every name with `ip`.
struct Answers(IpAddr);

impl Lookup for Answers {
    fn lookup(&self, _host: String) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<IpAddr>>> + Send>> {
        let ip = self.0;
        Box::pin(async move { Ok(vec![ip]) })
    }
}

#[tokio::test]
async fn the_delivery_client_refuses_internal_addresses_a_name_resolves_to() {
    let strict = AddressPolicy::default();
    for (ip, refusal) in [
        ("10.0.0.1", Refusal::Private),
        ("172.20.1.1", Refusal::Private),
        ("100.64.1.1", Refusal::Private),
        ("fd12::1", Refusal::Private),
        ("169.254.169.254", Refusal::LinkLocal),
        ("fe80::1", Refusal::LinkLocal),
        ("127.0.0.1", Refusal::Loopback),
        ("::ffff:127.0.0.1", Refusal::Loopback),
        ("::ffff:10.0.0.1", Refusal::Private),
        ("0.0.0.0", Refusal::Reserved),
    ] {
        let c = DeliveryClient::new(strict, Arc::new(Answers(ip.parse().unwrap())), Duration::from_secs(2)).unwrap();
        let e = c.post(&url("https://hooks.example.com/in"), &[], b"{}".to_vec()).await.unwrap_err();
        assert!(matches!(e, DeliveryError::Refused(r) if r == refusal), "{ip}: {e}");
    }
}

fn url(s: &str) -> url::Url {
    url::Url::parse(s).unwrap()
}

/// An IP literal is never resolved: the client checks the URL itself.
#[tokio::test]
async fn the_delivery_client_refuses_ip_literals_it_would_never_resolve() {
    let lookup = Arc::new(Answers("93.184.216.34".parse().unwrap()));
    let c = DeliveryClient::new(AddressPolicy::default(), lookup, Duration::from_secs(2)).unwrap();
    for (u, refusal) in [
        ("https://10.0.0.1/in", Refusal::Private),
        ("https://[fd00::1]/in", Refusal::Private),
        ("http://169.254.169.254/latest/meta-data/", Refusal::NotHttps),
        ("https://169.254.169.254/latest/meta-data/", Refusal::LinkLocal),
        ("https://2130706433/in", Refusal::Loopback),
        ("http://hooks.example.com/in", Refusal::NotHttps),
    ] {
        let e = c.post(&url(u), &[], b"{}".to_vec()).await.unwrap_err();
        assert!(matches!(e, DeliveryError::Refused(r) if r == refusal), "{u}: {e}");
    }
}

/// A receiver on loopback that counts requests and answers `status` (with a Location), at
/// a name the test's resolver maps to 127.0.0.1.
async fn receiver(status: u16) -> (String, Arc<AtomicU64>) {
    let hits = Arc::new(AtomicU64::new(0));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let counted = hits.clone();
    let server = actix_web::HttpServer::new(move || {
        let counted = counted.clone();
        actix_web::App::new().default_service(actix_web::web::to(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                actix_web::HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap())
                    .insert_header(("location", "http://169.254.169.254/latest/meta-data/"))
                    .finish()
            }
        }))
    })
    .workers(1)
    .listen(listener)
    .unwrap()
    .run();
    tokio::spawn(server);
    (format!("http://hooks.test:{port}/in"), hits)
}

#[tokio::test]
async fn a_name_that_rebinds_to_loopback_is_refused_at_delivery_and_no_request_arrives() {
    let (endpoint, hits) = receiver(200).await;
    // The name resolves to the receiver on 127.0.0.1. Over https, which the URL check
    // accepts for a name, the resolver refuses the address: nothing is sent. Over http by
    // name the URL itself is refused (http goes to a loopback address written out, and
    // only where loopback is allowed). Written out, with loopback allowed, it arrives.
    let lookup = Arc::new(Answers("127.0.0.1".parse().unwrap()));
    let https = endpoint.replace("http://", "https://");
    let strict = DeliveryClient::new(AddressPolicy::default(), lookup.clone(), Duration::from_secs(2)).unwrap();
    let e = strict.post(&url(&https), &[], b"{}".to_vec()).await.unwrap_err();
    assert!(matches!(e, DeliveryError::Refused(Refusal::Loopback)), "{e}");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing reached the receiver");
    let dev = AddressPolicy { allow_loopback: true, allow_private: false };
    let e = DeliveryClient::new(dev, lookup, Duration::from_secs(2))
        .unwrap()
        .post(&url(&endpoint), &[], b"{}".to_vec())
        .await
        .unwrap_err();
    assert!(matches!(e, DeliveryError::Refused(Refusal::NotHttps)), "http by name: {e}");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    let by_address = endpoint.replace("hooks.test", "127.0.0.1");
    let dev_client =
        DeliveryClient::new(dev, Arc::new(Answers("127.0.0.1".parse().unwrap())), Duration::from_secs(2)).unwrap();
    let r = dev_client.post(&url(&by_address), &[], b"{}".to_vec()).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn redirects_are_not_followed() {
    let (endpoint, hits) = receiver(302).await;
    let dev = AddressPolicy { allow_loopback: true, allow_private: false };
    let c = DeliveryClient::new(dev, Arc::new(Answers("127.0.0.1".parse().unwrap())), Duration::from_secs(2)).unwrap();
    let r = c.post(&url(&endpoint.replace("hooks.test", "127.0.0.1")), &[], b"{}".to_vec()).await.unwrap();
    assert_eq!(r.status(), 302, "the redirect is the answer, not followed");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}
