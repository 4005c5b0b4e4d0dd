//! The one internal-fault type every flow error wraps: what failed on our side or in a
//! dependency, never because of what the caller sent. Each surface answers a fault in one
//! place (`http::error` for the JSON API, `http::browser::refusals` for pages): a retry
//! where the fault is passing, a generic 500 with the detail in the log otherwise.

/// A failure that is not the caller's: the database, the vault, a sealed value that does
/// not decode, a task that ended abnormally.
#[derive(Debug, thiserror::Error)]
pub enum Fault {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("vault: {0}")]
    Vault(#[from] crate::vault::VaultError),
    #[error("{0}")]
    KeyStore(#[from] crate::vault::kek::KeyStoreError),
    #[error("sealed value: {0}")]
    Encoding(#[from] serde_json::Error),
    #[error("task: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl Fault {
    /// Worth a retry: the database is unreachable, restarting or out of connections, or a
    /// connection was out of step with it. A query error, a vault key that is gone or a
    /// task that panicked is not.
    pub fn is_transient(&self) -> bool {
        match self {
            Fault::Database(e) => crate::store::lookup::transient(e),
            Fault::KeyStore(e) => e.is_transient(),
            Fault::Vault(_) | Fault::Encoding(_) | Fault::Task(_) => false,
        }
    }
}

impl From<crate::keys::KeysError> for Fault {
    fn from(e: crate::keys::KeysError) -> Self {
        match e {
            crate::keys::KeysError::Database(e) => Fault::Database(e),
            crate::keys::KeysError::Store(e) => Fault::KeyStore(e),
            crate::keys::KeysError::Vault(e) => Fault::Vault(e),
        }
    }
}

/// `From` each fault's source for a flow error with a `Fault(Fault)` variant, so `?`
/// works on a query, a seal or a decode inside the flow.
macro_rules! wraps_fault {
    ($($error:ty),* $(,)?) => {$(
        impl From<sqlx::Error> for $error {
            fn from(e: sqlx::Error) -> Self {
                Self::Fault(e.into())
            }
        }
        impl From<crate::vault::VaultError> for $error {
            fn from(e: crate::vault::VaultError) -> Self {
                Self::Fault(e.into())
            }
        }
        impl From<crate::keys::KeysError> for $error {
            fn from(e: crate::keys::KeysError) -> Self {
                Self::Fault(e.into())
            }
        }
        impl From<serde_json::Error> for $error {
            fn from(e: serde_json::Error) -> Self {
                Self::Fault(e.into())
            }
        }
        impl From<tokio::task::JoinError> for $error {
            fn from(e: tokio::task::JoinError) -> Self {
                Self::Fault(e.into())
            }
        }
    )*};
}
pub(crate) use wraps_fault;

#[cfg(test)]
mod tests {
    use super::Fault;

    #[test]
    fn a_lost_or_busy_database_is_transient_and_a_query_error_is_not() {
        assert!(Fault::Database(sqlx::Error::PoolTimedOut).is_transient());
        assert!(Fault::Database(sqlx::Error::PoolClosed).is_transient());
        assert!(Fault::Database(sqlx::Error::Io(std::io::Error::other("reset"))).is_transient());
        assert!(!Fault::Database(sqlx::Error::RowNotFound).is_transient());
        assert!(!Fault::Database(sqlx::Error::ColumnNotFound("x".into())).is_transient());
    }

    #[test]
    fn a_key_store_that_does_not_answer_is_transient_and_one_that_refuses_is_not() {
        use crate::vault::kek::KeyStoreError;
        let down = KeyStoreError::Unavailable { store: "pkcs11", reason: "device removed".into() };
        let no = KeyStoreError::Refused { store: "pkcs11", reason: "no key labelled \"k\"".into() };
        assert!(Fault::from(crate::keys::KeysError::Store(down)).is_transient());
        assert!(!Fault::from(crate::keys::KeysError::Store(no)).is_transient());
    }
}
