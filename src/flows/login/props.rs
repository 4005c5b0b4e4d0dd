//! Property tests of `return_to`, the page a login goes back to: whatever is accepted stays
//! on our origin, and what the login stores of it is accepted again unchanged.

use super::{path_and_query, safe_return_to};
use crate::domain::props::made_of;
use crate::net::urls::{Issuer, endpoint};
use proptest::prelude::*;
use proptest::sample::select;
use url::Url;

const BASES: &[&str] = &[
    "https://connect.example.com",
    "https://connect.example.com:8443",
    "http://127.0.0.1:8080",
    "http://[::1]:3000",
    "https://xn--bcher-kva.example",
];

/// The tricks that turn a path into another host: network-path references, backslashes,
/// schemes, userinfo, tabs and newlines the URL parser drops, dot segments plain and
/// percent-encoded, encoded slashes, look-alike slashes.
const RETURN_TO_PIECES: &[&str] = &[
    "/",
    "//",
    "\\",
    "/\\",
    "\\\\",
    "evil.example",
    "https:",
    "https://",
    "javascript:",
    "@",
    "user:pass@",
    "\t",
    "\n",
    "\r",
    " ",
    ".",
    "..",
    "/./",
    "/../",
    "%2f",
    "%2F",
    "%5c",
    "%5C",
    "%2e",
    "%2E",
    "%2e%2e",
    "%09",
    "%0a",
    "%00",
    "%",
    "?",
    "#",
    ":",
    ":443",
    "\u{ff0f}",
    "\u{2215}",
    "\u{3002}",
    "a",
    "connect",
];

/// Tricky compositions (with and without a leading `/`), ordinary paths, paths around the
/// 2 KiB limit, and paths that percent-encoding makes much longer.
fn return_to_like() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => made_of(RETURN_TO_PIECES, 1..8),
        3 => made_of(RETURN_TO_PIECES, 1..8).prop_map(|s| format!("/{s}")),
        2 => "/[a-zA-Z0-9._~%!$&'()*+,;=:@/?#é -]{0,60}",
        1 => "/[a-z/]{2040,2056}",
        1 => "/(é|[a-z]){900,1100}",
    ]
}

proptest! {
    /// Whatever `safe_return_to` accepts is on the base's scheme, host and port (no open
    /// redirect), without userinfo or fragment, with a path a browser cannot read as a
    /// host; and it came from a path-absolute reference of at most 2 KiB without a
    /// backslash or control character.
    #[test]
    fn return_to_never_leads_off_the_base_origin(base in select(BASES), raw in return_to_like()) {
        let base = Url::parse(base).unwrap();
        if let Ok(target) = safe_return_to(&base, &raw) {
            prop_assert_eq!(target.scheme(), base.scheme());
            prop_assert_eq!(target.host(), base.host());
            prop_assert_eq!(target.port_or_known_default(), base.port_or_known_default());
            prop_assert!(target.username().is_empty() && target.password().is_none());
            prop_assert!(target.fragment().is_none());
            prop_assert!(!target.path().starts_with("//") && !target.path().starts_with("/\\"));
            // The Location it becomes, read back the way a browser reads it, stays here too.
            prop_assert_eq!(Url::parse(target.as_str()).unwrap().origin(), base.origin());
            prop_assert!(raw.starts_with('/') && !raw.starts_with("//"));
            prop_assert!(!raw.contains('\\') && !raw.chars().any(char::is_control) && raw.len() <= 2048);
        }
    }

    /// What the login stores of an accepted target (`path_and_query`) is accepted again as
    /// the same URL when the browser leaves; only a target that percent-encoding grew past
    /// the 2 KiB limit may be refused there.
    #[test]
    fn a_stored_return_to_is_accepted_again_unchanged(base in select(BASES), raw in return_to_like()) {
        let base = Url::parse(base).unwrap();
        if let Ok(target) = safe_return_to(&base, &raw) {
            let stored = path_and_query(&target);
            if stored.len() <= 2048 {
                prop_assert_eq!(safe_return_to(&base, &stored), Ok(target));
            }
        }
    }
}

proptest! {
    /// The properties above and those of configured URLs (`net::urls::props`) hold for
    /// what is accepted; these show that what should be accepted is (a validator that
    /// refused everything would pass them).
    #[test]
    fn plain_paths_and_https_urls_are_accepted(
        base in select(BASES),
        path in "(/[a-z0-9._-]{1,12}){0,6}(\\?[a-z]{1,6}=[a-z0-9]{0,8})?",
        // No "--": a label starting "xn--" is punycode and must decode (url refuses "xn--a").
        host in "[a-z][a-z0-9]{0,10}(-[a-z0-9]{1,10}){0,2}",
    ) {
        let base = Url::parse(base).unwrap();
        let path = if path.is_empty() || path.starts_with('?') { format!("/{path}") } else { path };
        prop_assert!(safe_return_to(&base, &path).is_ok(), "{}", path);
        let url = format!("https://{host}.example/oauth{path}");
        prop_assert!(endpoint(&url, &[]).is_ok(), "{}", url);
        let issuer = format!("https://{host}.example");
        prop_assert!(Issuer::parse(&issuer, &[]).is_ok(), "{}", issuer);
    }
}
