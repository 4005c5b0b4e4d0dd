//! Secret-holding types. `Debug` prints a placeholder, there is no `Display`, and the value
//! is zeroed on drop (`secrecy`). Reading it takes an explicit `expose_secret()`.

use secrecy::{ExposeSecret, SecretString};
use std::fmt;

/// A server-scope API key of mcp-connect (`mcpc_<id>_<secret>`).
#[derive(Clone)]
pub struct ApiKey(SecretString);

impl ApiKey {
    pub fn new(key: impl Into<String>) -> Self {
        Self(SecretString::from(key.into()))
    }

    pub fn expose_secret(&self) -> &str {
        self.0.expose_secret()
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([REDACTED])")
    }
}

/// A downstream provider's access token, as `/v1/token` hands it out.
#[derive(Clone)]
pub struct AccessToken(SecretString);

impl AccessToken {
    pub fn new(token: impl Into<String>) -> Self {
        Self(SecretString::from(token.into()))
    }

    pub fn expose_secret(&self) -> &str {
        self.0.expose_secret()
    }
}

impl fmt::Debug for AccessToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccessToken([REDACTED])")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_contains_the_secret() {
        let key = ApiKey::new("mcpc_0123456789abcdef_supersecret");
        let token = AccessToken::new("gho_supersecret");
        assert_eq!(format!("{key:?}"), "ApiKey([REDACTED])");
        assert_eq!(format!("{token:?}"), "AccessToken([REDACTED])");
        assert_eq!(token.expose_secret(), "gho_supersecret");
    }
}

/// The user's own MCP access token, sent as `subject_token` to prove the subject. Sent in
/// the request body only; never shown by `Debug`.
#[derive(Clone)]
pub struct SubjectToken(SecretString);

impl SubjectToken {
    pub fn new(token: impl Into<String>) -> Self {
        Self(SecretString::from(token.into()))
    }

    pub fn expose_secret(&self) -> &str {
        self.0.expose_secret()
    }
}

impl fmt::Debug for SubjectToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SubjectToken([REDACTED])")
    }
}

impl serde::Serialize for SubjectToken {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.0.expose_secret())
    }
}
