//! Property tests of the sealed OAuth state (PKCE verifier and nonce, bound to the
//! state's hash): it opens to what was sealed, and only unchanged, for its own state and
//! purpose.

use super::STATE_PURPOSE;
use crate::crypto;
use crate::domain::props::token_256;
use crate::flows::login::LOGIN_PURPOSE;
use crate::vault::{Keyring, SealKey, VaultError};
use proptest::prelude::*;
use proptest::sample::Index;

/// The test harness's first vault key (`mcp_connect_testkit::KEY_A`).
const KEY_A: &str = "k-old:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A keyring key (states sealed before data keys) or a data key.
fn vault() -> impl Strategy<Value = SealKey> {
    proptest::sample::select(vec![
        Keyring::parse(KEY_A).unwrap().current().clone(),
        SealKey::data(uuid::Uuid::from_u128(0x5eed), &[0x42; 32]),
    ])
}

proptest! {
    /// The secret sealed for an OAuth state opens, for that state, to exactly what was sealed.
    #[test]
    fn a_sealed_state_opens_to_its_payload(
        v in vault(),
        state in token_256(),
        payload in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let binding = crypto::lookup_hash(STATE_PURPOSE, &state);
        let sealed = v.seal_aux(STATE_PURPOSE, &binding, &payload).unwrap();
        let opened = v.open_aux(STATE_PURPOSE, &binding, &sealed).unwrap();
        prop_assert_eq!(opened.as_slice(), payload.as_slice());
    }

    /// Any one byte of a sealed state changed, it does not open.
    #[test]
    fn a_sealed_state_with_any_byte_changed_is_refused(
        v in vault(),
        state in token_256(),
        payload in prop::collection::vec(any::<u8>(), 0..128),
        at in any::<Index>(),
        mask in 1..=u8::MAX,
    ) {
        let binding = crypto::lookup_hash(STATE_PURPOSE, &state);
        let mut sealed = v.seal_aux(STATE_PURPOSE, &binding, &payload).unwrap();
        let i = at.index(sealed.len());
        sealed[i] ^= mask;
        let opened = v.open_aux(STATE_PURPOSE, &binding, &sealed);
        prop_assert!(matches!(opened, Err(VaultError::Open)), "byte {} ^ {:#04x} opened", i, mask);
    }

    /// A sealed state opens neither for another state nor as a login state.
    #[test]
    fn a_sealed_state_opens_only_for_its_state_and_purpose(
        v in vault(),
        state in token_256(),
        other in token_256(),
        payload in prop::collection::vec(any::<u8>(), 0..128),
    ) {
        prop_assume!(state != other);
        let binding = crypto::lookup_hash(STATE_PURPOSE, &state);
        let sealed = v.seal_aux(STATE_PURPOSE, &binding, &payload).unwrap();
        let other_state = crypto::lookup_hash(STATE_PURPOSE, &other);
        prop_assert!(v.open_aux(STATE_PURPOSE, &other_state, &sealed).is_err());
        prop_assert!(v.open_aux(LOGIN_PURPOSE, &binding, &sealed).is_err());
        prop_assert!(v.open_aux(LOGIN_PURPOSE, &crypto::lookup_hash(LOGIN_PURPOSE, &state), &sealed).is_err());
    }
}
