//! Property tests of the parsers at the service's edge (subjects, slug, UUID and API key
//! ids, scopes, presented API keys, `return_to`, the callback query and its state,
//! configured endpoint URLs) and of the vault's seals (token fields and the OAuth state).
//! Each parser accepts exactly what its rule allows, compared with a model written here,
//! and never panics; a seal opens to what was sealed, and only unchanged and for its own
//! binding.

use crate::support::KEY_A;
use actix_web::web::Query;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mcp_connect::api_keys::parse_key;
use mcp_connect::crypto;
use mcp_connect::domain::{ApiKeyId, ConnectionId, ElicitationId, ProviderId, Scopes, Subject, TenantId};
use mcp_connect::flows::connect::STATE_PURPOSE;
use mcp_connect::flows::login::{LOGIN_PURPOSE, path_and_query, safe_return_to};
use mcp_connect::oauth::callback::CallbackQuery;
use mcp_connect::oauth::urls::{Issuer, UrlRuleError, endpoint, is_loopback};
use mcp_connect::vault::{Field, Keyring, Vault, VaultError};
use proptest::prelude::*;
use proptest::sample::{Index, select};
use secrecy::{ExposeSecret, SecretString};
use url::Url;
use uuid::Uuid;

// ---------------------------------------------------------------------------------------
// Generators shared by several properties.

/// Any string at all: every `char`, controls and newlines included (`any::<String>()`
/// never yields a newline).
fn any_string(max_chars: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..=max_chars).prop_map(String::from_iter)
}

/// `count` pieces, mostly from `pieces` (the inputs a rule is about), some arbitrary.
fn made_of(pieces: &'static [&'static str], count: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    let piece = prop_oneof![8 => select(pieces).prop_map(str::to_owned), 1 => any_string(4)];
    prop::collection::vec(piece, count).prop_map(|p| p.concat())
}

/// 256 random bits, base64url without padding: the shape of states, sessions and key secrets.
fn token_256() -> impl Strategy<Value = String> {
    any::<[u8; 32]>().prop_map(|b| URL_SAFE_NO_PAD.encode(b))
}

fn is_lower_hex(b: u8) -> bool {
    matches!(b, b'0'..=b'9' | b'a'..=b'f')
}

// ---------------------------------------------------------------------------------------
// Subject

/// Unicode category Cc, which is what `char::is_control` means.
fn is_cc(c: char) -> bool {
    c <= '\u{1f}' || ('\u{7f}'..='\u{9f}').contains(&c)
}

const CONTROLS: &[char] = &['\0', '\t', '\n', '\r', '\u{1b}', '\u{1f}', '\u{7f}', '\u{80}', '\u{85}', '\u{9f}'];

/// Printable strings from empty to past 255 characters (multi-byte ones included), with
/// at most one control character somewhere.
fn subject_like() -> impl Strategy<Value = String> {
    let printable = prop_oneof![
        6 => prop::char::range('!', '~'),
        1 => select(vec![' ', 'é', '€', '𝄞', '\u{a0}', '\u{200b}']),
    ];
    (prop::collection::vec(printable, 0..=270), prop::option::of((any::<Index>(), select(CONTROLS)))).prop_map(
        |(mut chars, control)| {
            if let Some((at, c)) = control {
                chars.insert(at.index(chars.len() + 1), c);
            }
            String::from_iter(chars)
        },
    )
}

proptest! {
    /// `Subject::parse` accepts exactly the non-empty strings of at most 255 characters without a
    /// control character, and keeps them byte for byte.
    #[test]
    fn subject_accepts_exactly_short_non_empty_strings_without_control_characters(
        s in prop_oneof![subject_like(), any_string(300)],
    ) {
        let accepted = !s.is_empty() && s.chars().count() <= 255 && !s.chars().any(is_cc);
        let parsed = Subject::parse(&s).ok();
        prop_assert_eq!(parsed.as_ref().map(Subject::as_str), accepted.then_some(s.as_str()));
        prop_assert_eq!(parsed.map(|p| p.to_string()), accepted.then(|| s.clone()));
    }
}

// ---------------------------------------------------------------------------------------
// Slug ids: tenants and providers

fn is_slug(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=64).contains(&b.len())
        && matches!(b[0], b'a'..=b'z' | b'0'..=b'9')
        && b.iter().all(|&c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_'))
}

proptest! {
    /// `TenantId::parse` and `ProviderId::parse` accept exactly 1-64 bytes of `[a-z0-9_-]`
    /// starting with `[a-z0-9]`, and keep them as given.
    #[test]
    fn slug_ids_accept_exactly_lower_case_slugs_of_1_to_64_bytes(
        s in prop_oneof!["[a-z0-9][a-z0-9_-]{0,70}", "[a-z0-9_A-Z. é-]{0,70}", any_string(70)],
    ) {
        let expected = is_slug(&s).then(|| s.clone());
        prop_assert_eq!(TenantId::parse(&s).ok().map(|t| t.as_str().to_owned()), expected.clone());
        prop_assert_eq!(ProviderId::parse(&s).ok().map(|p| p.to_string()), expected);
    }
}

// ---------------------------------------------------------------------------------------
// Scopes

/// RFC 6749 §3.3: `scope-token = 1*( %x21 / %x23-5B / %x5D-7E )`, here at most 256 bytes.
fn is_scope_token(s: &str) -> bool {
    (1..=256).contains(&s.len()) && s.bytes().all(|b| matches!(b, 0x21 | 0x23..=0x5b | 0x5d..=0x7e))
}

/// Valid scope tokens, from a pool small enough that lists repeat some, up to 256 bytes.
fn scope_token() -> impl Strategy<Value = String> {
    prop_oneof![4 => "[a-c:]{1,2}", 4 => "[!#-\\[\\]-~]{1,12}", 1 => "[!#-\\[\\]-~]{256}"]
}

/// Scope tokens or near misses: a space, quote, backslash, non-ASCII or control
/// character, nothing at all, or a byte too many.
fn scope_like() -> impl Strategy<Value = String> {
    prop_oneof![8 => scope_token(), 1 => "[ -~é]{0,8}", 1 => "[!#-\\[\\]-~]{257}", 1 => any_string(4)]
}

proptest! {
    /// `Scopes::parse` accepts a list exactly when it has at most 50 items, each a scope token.
    #[test]
    fn scopes_accept_exactly_up_to_50_scope_tokens(items in prop::collection::vec(scope_like(), 0..=55)) {
        let accepted = items.len() <= 50 && items.iter().all(|s| is_scope_token(s));
        prop_assert_eq!(Scopes::parse(&items).is_ok(), accepted);
    }

    /// What `Scopes::parse` accepts is the items sorted, each once.
    #[test]
    fn accepted_scopes_are_the_sorted_distinct_items(items in prop::collection::vec(scope_token(), 0..=55)) {
        let mut expected = items.clone();
        expected.sort();
        expected.dedup();
        let parsed = Scopes::parse(&items).ok().map(|s| s.as_slice().to_vec());
        prop_assert_eq!(parsed, (items.len() <= 50).then_some(expected));
    }

    /// The same scopes in another order are the same value.
    #[test]
    fn scopes_do_not_depend_on_order(
        (items, shuffled) in prop::collection::vec(scope_token(), 0..=50)
            .prop_flat_map(|v| (Just(v.clone()), Just(v).prop_shuffle())),
    ) {
        prop_assert_eq!(Scopes::parse(&shuffled).unwrap(), Scopes::parse(&items).unwrap());
    }
}

// ---------------------------------------------------------------------------------------
// UUID ids: elicitations and connections

fn is_canonical_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => is_lower_hex(b),
        })
}

fn canonical_uuid(n: u128) -> String {
    Uuid::from_u128(n).hyphenated().to_string()
}

const UUID_EDITS: &[char] = &['0', '9', 'a', 'f', 'A', 'F', 'g', '-', '{', '}', ' ', 'é'];

/// Canonical UUIDs, the same with one character replaced or removed, and anything at all.
fn uuid_like() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u128>().prop_map(canonical_uuid),
        (any::<u128>(), any::<Index>(), select(UUID_EDITS)).prop_map(|(n, at, c)| {
            let mut s = canonical_uuid(n);
            let i = at.index(s.len());
            s.replace_range(i..=i, &c.to_string());
            s
        }),
        (any::<u128>(), any::<Index>()).prop_map(|(n, at)| {
            let mut s = canonical_uuid(n);
            s.remove(at.index(s.len()));
            s
        }),
        any_string(40),
    ]
}

proptest! {
    /// `ElicitationId::parse` and `ConnectionId::parse` accept exactly the canonical
    /// lower-case hyphenated UUID.
    #[test]
    fn uuid_ids_accept_exactly_the_canonical_form(s in uuid_like()) {
        let canonical = is_canonical_uuid(&s);
        prop_assert_eq!(ElicitationId::parse(&s).is_ok(), canonical);
        prop_assert_eq!(ConnectionId::parse(&s).is_ok(), canonical);
    }

    /// An id's `to_string()` is its UUID's canonical form and parses back to the same id.
    #[test]
    fn uuid_ids_round_trip_through_display(n in any::<u128>()) {
        let u = Uuid::from_u128(n);
        let (e, c) = (ElicitationId::from_uuid(u), ConnectionId::from_uuid(u));
        prop_assert_eq!(e.to_string(), canonical_uuid(n));
        prop_assert_eq!(ElicitationId::parse(&e.to_string()), Ok(e));
        prop_assert_eq!(ConnectionId::parse(&c.to_string()), Ok(c));
    }

    /// The other spellings of a UUID (simple, braced, URN, upper case) are refused, unless
    /// one happens to be the canonical text (upper case of a UUID without letters).
    #[test]
    fn other_spellings_of_a_uuid_are_refused(n in any::<u128>()) {
        let u = Uuid::from_u128(n);
        let canonical = canonical_uuid(n);
        let spellings = [u.simple().to_string(), u.braced().to_string(), u.urn().to_string(), canonical.to_uppercase()];
        for spelling in spellings {
            prop_assert_eq!(ElicitationId::parse(&spelling).is_ok(), spelling == canonical, "{}", spelling);
            prop_assert_eq!(ConnectionId::parse(&spelling).is_ok(), spelling == canonical, "{}", spelling);
        }
    }
}

// ---------------------------------------------------------------------------------------
// API keys: `mcpc_<16 lower-case hex>_<43 base64url>`

/// The key format, written out; the id of a well-formed key.
fn key_id_of(presented: &str) -> Option<&str> {
    let rest = presented.strip_prefix("mcpc_")?;
    let (id, secret) = (rest.get(..16)?, rest.get(16..)?.strip_prefix('_')?);
    let well_formed = id.bytes().all(is_lower_hex)
        && secret.len() == 43
        && secret.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    well_formed.then_some(id)
}

const BAD_PREFIXES: &[&str] = &["", "mcpc", "MCPC_", "mcpk_", "mcpc-", " mcpc_", "xmcpc_"];
const BAD_SEPARATORS: &[&str] = &["-", "", "__"];
const NON_HEX: &[char] = &['A', 'F', 'G', 'g', 'x', 'z', '-', '_', ' ', 'é'];

fn key_id_hex() -> impl Strategy<Value = String> {
    any::<u64>().prop_map(|n| format!("{n:016x}"))
}

/// Keys put together from right and wrong parts, and anything at all.
fn key_like() -> impl Strategy<Value = String> {
    let prefix = prop_oneof![3 => Just("mcpc_"), 1 => select(BAD_PREFIXES)];
    let id = prop_oneof![3 => "[0-9a-f]{16}", 1 => "[0-9a-fA-Fg]{14,18}"];
    let separator = prop_oneof![3 => Just("_"), 1 => select(BAD_SEPARATORS)];
    let secret = prop_oneof![3 => "[A-Za-z0-9_-]{43}", 1 => "[A-Za-z0-9_+/=.é-]{0,46}"];
    prop_oneof![
        4 => (prefix, id, separator, secret).prop_map(|(p, i, s, k)| format!("{p}{i}{s}{k}")),
        1 => any_string(70),
    ]
}

/// A well-formed key with one thing wrong: the prefix, an id too short or with a non-hex
/// digit, a secret empty, too short or too long.
fn malformed_key() -> impl Strategy<Value = String> {
    prop_oneof![
        (select(BAD_PREFIXES), key_id_hex(), token_256()).prop_map(|(p, id, s)| format!("{p}{id}_{s}")),
        (key_id_hex(), 0..16usize, token_256()).prop_map(|(id, n, s)| format!("mcpc_{}_{s}", &id[..n])),
        (key_id_hex(), any::<Index>(), select(NON_HEX), token_256()).prop_map(|(mut id, at, c, s)| {
            let i = at.index(id.len());
            id.replace_range(i..=i, &c.to_string());
            format!("mcpc_{id}_{s}")
        }),
        (key_id_hex(), token_256(), 0..43usize).prop_map(|(id, s, n)| format!("mcpc_{id}_{}", &s[..n])),
        (key_id_hex(), token_256(), "[A-Za-z0-9_-]{1,3}").prop_map(|(id, s, more)| format!("mcpc_{id}_{s}{more}")),
    ]
}

proptest! {
    /// `ApiKeyId::parse` accepts exactly 16 lower-case hex digits.
    #[test]
    fn api_key_ids_are_exactly_sixteen_lower_case_hex_digits(
        s in prop_oneof!["[0-9a-f]{16}", "[0-9a-fA-Fg]{14,18}", any_string(20)],
    ) {
        prop_assert_eq!(ApiKeyId::parse(&s).is_ok(), s.len() == 16 && s.bytes().all(is_lower_hex));
    }

    /// An id made from 64 bits spells them, gives them back, and parses as itself.
    #[test]
    fn api_key_ids_survive_their_bits(bits in any::<u64>()) {
        let id = ApiKeyId::from_bits(bits);
        prop_assert_eq!(id.to_bits(), bits);
        prop_assert_eq!(ApiKeyId::parse(id.as_str()), Ok(id.clone()));
    }

    /// `parse_key` accepts exactly the key format and returns the key's id.
    #[test]
    fn presented_keys_parse_exactly_by_the_key_format(presented in key_like()) {
        let parsed = parse_key(&presented);
        prop_assert_eq!(parsed.as_ref().map(ApiKeyId::as_str), key_id_of(&presented));
    }

    /// A key built the way `NewApiKey` builds one parses to its id.
    #[test]
    fn well_formed_keys_parse_to_their_id(bits in any::<u64>(), secret in token_256()) {
        let id = ApiKeyId::from_bits(bits);
        prop_assert_eq!(parse_key(&format!("mcpc_{id}_{secret}")), Some(id));
    }

    /// A key with any one part wrong is refused.
    #[test]
    fn malformed_keys_are_refused(presented in malformed_key()) {
        prop_assert_eq!(parse_key(&presented), None);
    }
}

// ---------------------------------------------------------------------------------------
// return_to

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

// ---------------------------------------------------------------------------------------
// The callback query and its state

const CALLBACK_PARAMETERS: [&str; 4] = ["code", "state", "iss", "error"];

const QUERY_PIECES: &[&str] = &[
    "code=",
    "state=",
    "iss=",
    "error=",
    "error_description=",
    "c%6Fde=",
    "st%61te=",
    "&",
    "=",
    "%",
    "%2",
    "%26",
    "%3D",
    "+",
    ";",
    "&&",
    "x",
];

proptest! {
    /// An arbitrary query parses (as the handlers' `web::Query` does) exactly when none of
    /// `code`, `state`, `iss`, `error` is repeated (RFC 6749 §3.1), and then each holds the
    /// decoded value its parameter had, whatever else the query carries.
    #[test]
    fn callback_query_holds_exactly_its_decoded_parameters(query in made_of(QUERY_PIECES, 0..12)) {
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        let values = |name: &str| pairs.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect::<Vec<_>>();
        let repeated = CALLBACK_PARAMETERS.into_iter().any(|name| values(name).len() > 1);
        match Query::<CallbackQuery>::from_query(&query) {
            Ok(q) => {
                prop_assert!(!repeated, "a repeated parameter was accepted: {query:?}");
                for (name, value) in CALLBACK_PARAMETERS.into_iter().zip([&q.code, &q.state, &q.iss, &q.error]) {
                    prop_assert_eq!(value.as_deref(), values(name).first().copied(), "{}", name);
                }
            }
            Err(_) => prop_assert!(repeated, "refused: {query:?}"),
        }
    }

    /// Any values, encoded as a provider encodes them, come back exactly; unknown
    /// parameters are ignored.
    #[test]
    fn callback_query_keeps_every_value_as_sent(
        fields in prop::array::uniform4(prop::option::of(any_string(40))),
        extra in prop::collection::vec(
            (
                "[a-z_]{1,12}".prop_filter("not a callback parameter", |n| !CALLBACK_PARAMETERS.contains(&n.as_str())),
                any_string(10),
            ),
            0..4,
        ),
    ) {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        for (name, value) in &extra {
            form.append_pair(name, value);
        }
        for (name, value) in CALLBACK_PARAMETERS.into_iter().zip(&fields) {
            if let Some(value) = value {
                form.append_pair(name, value);
            }
        }
        let q = Query::<CallbackQuery>::from_query(&form.finish()).unwrap().into_inner();
        prop_assert_eq!([q.code, q.state, q.iss, q.error], fields);
    }

    /// The callback's `state` (and every other token we hand out) is taken only as 43
    /// base64url characters: 256 bits, the form `random_token(32)` makes.
    #[test]
    fn callback_state_is_accepted_only_as_a_256_bit_token(
        s in prop_oneof![token_256(), "[A-Za-z0-9_+/=.-]{41,45}", any_string(50)],
    ) {
        let token = s.len() == 43 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        prop_assert_eq!(crypto::looks_like_token(&s), token);
    }
}

// ---------------------------------------------------------------------------------------
// Configured endpoint and issuer URLs

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

proptest! {
    /// The two properties above hold for what is accepted; these show that what should be
    /// accepted is (a validator that refused everything would pass them).
    #[test]
    fn plain_paths_and_https_urls_are_accepted(
        base in select(BASES),
        path in "(/[a-z0-9._-]{1,12}){0,6}(\\?[a-z]{1,6}=[a-z0-9]{0,8})?",
        host in "[a-z][a-z0-9-]{0,20}[a-z0-9]",
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

// ---------------------------------------------------------------------------------------
// Vault: token fields

fn vault() -> Vault {
    Vault::new(Keyring::parse(KEY_A).unwrap())
}

fn slug_text() -> impl Strategy<Value = String> {
    "[a-z0-9][a-z0-9_-]{0,12}"
}

fn subject_text() -> impl Strategy<Value = String> {
    "\\PC{1,24}"
}

/// Tenant, subject, provider and connection of a row, as generated (for `Debug`).
type RowParts = (String, String, String, u128);

fn row_parts() -> impl Strategy<Value = RowParts> {
    (slug_text(), subject_text(), slug_text(), any::<u128>())
}

/// A row's typed identity, owned, for the vault's associated data.
struct RowIds {
    tenant: TenantId,
    subject: Subject,
    provider: ProviderId,
    connection: ConnectionId,
    generation: Option<i64>,
}

impl RowIds {
    fn binding(&self) -> mcp_connect::vault::RowBinding<'_> {
        mcp_connect::vault::RowBinding {
            tenant: &self.tenant,
            subject: &self.subject,
            provider: &self.provider,
            connection: self.connection,
            generation: self.generation,
        }
    }
}

fn row_ids((tenant, subject, provider, connection): &RowParts) -> RowIds {
    RowIds {
        tenant: TenantId::parse(tenant).unwrap(),
        subject: Subject::parse(subject).unwrap(),
        provider: ProviderId::parse(provider).unwrap(),
        connection: ConnectionId::from_uuid(Uuid::from_u128(*connection)),
        generation: Some(1),
    }
}

fn field() -> impl Strategy<Value = Field> {
    select(vec![Field::AccessToken, Field::RefreshToken, Field::IdToken])
}

proptest! {
    /// A sealed token opens, for its row and field, to exactly the plaintext.
    #[test]
    fn vault_seal_then_open_returns_the_plaintext(row in row_parts(), field in field(), plaintext in any_string(200)) {
        let (v, ids) = (vault(), row_ids(&row));
        let sealed = v.seal(&ids.binding(), field, &SecretString::from(plaintext.clone())).unwrap();
        let opened = v.open(v.current_key_id().as_str(), &ids.binding(), field, &sealed).unwrap();
        prop_assert_eq!(opened.expose_secret(), plaintext.as_str());
    }

    /// Any one byte of the sealed value changed (nonce, ciphertext or tag), it does not open.
    #[test]
    fn vault_refuses_a_ciphertext_with_any_byte_changed(
        row in row_parts(),
        field in field(),
        plaintext in any_string(64),
        at in any::<Index>(),
        mask in 1..=u8::MAX,
    ) {
        let (v, ids) = (vault(), row_ids(&row));
        let mut sealed = v.seal(&ids.binding(), field, &SecretString::from(plaintext)).unwrap();
        let i = at.index(sealed.len());
        sealed[i] ^= mask;
        let opened = v.open(v.current_key_id().as_str(), &ids.binding(), field, &sealed);
        prop_assert!(matches!(opened, Err(VaultError::Open)), "byte {} ^ {:#04x} opened", i, mask);
    }

    /// A sealed token opens exactly for the tenant, subject, provider, connection and field
    /// it was sealed for: a change of any one of them (each kept or replaced at random)
    /// makes it refuse.
    #[test]
    fn vault_opens_only_for_the_row_and_field_it_was_sealed_for(
        row in row_parts(),
        (tenant, subject, provider, connection) in (
            prop::option::of(slug_text()),
            prop::option::of(subject_text()),
            prop::option::of(slug_text()),
            prop::option::of(any::<u128>()),
        ),
        field in field(),
        other_field in field(),
        plaintext in any_string(64),
    ) {
        let other: RowParts = (
            tenant.unwrap_or_else(|| row.0.clone()),
            subject.unwrap_or_else(|| row.1.clone()),
            provider.unwrap_or_else(|| row.2.clone()),
            connection.unwrap_or(row.3),
        );
        let v = vault();
        let sealed = v.seal(&row_ids(&row).binding(), field, &SecretString::from(plaintext)).unwrap();
        let opens = v.open(v.current_key_id().as_str(), &row_ids(&other).binding(), other_field, &sealed).is_ok();
        prop_assert_eq!(opens, other == row && other_field == field);
    }
}

// ---------------------------------------------------------------------------------------
// Vault: the sealed OAuth state (PKCE verifier and nonce, bound to the state's hash)

proptest! {
    /// The secret sealed for an OAuth state opens, for that state, to exactly what was sealed.
    #[test]
    fn a_sealed_state_opens_to_its_payload(
        state in token_256(),
        payload in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let v = vault();
        let binding = crypto::lookup_hash(STATE_PURPOSE, &state);
        let sealed = v.seal_aux(STATE_PURPOSE, &binding, &payload).unwrap();
        let opened = v.open_aux(v.current_key_id().as_str(), STATE_PURPOSE, &binding, &sealed).unwrap();
        prop_assert_eq!(opened.as_slice(), payload.as_slice());
    }

    /// Any one byte of a sealed state changed, it does not open.
    #[test]
    fn a_sealed_state_with_any_byte_changed_is_refused(
        state in token_256(),
        payload in prop::collection::vec(any::<u8>(), 0..128),
        at in any::<Index>(),
        mask in 1..=u8::MAX,
    ) {
        let v = vault();
        let binding = crypto::lookup_hash(STATE_PURPOSE, &state);
        let mut sealed = v.seal_aux(STATE_PURPOSE, &binding, &payload).unwrap();
        let i = at.index(sealed.len());
        sealed[i] ^= mask;
        let opened = v.open_aux(v.current_key_id().as_str(), STATE_PURPOSE, &binding, &sealed);
        prop_assert!(matches!(opened, Err(VaultError::Open)), "byte {} ^ {:#04x} opened", i, mask);
    }

    /// A sealed state opens neither for another state nor as a login state.
    #[test]
    fn a_sealed_state_opens_only_for_its_state_and_purpose(
        state in token_256(),
        other in token_256(),
        payload in prop::collection::vec(any::<u8>(), 0..128),
    ) {
        prop_assume!(state != other);
        let v = vault();
        let key = v.current_key_id().as_str();
        let binding = crypto::lookup_hash(STATE_PURPOSE, &state);
        let sealed = v.seal_aux(STATE_PURPOSE, &binding, &payload).unwrap();
        let other_state = crypto::lookup_hash(STATE_PURPOSE, &other);
        prop_assert!(v.open_aux(key, STATE_PURPOSE, &other_state, &sealed).is_err());
        prop_assert!(v.open_aux(key, LOGIN_PURPOSE, &binding, &sealed).is_err());
        prop_assert!(v.open_aux(key, LOGIN_PURPOSE, &crypto::lookup_hash(LOGIN_PURPOSE, &state), &sealed).is_err());
    }
}
