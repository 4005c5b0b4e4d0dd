//! Key rotation: re-seal every ciphertext under the current key, in batches that commit
//! one by one, so the command reports progress, can be interrupted and rerun, and runs
//! beside live instances (rows they are refreshing are skipped and picked up later).
//! Old keys keep opening until this has finished; then they can be removed.

use crate::store::{self, Db};
use crate::vault::{Field, Vault};

#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("connection or webhook {0} does not open with the keyring ({1}); add the key it was sealed under")]
    Unopenable(uuid::Uuid, crate::vault::VaultError),
    #[error("provider {0}'s client secret does not open with the keyring ({1}); add the key it was sealed under")]
    ProviderUnopenable(String, crate::vault::VaultError),
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RotateReport {
    pub resealed: u64,
    pub remaining: i64,
    /// Nothing remained: from now on the database refuses sealed values without a seal
    /// generation (rows of the previous release; see `vault`).
    pub legacy_closed: bool,
    /// Nothing remained: from now on the database refuses sealed values of a row that names
    /// an issuer without the issuer bound (rows of the releases before; see `vault`).
    pub unbound_closed: bool,
}

pub async fn rotate_keys(
    pool: &Db,
    vault: &Vault,
    batch: i64,
    mut progress: impl FnMut(u64, i64),
) -> Result<RotateReport, RotateError> {
    let current = vault.current_key_id().as_str().to_owned();
    let total = store::connections::count_rows_not_under_key(pool, &current).await?;
    let mut done = 0u64;
    loop {
        let mut tx = pool.begin().await?;
        let rows = store::connections::lock_rows_not_under_key(&mut *tx, &current, batch).await?;
        if rows.is_empty() {
            break;
        }
        for row in &rows {
            // Opened at the row's generation, sealed at its next (a row sealed before
            // generations gets its first here), with its issuer bound where it names one.
            let (binding, next) = (row.binding(), row.next_binding());
            let old = row.key_id.as_deref().unwrap_or_default();
            let reseal = |field: Field, ct: &Option<Vec<u8>>| -> Result<Option<Vec<u8>>, RotateError> {
                let Some(ct) = ct else { return Ok(None) };
                let pt =
                    vault.open(old, &binding, field, ct).map_err(|e| RotateError::Unopenable(row.id.as_uuid(), e))?;
                vault.seal(&next, field, &pt).map(Some).map_err(|e| RotateError::Unopenable(row.id.as_uuid(), e))
            };
            let access = reseal(Field::AccessToken, &row.access_token_ct)?;
            let refresh = reseal(Field::RefreshToken, &row.refresh_token_ct)?;
            let id_token = reseal(Field::IdToken, &row.id_token_ct)?;
            store::connections::store_resealed(
                &mut *tx,
                row.id,
                &current,
                row.next_generation(),
                access.as_deref(),
                refresh.as_deref(),
                id_token.as_deref(),
            )
            .await?;
        }
        // Mid-batch after an earlier batch committed: some rows under the new key, this
        // batch's writes about to be lost.
        if done > 0 {
            crate::domain::failpoint::stop_here("rotate.before_second_commit").await;
        }
        tx.commit().await?;
        done += rows.len() as u64;
        progress(done, total);
    }
    done += reseal_webhook_secrets(pool, vault, &current, batch).await?;
    done += reseal_provider_secrets(pool, vault, &current, batch).await?;
    done += reseal_remote_clients(pool, vault, &current, batch).await?;
    let remaining = store::connections::count_rows_not_under_key(pool, &current).await?
        + store::webhooks::count_secrets_not_under_key(pool, &current).await?
        + store::providers::count_not_under_key(pool, &current).await?
        + store::remote_clients::count_not_under_key(pool, &current).await?;
    // Every sealed value has a generation now: rows without one are refused from here on
    // (run after every instance runs this release: an older one writes none).
    let legacy_closed = remaining == 0 && store::connections::close_legacy_writes(pool).await?;
    let unbound_closed = remaining == 0 && store::connections::close_unbound_writes(pool).await?;
    Ok(RotateReport { resealed: done, remaining, legacy_closed, unbound_closed })
}

/// The webhook signing secrets (current and, in its overlap, the one before; one whose
/// overlap is over is dropped), re-sealed under the current key in batches like the
/// connections.
async fn reseal_webhook_secrets(pool: &Db, vault: &Vault, current: &str, batch: i64) -> Result<u64, RotateError> {
    let mut done = 0u64;
    // Overlaps end by the database's clock, as the worker reads them.
    let now = store::webhooks::database_now(pool).await?;
    loop {
        let mut tx = pool.begin().await?;
        let rows = store::webhooks::lock_secrets_not_under_key(&mut *tx, current, batch).await?;
        if rows.is_empty() {
            return Ok(done);
        }
        for row in &rows {
            use crate::webhooks::{Slot, open_secret, seal_secret};
            let unopenable = |e| RotateError::Unopenable(row.id.as_uuid(), e);
            // Opened at the endpoint's generation, sealed at its next (an endpoint sealed
            // before generations gets its first here).
            let (g, next) = (row.secret_version, crate::vault::next_generation(row.secret_version));
            let secret =
                open_secret(vault, row.id, g, Slot::Current, &row.key_id, &row.secret_sealed).map_err(unopenable)?;
            let sealed = seal_secret(vault, row.id, next, Slot::Current, &secret).map_err(unopenable)?;
            let in_overlap = row.previous_until.is_some_and(|u| u > now);
            let previous = match (&row.previous_key_id, &row.previous_secret_sealed) {
                (Some(k), Some(ct)) if in_overlap => {
                    let old = open_secret(vault, row.id, g, Slot::Previous, k, ct).map_err(unopenable)?;
                    Some(seal_secret(vault, row.id, next, Slot::Previous, &old).map_err(unopenable)?)
                }
                _ => None,
            };
            store::webhooks::store_resealed_secrets(&mut *tx, row.id, current, &sealed, previous.as_deref(), next)
                .await?;
        }
        tx.commit().await?;
        done += rows.len() as u64;
    }
}

/// The client secrets of providers made over the operator API, re-sealed under the
/// current key at their next generation.
async fn reseal_provider_secrets(pool: &Db, vault: &Vault, current: &str, batch: i64) -> Result<u64, RotateError> {
    use crate::providers::client_secret::{open_client_secret, row_identity, seal_client_secret};
    let mut done = 0u64;
    loop {
        let mut tx = pool.begin().await?;
        let rows = store::providers::lock_not_under_key(&mut *tx, current, batch).await?;
        if rows.is_empty() {
            return Ok(done);
        }
        for row in &rows {
            let unopenable = |e| RotateError::ProviderUnopenable(row.id.clone(), e);
            let next = row.secret_version + 1;
            let identity = row_identity(row);
            let secret = open_client_secret(vault, row, &identity).map_err(unopenable)?;
            let sealed = seal_client_secret(vault, &row.id, next, &identity, &secret).map_err(unopenable)?;
            store::providers::store_resealed(&mut *tx, &row.id, current, &sealed, next).await?;
        }
        tx.commit().await?;
        done += rows.len() as u64;
    }
}

/// The client secrets of registrations at remote MCP servers, re-sealed under the current
/// key (one that does not open stops the rotation, as a provider's does).
async fn reseal_remote_clients(pool: &Db, vault: &Vault, current: &str, batch: i64) -> Result<u64, RotateError> {
    let mut done = 0u64;
    loop {
        let mut tx = pool.begin().await?;
        let rows = store::remote_clients::lock_not_under_key(&mut *tx, current, batch).await?;
        if rows.is_empty() {
            return Ok(done);
        }
        for row in &rows {
            let sealed = super::remote::reseal(vault, row)
                .map_err(|e| RotateError::ProviderUnopenable(row.provider_id.to_string(), e))?;
            store::remote_clients::store_resealed(&mut *tx, row, current, &sealed).await?;
        }
        tx.commit().await?;
        done += rows.len() as u64;
    }
}
