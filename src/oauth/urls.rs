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
    fn user_info_and_fragments_are_refused() {
        assert_eq!(endpoint("https://u:p@github.com/x", &[]).unwrap_err(), UrlRuleError::UserInfoOrFragment);
        assert_eq!(endpoint("https://github.com/x#f", &[]).unwrap_err(), UrlRuleError::UserInfoOrFragment);
    }
}
