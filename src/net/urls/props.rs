//! Property tests of the rules for configured endpoint and issuer URLs: what is accepted
//! meets every rule, and a host is judged alike in Unicode and in punycode.

use super::{Issuer, UrlRuleError, endpoint, is_loopback};
use crate::domain::props::made_of;
use proptest::prelude::*;
use proptest::sample::select;
use url::Url;

/// Letters that make a host internationalised (Latin with diacritics, Cyrillic and Greek
/// look-alikes, CJK, upper case that IDNA maps), with some ASCII among them.
const IDN_LETTERS: &[char] = &['a', 'g', 'k', 'ä', 'ö', 'ü', 'é', 'ß', 'ł', 'ø', 'ñ', 'і', 'а', 'α', '例', 'Ü', 'É'];

fn idn_label() -> impl Strategy<Value = String> {
    prop::collection::vec(select(IDN_LETTERS), 1..=10)
        .prop_map(String::from_iter)
        .prop_filter("an internationalised label", |l| !l.is_ascii())
}

const URL_PIECES: &[&str] = &[
    "https://",
    "http://",
    "HTTPS://",
    "ftp://",
    "https:",
    "//",
    "localhost",
    "127.0.0.1",
    "[::1]",
    "idp.example",
    "bücher",
    "xn--bcher-kva",
    "XN--BCHER-KVA",
    "\u{ff0e}",
    ".",
    ".example",
    ":443",
    ":8080",
    ":",
    "@",
    "user:pw@",
    "#",
    "#frag",
    "?",
    "?q=1",
    "/",
    "/realms/x/",
    "\\",
    "%2e",
    "%41",
    " ",
    "\t",
    "і",
    "例",
];

proptest! {
    /// A host written in Unicode is judged exactly as its punycode form (the form
    /// `url::Url::parse` turns it into): refused as internationalised unless allowed,
    /// accepted as the same URL when its punycode form is listed (in any case).
    #[test]
    fn unicode_and_punycode_hosts_are_judged_alike(
        label in idn_label(),
        sub in select(vec!["", "login."]),
        path in select(vec!["", "/", "/oauth/token", "/realms/x/"]),
    ) {
        let unicode = format!("https://{sub}{label}.example{path}");
        let host = Url::parse(&unicode).unwrap().host_str().unwrap().to_owned();
        prop_assert!(host.is_ascii() && host.contains("xn--"), "{}", host);
        let punycode = format!("https://{host}{path}");
        prop_assert_eq!(endpoint(&unicode, &[]), Err(UrlRuleError::IdnHost(host.clone())));
        prop_assert_eq!(endpoint(&punycode, &[]), Err(UrlRuleError::IdnHost(host.clone())));
        for allowed in [host.clone(), host.to_ascii_uppercase()] {
            let allow = [allowed];
            let accepted = endpoint(&punycode, &allow).unwrap();
            prop_assert_eq!(accepted.host_str(), Some(host.as_str()));
            prop_assert_eq!(endpoint(&unicode, &allow), Ok(accepted));
            prop_assert_eq!(
                Issuer::parse(&unicode, &allow).unwrap().discovery_url(),
                Issuer::parse(&punycode, &allow).unwrap().discovery_url()
            );
        }
    }

    /// For any string, what `endpoint` accepts is https (http only on loopback), has a
    /// host, no userinfo, no fragment and no internationalised label; what `Issuer::parse`
    /// accepts is kept exactly as written, has no query, and has a discovery URL.
    #[test]
    fn configured_urls_meet_every_rule_when_accepted(
        raw in prop_oneof![
            made_of(URL_PIECES, 1..8),
            made_of(URL_PIECES, 0..6).prop_map(|s| format!("https://{s}")),
        ],
    ) {
        if let Ok(u) = endpoint(&raw, &[]) {
            prop_assert!(u.scheme() == "https" || (u.scheme() == "http" && is_loopback(&u)), "{}", u);
            let host = u.host_str().unwrap_or_default();
            prop_assert!(!host.is_empty(), "{}", u);
            prop_assert!(u.username().is_empty() && u.password().is_none() && u.fragment().is_none(), "{}", u);
            prop_assert!(!host.split('.').any(|l| l.to_ascii_lowercase().starts_with("xn--")), "{}", u);
        }
        if let Ok(issuer) = Issuer::parse(&raw, &[]) {
            prop_assert_eq!(issuer.as_str(), raw.as_str());
            prop_assert!(endpoint(&raw, &[]).is_ok_and(|u| u.query().is_none()));
            prop_assert!(issuer.discovery_url().is_ok_and(|d| d.path().ends_with("/.well-known/openid-configuration")));
        }
    }
}
