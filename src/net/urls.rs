//! Rules for the URLs of providers and IdPs we talk to (DESIGN.md invariant 5): https only
//! (loopback excepted, for development and tests), and no internationalised hosts unless
//! the operator listed the host explicitly, since `gіthub.com` with a Cyrillic `і` is a
//! different host that looks the same on a consent page.

use url::{Host, Url};

#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum UrlRuleError {
    #[error("is not a valid absolute URL")]
    Invalid,
    #[error("must use https (plain http is allowed for loopback hosts only)")]
    NotHttps,
    #[error("has no host")]
    NoHost,
    #[error("host {0:?} is internationalised (punycode or mixed script); list it in allow_idn_hosts to accept it")]
    IdnHost(String),
    #[error("must not carry user info or a fragment")]
    UserInfoOrFragment,
}

pub fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        Some(Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// Parses and checks an endpoint URL from configuration.
pub fn endpoint(raw: &str, allow_idn_hosts: &[String]) -> Result<Url, UrlRuleError> {
    let url = Url::parse(raw).map_err(|_| UrlRuleError::Invalid)?;
    check_endpoint(&url, allow_idn_hosts)?;
    Ok(url)
}

/// An issuer identifier exactly as configured. Issuers are compared as strings
/// (OpenID Connect Discovery §4.3, RFC 9207 §2.4): `https://idp.example` and
/// `https://idp.example/` are two issuers, so the configured text is kept as it was written
/// instead of the parsed URL's serialisation (which always adds a `/` to an empty path).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issuer {
    exact: String,
    url: Url,
}

impl Issuer {
    /// Checked by the endpoint rules; an issuer has no query (RFC 8414 §2).
    pub fn parse(raw: &str, allow_idn_hosts: &[String]) -> Result<Self, UrlRuleError> {
        let url = endpoint(raw, allow_idn_hosts)?;
        if url.query().is_some() {
            return Err(UrlRuleError::Invalid);
        }
        Ok(Self { exact: raw.to_owned(), url })
    }

    pub fn as_str(&self) -> &str {
        &self.exact
    }

    pub fn url(&self) -> &Url {
        &self.url
    }

    /// OpenID Connect Discovery §4: the issuer with any trailing `/` removed, then
    /// `/.well-known/openid-configuration`.
    pub fn discovery_url(&self) -> Result<Url, UrlRuleError> {
        let base = self.url.as_str().trim_end_matches('/');
        Url::parse(&format!("{base}/.well-known/openid-configuration")).map_err(|_| UrlRuleError::Invalid)
    }
}

pub fn check_endpoint(url: &Url, allow_idn_hosts: &[String]) -> Result<(), UrlRuleError> {
    let host = url.host_str().ok_or(UrlRuleError::NoHost)?;
    match url.scheme() {
        "https" => {}
        "http" if is_loopback(url) => {}
        _ => return Err(UrlRuleError::NotHttps),
    }
    if !url.username().is_empty() || url.password().is_some() || url.fragment().is_some() {
        return Err(UrlRuleError::UserInfoOrFragment);
    }
    // The url crate has already turned any Unicode host into its ASCII (punycode) form, so
    // an `xn--` label is exactly "this host is internationalised".
    let idn = host.split('.').any(|label| label.len() >= 4 && label[..4].eq_ignore_ascii_case("xn--"));
    if idn && !allow_idn_hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
        return Err(UrlRuleError::IdnHost(host.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod props;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_is_required_except_on_loopback() {
        assert!(endpoint("https://github.com/login/oauth/authorize", &[]).is_ok());
        assert_eq!(endpoint("http://github.com/x", &[]).unwrap_err(), UrlRuleError::NotHttps);
        assert!(endpoint("http://127.0.0.1:9000/x", &[]).is_ok());
        assert!(endpoint("http://localhost:9000/x", &[]).is_ok());
        assert!(endpoint("http://[::1]:9000/x", &[]).is_ok());
        assert_eq!(endpoint("ftp://github.com/x", &[]).unwrap_err(), UrlRuleError::NotHttps);
    }

    #[test]
    fn punycode_and_unicode_hosts_are_refused_unless_allowed() {
        // Cyrillic 'і' in place of the Latin 'i'.
        assert!(matches!(endpoint("https://g\u{0456}thub.com/x", &[]), Err(UrlRuleError::IdnHost(_))));
        assert!(matches!(endpoint("https://xn--gthub-n4a.com/x", &[]), Err(UrlRuleError::IdnHost(_))));
        assert!(matches!(endpoint("https://login.XN--gthub-n4a.com/x", &[]), Err(UrlRuleError::IdnHost(_))));
        assert!(endpoint("https://xn--gthub-n4a.com/x", &["xn--gthub-n4a.com".to_owned()]).is_ok());
    }

    #[test]
    fn an_issuer_keeps_its_exact_text_and_finds_its_discovery_document() {
        let plain = Issuer::parse("https://idp.example", &[]).unwrap();
        let slash = Issuer::parse("https://idp.example/", &[]).unwrap();
        assert_eq!(plain.as_str(), "https://idp.example");
        assert_eq!(slash.as_str(), "https://idp.example/");
        assert_ne!(plain, slash);
        for i in [&plain, &slash] {
            assert_eq!(i.discovery_url().unwrap().as_str(), "https://idp.example/.well-known/openid-configuration");
        }
        let realm = Issuer::parse("https://idp.example/realms/x/", &[]).unwrap();
        assert_eq!(
            realm.discovery_url().unwrap().as_str(),
            "https://idp.example/realms/x/.well-known/openid-configuration"
        );
        assert_eq!(Issuer::parse("https://idp.example/?a=1", &[]).unwrap_err(), UrlRuleError::Invalid);
        assert_eq!(Issuer::parse("http://idp.example", &[]).unwrap_err(), UrlRuleError::NotHttps);
    }

    #[test]
    fn user_info_and_fragments_are_refused() {
        assert_eq!(endpoint("https://u:p@github.com/x", &[]).unwrap_err(), UrlRuleError::UserInfoOrFragment);
        assert_eq!(endpoint("https://github.com/x#f", &[]).unwrap_err(), UrlRuleError::UserInfoOrFragment);
    }
}
