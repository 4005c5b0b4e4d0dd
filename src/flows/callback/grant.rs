//! The exchanged grant sealed into the vault, bound to its row and generation, and
//! written: a new connection, or the existing one's grant replaced. Inside the caller's
//! transaction; the caller commits.

use super::{CallbackError, CallbackRefusal, Grant};
use crate::domain::{Account, ConnectionId, Scopes};
use crate::oauth::flow;
use crate::store::{self, connections::ConnectionRow, elicitations::ElicitationRow};
use crate::vault::{Field, RowBinding, SealKey, VaultError};
use secrecy::SecretString;
use time::OffsetDateTime;

/// The exchanged tokens sealed to their row.
struct Sealed {
    access: Vec<u8>,
    refresh: Option<Vec<u8>>,
    id: Option<Vec<u8>>,
}

impl Sealed {
    fn of(key: &SealKey, row: &RowBinding<'_>, t: &flow::TokenSet) -> Result<Self, VaultError> {
        let seal = |field: Field, token: &SecretString| key.seal(row, field, token);
        Ok(Self {
            access: seal(Field::AccessToken, &t.access_token)?,
            refresh: t.refresh_token.as_ref().map(|t| seal(Field::RefreshToken, t)).transpose()?,
            id: t.id_token.as_ref().map(|t| seal(Field::IdToken, t)).transpose()?,
        })
    }
}

/// Seals (with `key`, the tenant's) and writes the grant; returns the connection id and the scopes granted. A new
/// row that another link of the same subject and provider inserted first is refused
/// (`connected_concurrently`): that grant is kept, the caller revokes this one.
pub async fn save(
    key: &SealKey,
    tx: &mut store::Tx,
    e: &ElicitationRow,
    x: &Grant<'_>,
    account: Option<&Account>,
    existing: Option<&ConnectionRow>,
    now: OffsetDateTime,
) -> Result<(ConnectionId, Scopes), CallbackError> {
    let connection = existing.map_or_else(ConnectionId::generate, |c| c.id);
    // A reused row's next seal generation (its earlier grants' ciphertexts no longer open
    // if put back), a new row's first.
    let generation = crate::vault::next_generation(existing.and_then(|c| c.seal_version));
    let row = RowBinding {
        tenant: &x.key.tenant,
        subject: &x.key.subject,
        provider: &x.key.provider,
        connection,
        generation: Some(generation),
        // The person's issuer, as the row will name it: bound into the ciphertexts.
        issuer: e.issuer.as_deref(),
    };
    let tokens = x.tokens;
    let sealed = Sealed::of(key, &row, tokens)?;
    let granted = super::checks::granted_scopes(tokens.scope.as_deref(), &e.scopes);
    let grant = store::connections::SealedGrant {
        generation,
        key_id: key.key_id(),
        access_token_ct: &sealed.access,
        refresh_token_ct: sealed.refresh.as_deref(),
        id_token_ct: sealed.id.as_deref(),
        token_type: &tokens.token_type,
        access_expires_at: tokens.expires_in.and_then(|d| time::Duration::try_from(d).ok()).map(|d| now + d),
    };
    let (account_id, account_login) = (account.map(|a| a.id.as_str()), account.and_then(|a| a.login.as_deref()));
    match existing {
        Some(_) => {
            store::connections::replace_grant(
                &mut **tx,
                connection,
                e.issuer.as_deref(),
                account_id,
                account_login,
                &granted,
                &grant,
            )
            .await?;
        }
        None => {
            let new = store::connections::NewConnection {
                id: connection,
                key: &x.key,
                issuer: e.issuer.as_deref(),
                account_id,
                account_login,
                scopes: &granted,
                grant,
            };
            if !store::connections::insert_connection(&mut **tx, &new).await? {
                return Err(CallbackRefusal::ConnectedConcurrently.into());
            }
        }
    }
    Ok((connection, granted))
}
