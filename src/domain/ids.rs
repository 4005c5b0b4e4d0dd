//! Identifier newtypes. Each has a private field and one way in: `parse` (outside input)
//! or a constructor that makes a fresh random value.

use super::ParseError;
use rand::RngCore;
use std::fmt;

/// The MCP subject: the `sub` the primary IdP puts in the MCP access token. Opaque to us;
/// compared byte for byte, never normalised, never matched against names or e-mails.
/// Stored as `TEXT` and read back through [`Subject::parse`] (`text_column!` in
/// `domain`): a stored value that no longer parses is a decode error, not a subject.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct Subject(String);

impl Subject {
    /// OIDC Core 2: `sub` is at most 255 ASCII characters; we accept up to 255 printable
    /// Unicode characters, since IdPs differ (characters, not bytes: the length JSON Schema
    /// and the OpenAPI contract count), but never control characters.
    pub fn parse(s: &str) -> Result<Self, ParseError> {
        if s.is_empty() {
            return Err(ParseError("subject must not be empty"));
        }
        if s.chars().count() > 255 {
            return Err(ParseError("subject must be at most 255 characters"));
        }
        if s.chars().any(char::is_control) {
            return Err(ParseError("subject must not contain control characters"));
        }
        Ok(Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

macro_rules! slug_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Lower-case ASCII letters, digits, `-` and `_`, 1 to 64 characters, starting
            /// with a letter or digit.
            pub fn parse(s: &str) -> Result<Self, ParseError> {
                let ok = !s.is_empty()
                    && s.len() <= 64
                    && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
                    && s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric());
                if ok {
                    Ok(Self(s.to_owned()))
                } else {
                    Err(ParseError(concat!($what, " must be 1-64 characters of a-z, 0-9, '-' or '_'")))
                }
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

slug_id!(
    /// A tenant: one MCP server registration.
    TenantId,
    "tenant id"
);
/// The name of `[idp]` where a tenant or a login names its IdP.
pub const DEFAULT_IDP: &str = "default";

slug_id!(
    /// A configured primary identity provider: `default` (`[idp]`) or an `[idps.<name>]`.
    IdpName,
    "idp name"
);

slug_id!(
    /// A configured downstream provider (`github`, `google`, `dev`, ...).
    ProviderId,
    "provider"
);

/// What a connection is the connection of: one per tenant, subject and provider (the
/// table's unique key), as the store reads and writes it and the caches key it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnectionKey {
    pub tenant: TenantId,
    pub subject: Subject,
    pub provider: ProviderId,
}

/// The public lookup part of an API key (`mcpc_<id>_<secret>`): 16 lower-case hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(transparent)]
pub struct ApiKeyId(String);

impl ApiKeyId {
    pub fn generate() -> Self {
        Self(hex16(rand::rng().next_u64()))
    }

    pub fn parse(s: &str) -> Result<Self, ParseError> {
        if s.len() == 16 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            Ok(Self(s.to_owned()))
        } else {
            Err(ParseError("api key id must be 16 lower-case hex digits"))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as the 64-bit number its 16 hex digits spell (for compact keys in memory).
    pub fn to_bits(&self) -> u64 {
        u64::from_str_radix(&self.0, 16).unwrap_or(0)
    }

    pub fn from_bits(bits: u64) -> Self {
        Self(hex16(bits))
    }
}

/// `n` as 16 lower-case hex digits, as `format!("{n:016x}")` writes them, without the
/// formatter's machinery (a tenth of its instructions): API-key ids, and the request id
/// every request gets.
pub fn hex16(n: u64) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(16);
    for shift in (0..16).rev() {
        out.push(char::from(DIGITS[((n >> (shift * 4)) & 0xf) as usize]));
    }
    out
}

impl fmt::Display for ApiKeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who called the API: an API key, or a workload (its caller id, issue 44). The trail
/// stores either id where a key id goes, and its `by` says which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub id: ApiKeyId,
    pub workload: bool,
}

impl Caller {
    /// As an operator's change names who made it (`by`).
    pub fn operator_text(&self) -> String {
        if self.workload { format!("operator workload {}", self.id) } else { format!("operator key {}", self.id) }
    }

    /// As a tenant admin's action names its actor.
    pub fn actor(&self) -> String {
        if self.workload { format!("workload:{}", self.id) } else { format!("api_key:{}", self.id) }
    }
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
        #[serde(transparent)]
        pub struct $name(uuid::Uuid);

        impl $name {
            /// 128 bits from the OS-seeded CSPRNG (not a v4 UUID, which has only 122).
            pub fn generate() -> Self {
                let mut b = [0u8; 16];
                rand::rng().fill_bytes(&mut b);
                Self(uuid::Uuid::from_bytes(b))
            }

            pub fn parse(s: &str) -> Result<Self, ParseError> {
                // Only the canonical hyphenated lower-case form: one spelling per id.
                match uuid::Uuid::try_parse(s) {
                    Ok(u) if u.hyphenated().to_string() == s => Ok(Self(u)),
                    _ => Err(ParseError(concat!($what, " is not a valid id"))),
                }
            }

            pub fn from_uuid(u: uuid::Uuid) -> Self {
                Self(u)
            }

            pub fn as_uuid(&self) -> uuid::Uuid {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0.hyphenated(), f)
            }
        }
    };
}

uuid_id!(
    /// Handle of an elicitation: the only thing a connect URL carries.
    ElicitationId,
    "elicitation id"
);
uuid_id!(
    /// A stored downstream connection.
    ConnectionId,
    "connection id"
);
uuid_id!(
    /// A tenant's webhook endpoint.
    WebhookId,
    "webhook id"
);

#[cfg(test)]
mod tests {
    #[test]
    fn sixteen_hex_digits_are_written_as_format_writes_them() {
        for n in [0, 1, 0xf, 0x10, 0xdead_beef, 0x0123_4567_89ab_cdef, u64::MAX, 1 << 63] {
            assert_eq!(super::hex16(n), format!("{n:016x}"));
        }
        assert!(super::ApiKeyId::parse(super::ApiKeyId::generate().as_str()).is_ok());
    }

    #[test]
    fn an_api_key_id_survives_its_bits() {
        for id in ["0000000000000000", "0123456789abcdef", "ffffffffffffffff", "00000000000000a0"] {
            let parsed = super::ApiKeyId::parse(id).unwrap();
            assert_eq!(super::ApiKeyId::from_bits(parsed.to_bits()), parsed, "{id}");
        }
    }

    use super::*;

    #[test]
    fn subject_refuses_empty_long_and_control_characters() {
        assert!(Subject::parse("").is_err());
        assert!(Subject::parse(&"a".repeat(256)).is_err());
        assert!(Subject::parse("alice\n").is_err());
        assert!(Subject::parse("ali\u{0}ce").is_err());
        assert!(Subject::parse(&"a".repeat(255)).is_ok());
        assert!(Subject::parse(&"é".repeat(255)).is_ok(), "characters, not bytes");
        assert!(Subject::parse(&"é".repeat(256)).is_err());
        assert_eq!(Subject::parse("Alice@Example").unwrap().as_str(), "Alice@Example");
    }

    #[test]
    fn provider_id_is_a_lower_case_slug() {
        assert!(ProviderId::parse("github").is_ok());
        assert!(ProviderId::parse("my-idp_2").is_ok());
        assert!(ProviderId::parse("GitHub").is_err());
        assert!(ProviderId::parse("-x").is_err());
        assert!(ProviderId::parse("").is_err());
        assert!(ProviderId::parse("git hub").is_err());
        assert!(ProviderId::parse(&"a".repeat(65)).is_err());
    }

    #[test]
    fn elicitation_ids_are_random_and_parse_only_canonically() {
        let a = ElicitationId::generate();
        let b = ElicitationId::generate();
        assert_ne!(a, b);
        assert_eq!(ElicitationId::parse(&a.to_string()).unwrap(), a);
        assert!(ElicitationId::parse(&a.to_string().to_uppercase()).is_err());
        assert!(ElicitationId::parse(&a.to_string().replace('-', "")).is_err());
        assert!(ElicitationId::parse("not-an-id").is_err());
    }

    #[test]
    fn api_key_ids_are_sixteen_hex_digits() {
        let id = ApiKeyId::generate();
        assert_eq!(ApiKeyId::parse(id.as_str()).unwrap(), id);
        assert!(ApiKeyId::parse("0123456789ABCDEF").is_err());
        assert!(ApiKeyId::parse("0123").is_err());
    }
}
