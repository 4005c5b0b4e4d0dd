//! The `aws-kms` key store: the key-encryption key is a symmetric KMS key
//! (`SYMMETRIC_DEFAULT`, AES-256-GCM inside KMS's HSMs), so it never leaves AWS: data keys go
//! in to `Encrypt` and come back from `Decrypt`, each call bound to the data key's id and
//! scope by the encryption context (KMS's additional authenticated data; CloudTrail records
//! it, so a tenant's id appears there, never a key). Through the official SDK, `aws-sdk-kms`.
//!
//! `kek_id` is the key's ARN, resolved once at start from what `key_id` names (an id, an
//! ARN or an alias): pointing the alias at a new key is a KEK rotation, and `rotate-key`
//! re-wraps every data key under it. `Decrypt` names the key it expects, so a blob another
//! key wrapped is refused by KMS rather than opened with whatever key made it.
//!
//! The SDK is the one outbound HTTP client outside `net/`: it signs each request (SigV4) and
//! speaks only to the endpoint the operator configured (or AWS's own for the region), never
//! to an address a request chose, so the outbound guard has nothing to check. Its client is
//! built on rustls with ring (the TLS stack the rest of the service uses; the SDK's default
//! would bring aws-lc's C build). Plain `http://` is accepted only for a loopback endpoint (a
//! KMS emulator in tests): `Decrypt` answers carry data keys.
//!
//! Credentials: static ones when configured (`access_key_id` and its secret), else the SDK's
//! default chain (the environment, a web-identity token as EKS's IRSA mounts it, the ECS or
//! EC2 instance role).

use super::{KeyStore, KeyStoreError, WrapContext, Wrapped};
use aws_sdk_kms::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_kms::primitives::Blob;
use secrecy::{ExposeSecret, SecretString};
use std::collections::HashMap;
use std::time::Duration;
use zeroize::Zeroizing;

pub const AWS_KMS: &str = "aws-kms";
/// One attempt's bound, and the whole call's (two attempts, the SDK's standard back-off).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// `[vault.aws_kms]`.
#[derive(Clone)]
pub struct AwsKmsSettings {
    /// The key new data keys are wrapped under: a key id, an ARN or `alias/…`.
    pub key_id: String,
    pub region: String,
    /// Another endpoint than AWS's for the region (a VPC endpoint; a KMS emulator in tests).
    pub endpoint: Option<url::Url>,
    /// Static credentials; `None`: the SDK's default chain.
    pub credentials: Option<(String, SecretString)>,
}

impl std::fmt::Debug for AwsKmsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsKmsSettings")
            .field("key_id", &self.key_id)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint.as_ref().map(url::Url::as_str))
            .field("access_key_id", &self.credentials.as_ref().map(|(id, _)| id))
            .finish_non_exhaustive()
    }
}

/// Whether `endpoint` may carry data keys: `https`, or `http` to a loopback address; no
/// user, password, query or fragment (a password would show in logs and errors).
pub fn endpoint_allowed(endpoint: &url::Url) -> bool {
    if !endpoint.username().is_empty()
        || endpoint.password().is_some()
        || endpoint.query().is_some()
        || endpoint.fragment().is_some()
    {
        return false;
    }
    match endpoint.scheme() {
        "https" => true,
        "http" => match endpoint.host() {
            Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
            Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
            Some(url::Host::Domain(d)) => d == "localhost",
            None => false,
        },
        _ => false,
    }
}

/// A key store in AWS KMS.
#[derive(Clone)]
pub struct AwsKmsKeyStore {
    client: aws_sdk_kms::Client,
    /// The key's ARN.
    arn: String,
}

impl std::fmt::Debug for AwsKmsKeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsKmsKeyStore").field("key", &self.arn).finish_non_exhaustive()
    }
}

fn refused(reason: impl Into<String>) -> KeyStoreError {
    KeyStoreError::Refused { store: AWS_KMS, reason: reason.into() }
}

/// An SDK error: the call did not get an answer (a timeout, no connection, an answer that
/// is not KMS's, KMS's own failure or throttling: worth a retry), or KMS answered no (the
/// key is gone, disabled or not this blob's; access denied).
fn classified<E: ProvideErrorMetadata + std::error::Error + 'static>(
    e: SdkError<E, aws_sdk_kms::config::http::HttpResponse>,
) -> KeyStoreError {
    let transient = match &e {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => true,
        // A proxy's or load balancer's 5xx or 429 carries no KMS error code: an outage too.
        SdkError::ServiceError(s) => {
            let status = s.raw().status().as_u16();
            status >= 500
                || status == 429
                || matches!(
                    s.err().code(),
                    Some(
                        "KMSInternalException"
                            | "KMSInternal"
                            | "DependencyTimeoutException"
                            | "KeyUnavailableException"
                            | "ThrottlingException"
                            | "Throttling"
                            | "TooManyRequestsException"
                            | "RequestLimitExceeded"
                            | "RequestTimeout"
                            | "LimitExceededException"
                            | "ServiceUnavailableException"
                            | "InternalFailure"
                    )
                )
        }
        _ => false,
    };
    let reason = DisplayErrorContext(&e).to_string();
    if transient { KeyStoreError::Unavailable { store: AWS_KMS, reason } } else { refused(reason) }
}

impl AwsKmsKeyStore {
    /// Builds the client, resolves `key_id` to its ARN and checks that it is an enabled
    /// symmetric key for encryption, then wraps and unwraps a random key once.
    pub async fn open(settings: AwsKmsSettings) -> Result<Self, KeyStoreError> {
        use aws_config::{BehaviorVersion, retry::RetryConfig, timeout::TimeoutConfig};
        use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
        if let Some(endpoint) = &settings.endpoint
            && !endpoint_allowed(endpoint)
        {
            return Err(refused(format!("endpoint {endpoint}: https, or http to a loopback address only")));
        }
        let http =
            aws_smithy_http_client::Builder::new().tls_provider(tls::Provider::Rustls(CryptoMode::Ring)).build_https();
        let timeouts = TimeoutConfig::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .operation_attempt_timeout(ATTEMPT_TIMEOUT)
            .operation_timeout(CALL_TIMEOUT)
            .build();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(http)
            .region(aws_config::Region::new(settings.region.clone()))
            .timeout_config(timeouts)
            .retry_config(RetryConfig::standard().with_max_attempts(2));
        if let Some((id, secret)) = &settings.credentials {
            let creds =
                aws_sdk_kms::config::Credentials::new(id, secret.expose_secret(), None, None, "mcp-connect config");
            loader = loader.credentials_provider(creds);
        }
        let sdk = loader.load().await;
        let client = aws_sdk_kms::Client::from_conf(kms_config(&sdk, settings.endpoint.as_ref()));
        let described = client.describe_key().key_id(&settings.key_id).send().await.map_err(classified)?;
        let meta = described.key_metadata().ok_or_else(|| refused("DescribeKey answered no key"))?;
        let arn = meta.arn().ok_or_else(|| refused("DescribeKey answered no ARN"))?.to_owned();
        if !meta.enabled() {
            return Err(refused(format!("key {arn} is not enabled ({:?})", meta.key_state())));
        }
        if meta.key_usage().map(|u| u.as_str()) != Some("ENCRYPT_DECRYPT")
            || meta.key_spec().map(|s| s.as_str()) != Some("SYMMETRIC_DEFAULT")
        {
            return Err(refused(format!("key {arn} is not a SYMMETRIC_DEFAULT key for ENCRYPT_DECRYPT")));
        }
        let store = Self { client, arn };
        super::probe(&store).await?;
        Ok(store)
    }
}

/// The KMS client's settings: the SDK's, with the endpoint the operator configured or none
/// (AWS's for the region). Never one from the environment or a profile
/// (`AWS_ENDPOINT_URL`, `endpoint_url`): it would escape the https check.
fn kms_config(sdk: &aws_config::SdkConfig, endpoint: Option<&url::Url>) -> aws_sdk_kms::Config {
    let mut config = aws_sdk_kms::config::Builder::from(sdk);
    config.set_endpoint_url(endpoint.map(|e| e.as_str().trim_end_matches('/').to_owned()));
    config.build()
}

/// The partition, region and account of a key ARN (`arn:aws:kms:eu-central-1:1234…:`).
fn arn_home(arn: &str) -> Option<&str> {
    let mut colons = arn.match_indices(':').map(|(i, _)| i);
    let end = colons.nth(4)?;
    arn.starts_with("arn:").then(|| &arn[..=end])
}

/// The wrap context as KMS's encryption context.
fn encryption_context(ctx: &WrapContext<'_>) -> HashMap<String, String> {
    HashMap::from([
        ("purpose".to_owned(), "mcp-connect/data-key/v1".to_owned()),
        ("data_key".to_owned(), ctx.data_key.to_string()),
        ("scope".to_owned(), ctx.scope.to_owned()),
    ])
}

#[async_trait::async_trait]
impl KeyStore for AwsKmsKeyStore {
    fn kind(&self) -> &'static str {
        AWS_KMS
    }

    fn current_kek(&self) -> &str {
        &self.arn
    }

    async fn wrap(&self, ctx: &WrapContext<'_>, key: &[u8; 32]) -> Result<Wrapped, KeyStoreError> {
        // The request body holds the key until the SDK drops it: not zeroised there.
        let out = self
            .client
            .encrypt()
            .key_id(&self.arn)
            .plaintext(Blob::new(key.to_vec()))
            .set_encryption_context(Some(encryption_context(ctx)))
            .send()
            .await
            .map_err(classified)?;
        if out.key_id() != Some(self.arn.as_str()) {
            return Err(refused("Encrypt answered for another key"));
        }
        let blob = out.ciphertext_blob.ok_or_else(|| refused("Encrypt answered no ciphertext"))?.into_inner();
        if blob.windows(key.len()).any(|w| w == key) {
            return Err(refused("Encrypt answered the key in clear"));
        }
        Ok(Wrapped { kek_id: self.arn.clone(), blob })
    }

    async fn unwrap(
        &self,
        kek_id: &str,
        ctx: &WrapContext<'_>,
        blob: &[u8],
    ) -> Result<Zeroizing<[u8; 32]>, KeyStoreError> {
        // A row names the key that wrapped it; only keys of this account and region are
        // asked (a row pointed at a key someone else holds is not unwrapped with it).
        if arn_home(kek_id).is_none() || arn_home(kek_id) != arn_home(&self.arn) {
            return Err(refused(format!("key {kek_id} is not a key of this store's account and region")));
        }
        let out = self
            .client
            .decrypt()
            .key_id(kek_id)
            .ciphertext_blob(Blob::new(blob.to_vec()))
            .set_encryption_context(Some(encryption_context(ctx)))
            .send()
            .await
            .map_err(classified)?;
        if out.key_id() != Some(kek_id) {
            return Err(refused("Decrypt answered for another key"));
        }
        let opened = Zeroizing::new(out.plaintext.ok_or_else(|| refused("Decrypt answered no key"))?.into_inner());
        super::key_of(AWS_KMS, &opened)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A peer on loopback that answers every request with `status` and `body` (a proxy's
    /// error page, KMS's refusal), over as many connections as asked.
    fn answering(status: &'static str, body: &'static str) -> url::Url {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap()).parse().unwrap();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let mut buf = [0u8; 65536];
                let _ = conn.read(&mut buf);
                let _ = write!(
                    conn,
                    "HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        url
    }

    fn settings(endpoint: url::Url) -> AwsKmsSettings {
        AwsKmsSettings {
            key_id: "alias/k".into(),
            region: "eu-central-1".into(),
            endpoint: Some(endpoint),
            credentials: Some(("a".into(), SecretString::from("b".to_owned()))),
        }
    }

    #[tokio::test]
    async fn a_proxys_5xx_or_429_without_a_kms_code_is_an_outage_and_kmss_refusal_is_not() {
        for status in ["503 Service Unavailable", "502 Bad Gateway", "429 Too Many Requests"] {
            let e = AwsKmsKeyStore::open(settings(answering(status, "<html>down</html>"))).await.unwrap_err();
            assert!(e.is_transient(), "{status}: {e}");
        }
        let denied = r#"{"__type":"AccessDeniedException","message":"no"}"#;
        let e = AwsKmsKeyStore::open(settings(answering("400 Bad Request", denied))).await.unwrap_err();
        assert!(matches!(e, KeyStoreError::Refused { .. }) && e.to_string().contains("AccessDenied"), "{e}");
    }

    #[test]
    fn only_https_or_loopback_http_may_carry_data_keys() {
        for ok in
            ["https://kms.eu-central-1.amazonaws.com", "http://127.0.0.1:4566", "http://[::1]:1", "http://localhost:9"]
        {
            assert!(endpoint_allowed(&ok.parse().unwrap()), "{ok}");
        }
        for no in [
            "http://kms.internal:4566",
            "http://10.0.0.5",
            "ftp://127.0.0.1",
            "http://127.0.0.1.nip.io",
            "http://localhost.evil.example",
            "http://localhost.",
            "http://[::ffff:127.0.0.1]",
            "http://u:pw@127.0.0.1",
            "https://user@kms.eu-central-1.amazonaws.com",
            "https://kms.eu-central-1.amazonaws.com/?x=1",
            "https://kms.eu-central-1.amazonaws.com/#f",
        ] {
            assert!(!endpoint_allowed(&no.parse().unwrap()), "{no}");
        }
    }

    /// Records where a request would go, and stops it there.
    #[derive(Debug, Clone, Default)]
    struct Destination(Arc<std::sync::Mutex<Option<String>>>);

    impl aws_sdk_kms::config::Intercept for Destination {
        fn name(&self) -> &'static str {
            "destination"
        }

        fn read_before_transmit(
            &self,
            ctx: &aws_sdk_kms::config::interceptors::BeforeTransmitInterceptorContextRef<'_>,
            _: &aws_sdk_kms::config::RuntimeComponents,
            _: &mut aws_sdk_kms::config::ConfigBag,
        ) -> Result<(), aws_sdk_kms::error::BoxError> {
            *self.0.lock().unwrap() = Some(ctx.request().uri().to_owned());
            Err("stopped before sending".into())
        }
    }

    #[tokio::test]
    async fn an_endpoint_from_the_environment_or_a_profile_is_not_used() {
        use aws_sdk_kms::config::{Credentials, SharedCredentialsProvider};
        // As `AWS_ENDPOINT_URL` or a profile's `endpoint_url` would set it.
        let sdk = aws_config::SdkConfig::builder()
            .behavior_version(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("eu-central-1"))
            .endpoint_url("http://10.0.0.1:4566")
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new("a", "b", None, None, "t")))
            .http_client(aws_smithy_http_client::Builder::new().build_http())
            .retry_config(aws_config::retry::RetryConfig::disabled())
            .build();
        let destination = |endpoint: Option<url::Url>| {
            let sdk = sdk.clone();
            async move {
                let seen = Destination::default();
                let config = kms_config(&sdk, endpoint.as_ref()).to_builder().interceptor(seen.clone()).build();
                let _ = aws_sdk_kms::Client::from_conf(config).describe_key().key_id("alias/k").send().await;
                seen.0.lock().unwrap().clone().expect("a request was made")
            }
        };
        assert!(destination(None).await.starts_with("https://kms.eu-central-1.amazonaws.com"), "AWS's for the region");
        let configured = destination(Some("http://127.0.0.1:4566".parse().unwrap())).await;
        assert!(configured.starts_with("http://127.0.0.1:4566"), "{configured}");
    }

    #[test]
    fn only_keys_of_the_stores_own_account_and_region_are_asked() {
        let own = "arn:aws:kms:eu-central-1:123456789012:key/1";
        assert_eq!(arn_home(own), Some("arn:aws:kms:eu-central-1:123456789012:"));
        assert_eq!(arn_home("arn:aws:kms:eu-central-1:123456789012:key/2"), arn_home(own));
        for other in ["arn:aws:kms:eu-central-1:999999999999:key/1", "arn:aws:kms:us-east-1:123456789012:key/1"] {
            assert_ne!(arn_home(other), arn_home(own), "{other}");
        }
        for not_arn in ["alias/x", "kek-1", "arn:aws:kms"] {
            assert_eq!(arn_home(not_arn), None, "{not_arn}");
        }
    }

    #[test]
    fn the_settings_never_show_the_secret() {
        let s = AwsKmsSettings {
            key_id: "alias/k".into(),
            region: "eu-central-1".into(),
            endpoint: None,
            credentials: Some(("AKIDEXAMPLE".into(), SecretString::from("wJalrXUtnFEMI-SECRET".to_owned()))),
        };
        let shown = format!("{s:?}");
        assert!(shown.contains("AKIDEXAMPLE") && !shown.contains("SECRET"), "{shown}");
    }
}
