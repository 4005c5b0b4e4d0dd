//! Property tests of the presented key's format, `mcpc_<16 lower-case hex>_<43 base64url>`:
//! `parse_key` accepts exactly what the format allows, compared with a model written here.

use super::parse_key;
use crate::domain::ApiKeyId;
use crate::domain::props::{any_string, is_lower_hex, token_256};
use proptest::prelude::*;
use proptest::sample::{Index, select};

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
