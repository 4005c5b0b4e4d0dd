//! Property tests of the seals of token fields: a seal opens to what was sealed, and only
//! unchanged and for its own row and field.

use super::{Field, Keyring, RowBinding, SealKey, VaultError};
use crate::domain::props::any_string;
use crate::domain::{ConnectionId, ProviderId, Subject, TenantId};
use proptest::prelude::*;
use proptest::sample::{Index, select};
use secrecy::{ExposeSecret, SecretString};
use uuid::Uuid;

/// The test harness's first vault key (`mcp_connect_testkit::KEY_A`).
const KEY_A: &str = "k-old:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

/// A keyring key (rows sealed before data keys) and a data key (the fourth format).
fn vault() -> impl Strategy<Value = SealKey> {
    select(vec![Keyring::parse(KEY_A).unwrap().current().clone(), SealKey::data(Uuid::from_u128(0x5eed), &[0x42; 32])])
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
    issuer: &'static str,
}

impl RowIds {
    fn binding(&self) -> RowBinding<'_> {
        RowBinding {
            tenant: &self.tenant,
            subject: &self.subject,
            provider: &self.provider,
            connection: self.connection,
            generation: self.generation,
            issuer: Some(self.issuer),
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
        issuer: "https://idp.example",
    }
}

fn field() -> impl Strategy<Value = Field> {
    select(vec![Field::AccessToken, Field::RefreshToken, Field::IdToken])
}

proptest! {
    /// A sealed token opens, for its row and field, to exactly the plaintext.
    #[test]
    fn vault_seal_then_open_returns_the_plaintext(v in vault(), row in row_parts(), field in field(), plaintext in any_string(200)) {
        let ids = row_ids(&row);
        let sealed = v.seal(&ids.binding(), field, &SecretString::from(plaintext.clone())).unwrap();
        let opened = v.open(&ids.binding(), field, &sealed).unwrap();
        prop_assert_eq!(opened.expose_secret(), plaintext.as_str());
    }

    /// Any one byte of the sealed value changed (nonce, ciphertext or tag), it does not open.
    #[test]
    fn vault_refuses_a_ciphertext_with_any_byte_changed(
        v in vault(),
        row in row_parts(),
        field in field(),
        plaintext in any_string(64),
        at in any::<Index>(),
        mask in 1..=u8::MAX,
    ) {
        let ids = row_ids(&row);
        let mut sealed = v.seal(&ids.binding(), field, &SecretString::from(plaintext)).unwrap();
        let i = at.index(sealed.len());
        sealed[i] ^= mask;
        let opened = v.open(&ids.binding(), field, &sealed);
        prop_assert!(matches!(opened, Err(VaultError::Open)), "byte {} ^ {:#04x} opened", i, mask);
    }

    /// A sealed token opens exactly for the tenant, subject, provider, connection and field
    /// it was sealed for: a change of any one of them (each kept or replaced at random)
    /// makes it refuse.
    #[test]
    fn vault_opens_only_for_the_row_and_field_it_was_sealed_for(
        v in vault(),
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
        let sealed = v.seal(&row_ids(&row).binding(), field, &SecretString::from(plaintext)).unwrap();
        let opens = v.open(&row_ids(&other).binding(), other_field, &sealed).is_ok();
        prop_assert_eq!(opens, other == row && other_field == field);
    }
}
