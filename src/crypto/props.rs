//! Property test of the shape every token we hand out has (the callback's `state` among
//! them): exactly 43 base64url characters.

use crate::domain::props::{any_string, token_256};
use proptest::prelude::*;

proptest! {
    /// The callback's `state` (and every other token we hand out) is taken only as 43
    /// base64url characters: 256 bits, the form `random_token(32)` makes.
    #[test]
    fn callback_state_is_accepted_only_as_a_256_bit_token(
        s in prop_oneof![token_256(), "[A-Za-z0-9_+/=.-]{41,45}", any_string(50)],
    ) {
        let token = s.len() == 43 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        prop_assert_eq!(super::looks_like_token(&s), token);
    }
}
