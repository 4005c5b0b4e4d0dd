//! The query of an authorization server's redirect back to a client (RFC 6749 §4.1.2,
//! §4.1.2.1; RFC 9207 `iss`), for the login at the IdP and the provider callback alike.

/// The query of a provider's redirect back to us. `Debug` never prints the code or state.
#[derive(Default, Clone, serde::Deserialize)]
pub struct CallbackQuery {
    pub code: Option<String>,
    pub state: Option<String>,
    pub iss: Option<String>,
    pub error: Option<String>,
}

impl std::fmt::Debug for CallbackQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CallbackQuery {{ {} }}", self.describe())
    }
}

impl CallbackQuery {
    /// Never print the code or state.
    pub fn describe(&self) -> String {
        format!(
            "code: {}, state: {}, iss: {:?}, error: {:?}",
            self.code.is_some(),
            self.state.is_some(),
            self.iss,
            self.error
        )
    }
}

#[cfg(test)]
mod props;
