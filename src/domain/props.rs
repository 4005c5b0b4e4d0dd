//! Property tests of the ids and scopes parsed at the edge (subjects, slug, UUID and API key
//! ids, scopes): each parser accepts exactly what its rule allows, compared with a model
//! written here, and never panics. The generators at the top are shared with the property
//! tests of the modules above this one (API keys, crypto, OAuth, flows, vault).

use super::{ApiKeyId, ConnectionId, ElicitationId, ProviderId, Scopes, Subject, TenantId};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use proptest::prelude::*;
use proptest::sample::{Index, select};
use uuid::Uuid;

// ---------------------------------------------------------------------------------------
// Generators shared by several properties.

/// Any string at all: every `char`, controls and newlines included (`any::<String>()`
/// never yields a newline).
pub(crate) fn any_string(max_chars: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..=max_chars).prop_map(String::from_iter)
}

/// `count` pieces, mostly from `pieces` (the inputs a rule is about), some arbitrary.
pub(crate) fn made_of(pieces: &'static [&'static str], count: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    let piece = prop_oneof![8 => select(pieces).prop_map(str::to_owned), 1 => any_string(4)];
    prop::collection::vec(piece, count).prop_map(|p| p.concat())
}

/// 256 random bits, base64url without padding: the shape of states, sessions and key secrets.
pub(crate) fn token_256() -> impl Strategy<Value = String> {
    any::<[u8; 32]>().prop_map(|b| URL_SAFE_NO_PAD.encode(b))
}

pub(crate) fn is_lower_hex(b: u8) -> bool {
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
// API key ids (the whole key's format: `api_keys::props`)

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
}
