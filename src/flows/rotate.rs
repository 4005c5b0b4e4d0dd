//! Key rotation (`rotate-key`): data keys turned on; every data key re-wrapped under the key
//! store's current key-encryption key (one statement each, no sealed row touched); then
//! every value not sealed under its scope's active data key (a value of the releases before
//! data keys, under a keyring key) re-sealed under it, in batches that commit one by one, so
//! the command reports progress, can be interrupted and rerun, and runs beside live
//! instances (rows they are refreshing are skipped and picked up later). Old keyring keys
//! keep opening until this has finished; then they can be removed.

use crate::keys::{Keys, KeysError, Scope};
use crate::store::{self, Db};
use crate::vault::Field;

#[derive(Debug, thiserror::Error)]
pub enum RotateError {
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("connection or webhook {0} does not open ({1}); add the key it was sealed under to the keyring")]
    Unopenable(uuid::Uuid, KeysError),
    #[error("provider {0}'s client secret does not open ({1}); add the key it was sealed under to the keyring")]
    ProviderUnopenable(String, KeysError),
    #[error("data keys: {0}")]
    Keys(#[from] KeysError),
    #[error("client signing keys: {0}")]
    ClientKeys(#[from] crate::keys::client_keys::ClientKeyError),
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RotateReport {
    /// Data keys re-wrapped under the current key-encryption key.
    pub rewrapped: u64,
    /// Retired data keys destroyed: nothing was sealed under them any more.
    pub retired_destroyed: u64,
    pub resealed: u64,
    pub remaining: i64,
    /// Nothing remained: from now on the database refuses sealed values without a seal
    /// generation (rows of the previous release; see `vault`).
    pub legacy_closed: bool,
    /// Nothing remained: from now on the database refuses sealed values of a row that names
    /// an issuer without the issuer bound (rows of the releases before; see `vault`).
    pub unbound_closed: bool,
}

/// How long a retired data key is kept at least: longer than the longest data-key cache
/// (`[vault] data_key_cache_seconds` at most 3600) holds it as a tenant's active key on an
/// instance that did not hear the rotation, and than any write begun with it takes.
pub const RETIRED_KEPT: std::time::Duration = std::time::Duration::from_secs(2 * 3600);

pub async fn rotate_keys(
    pool: &Db,
    keys: &Keys,
    batch: i64,
    progress: impl FnMut(u64, i64),
) -> Result<RotateReport, RotateError> {
    // Run after every instance runs this release (as the switches below): from here on
    // every instance seals under data keys, and older binaries refuse this schema.
    keys.switch_on().await?;
    let rewrapped = keys.rewrap_all(batch).await?;
    let mut report = reseal(pool, keys, batch, Mode::Foreground, progress).await?;
    report.rewrapped = rewrapped;
    // Every sealed value has a generation now: rows without one are refused from here on
    // (run after every instance runs this release: an older one writes none).
    report.legacy_closed = report.remaining == 0 && store::connections::close_legacy_writes(pool).await?;
    report.unbound_closed = report.remaining == 0 && store::connections::close_unbound_writes(pool).await?;
    Ok(report)
}

/// Every value not under its scope's active data key re-sealed under it (connections,
/// webhook secrets, providers' client secrets, remote MCP registrations, client signing
/// keys), in batches that commit one by one; then, once nothing remains, the retired data
/// keys nothing names destroyed. What `rotate-key` does after the re-wrap, and what
/// [`spawn_background`] does on every instance.
pub async fn reseal(
    pool: &Db,
    keys: &Keys,
    batch: i64,
    mode: Mode,
    progress: impl FnMut(u64, i64),
) -> Result<RotateReport, RotateError> {
    let mut done = reseal_connections(pool, keys, batch, mode, progress).await?;
    // In the background a table that fails (a value that does not open) does not keep the
    // others from moving; rotate-key stops at the first and names it.
    let steps = [
        ("webhook secrets", reseal_webhook_secrets(pool, keys, batch).await),
        ("providers' client secrets", reseal_provider_secrets(pool, keys, batch).await),
        ("remote MCP registrations", reseal_remote_clients(pool, keys, batch).await),
        ("client signing keys", crate::keys::client_keys::reseal(pool, keys).await.map_err(RotateError::from)),
    ];
    for (what, step) in steps {
        match (step, mode) {
            (Ok(n), _) => done += n,
            (Err(e), Mode::Background) => {
                metrics::counter!(crate::keys::RESEAL_FAILURES).increment(1);
                tracing::warn!(error = %e, "background re-seal: {what} not moved; the next pass tries again");
            }
            (Err(e), Mode::Foreground) => return Err(e),
        }
    }
    let remaining = store::connections::count_rows_not_under_active_key(pool).await?
        + store::webhooks::count_secrets_not_under_active_key(pool).await?
        + store::providers::count_not_under_active_key(pool).await?
        + store::remote_clients::count_not_under_active_key(pool).await?
        + store::client_keys::count_not_under_active_key(pool).await?
        + keys.not_under_current_kek().await?;
    // A rotated tenant's key, once its values are under the new one (a state still pending
    // under it keeps it until it is spent or expires) and no instance can still seal with it.
    let kept = i64::try_from(RETIRED_KEPT.as_secs()).unwrap_or(i64::MAX);
    let retired_destroyed =
        if remaining == 0 { store::data_keys::destroy_unused_retired(pool, kept).await? } else { 0 };
    Ok(RotateReport { resealed: done, remaining, retired_destroyed, ..RotateReport::default() })
}

/// Every `every` (`[vault] reseal_interval_seconds`; zero: never), while data keys are on
/// and a retired data key is still there, a [`reseal`] pass: a tenant's rotated data key has its values moved under the new one in
/// the background, on every instance at once (rows another instance holds are skipped and
/// picked up by it), and is destroyed once nothing names it. Data keys are not re-wrapped
/// here: during a rolling change of the KEK, instances on the old and the new settings would
/// re-wrap each other's; that stays `rotate-key`'s, run once every instance has the new one.
pub fn spawn_background(pool: Db, keys: std::sync::Arc<Keys>, every: std::time::Duration) {
    if every.is_zero() {
        return;
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            // Work only while a tenant's rotated key is still there: a pass scans the sealed
            // tables, and nothing else makes values leave their scope's active key (values
            // of the releases before data keys are rotate-key's to move).
            let due = match keys.are_on().await {
                Ok(true) => store::data_keys::any_retired(&pool).await,
                other => other,
            };
            match due {
                Ok(true) => {}
                Ok(false) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "background re-seal: whether there is work not read");
                    continue;
                }
            }
            match reseal(&pool, &keys, BACKGROUND_BATCH, Mode::Background, |_, _| {}).await {
                Ok(r) => {
                    metrics::gauge!(crate::keys::RESEAL_REMAINING).set(r.remaining as f64);
                    metrics::counter!(crate::keys::RESEALED).increment(r.resealed);
                    if r.resealed > 0 || r.retired_destroyed > 0 {
                        tracing::info!(
                            resealed = r.resealed,
                            remaining = r.remaining,
                            retired_destroyed = r.retired_destroyed,
                            "background re-seal"
                        );
                    }
                }
                Err(e) => {
                    metrics::counter!(crate::keys::RESEAL_FAILURES).increment(1);
                    tracing::warn!(error = %e, "background re-seal failed; the next pass tries again");
                }
            }
        }
    });
}

/// Rows a background pass locks per transaction: small, so that a hand-out's refresh waits
/// for none of them long.
const BACKGROUND_BATCH: i64 = 50;

/// Who re-seals: `rotate-key` (stops at a value that does not open, naming it) or an
/// instance in the background (counts it in `mcp_connect_vault_reseal_failures_total`, logs
/// it, and goes on past it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Foreground,
    Background,
}

/// The connections' tokens not under their tenant's active data key, re-sealed under it.
async fn reseal_connections(
    pool: &Db,
    keys: &Keys,
    batch: i64,
    mode: Mode,
    mut progress: impl FnMut(u64, i64),
) -> Result<u64, RotateError> {
    let total = store::connections::count_rows_not_under_active_key(pool).await?;
    let (mut done, mut after) = (0u64, uuid::Uuid::nil());
    loop {
        let mut tx = pool.begin().await?;
        let rows = store::connections::lock_rows_not_under_active_key(&mut *tx, after, batch).await?;
        let Some(last) = rows.last() else { return Ok(done) };
        // In the background a pass goes over each row once (one that did not move waits for
        // the next pass); rotate-key starts over each batch, so that a row a refresh held
        // when it was passed is picked up before it reports (it stops at one that fails).
        if mode == Mode::Background {
            after = last.id.as_uuid();
        }
        let mut moved = 0u64;
        for row in &rows {
            match reseal_row(keys, &mut tx, row).await {
                Ok(()) => moved += 1,
                Err(e) if mode == Mode::Background => {
                    metrics::counter!(crate::keys::RESEAL_FAILURES).increment(1);
                    tracing::warn!(connection = %row.id, error = %e, "background re-seal: a connection left as it is");
                }
                Err(e) => return Err(e),
            }
        }
        // Mid-batch after an earlier batch committed: some rows under the new key, this
        // batch's writes about to be lost.
        if done > 0 {
            crate::domain::failpoint::stop_here("rotate.before_second_commit").await;
        }
        tx.commit().await?;
        done += moved;
        progress(done, total);
    }
}

/// One connection's tokens opened under their key and sealed under the tenant's active one.
async fn reseal_row(
    keys: &Keys,
    tx: &mut store::Tx,
    row: &store::connections::ConnectionRow,
) -> Result<(), RotateError> {
    let unopenable = |e: KeysError| RotateError::Unopenable(row.id.as_uuid(), e);
    let from = keys
        .opening(row.key_id.as_deref().unwrap_or_default(), Scope::Tenant(&row.tenant_id))
        .await
        .map_err(unopenable)?;
    let to = keys.sealing(Scope::Tenant(&row.tenant_id)).await?;
    // Opened at the row's generation, sealed at its next (a row sealed before generations
    // gets its first here), with its issuer bound where it names one.
    let (binding, next) = (row.binding(), row.next_binding());
    let reseal = |field: Field, ct: &Option<Vec<u8>>| -> Result<Option<Vec<u8>>, RotateError> {
        let Some(ct) = ct else { return Ok(None) };
        let pt = from.open(&binding, field, ct).map_err(|e| unopenable(e.into()))?;
        to.seal(&next, field, &pt).map(Some).map_err(|e| unopenable(e.into()))
    };
    let access = reseal(Field::AccessToken, &row.access_token_ct)?;
    let refresh = reseal(Field::RefreshToken, &row.refresh_token_ct)?;
    let id_token = reseal(Field::IdToken, &row.id_token_ct)?;
    store::connections::store_resealed(
        &mut **tx,
        row.id,
        to.key_id(),
        row.next_generation(),
        access.as_deref(),
        refresh.as_deref(),
        id_token.as_deref(),
    )
    .await?;
    Ok(())
}

/// The webhook signing secrets (current and, in its overlap, the one before; one whose
/// overlap is over is dropped), re-sealed under their tenant's data key in batches like the
/// connections.
async fn reseal_webhook_secrets(pool: &Db, keys: &Keys, batch: i64) -> Result<u64, RotateError> {
    let mut done = 0u64;
    // Overlaps end by the database's clock, as the worker reads them.
    let now = store::webhooks::database_now(pool).await?;
    loop {
        let mut tx = pool.begin().await?;
        let rows = store::webhooks::lock_secrets_not_under_active_key(&mut *tx, batch).await?;
        if rows.is_empty() {
            return Ok(done);
        }
        for row in &rows {
            use crate::webhooks::{Slot, open_secret, seal_secret};
            let unopenable = |e: KeysError| RotateError::Unopenable(row.id.as_uuid(), e);
            let to = keys.sealing(Scope::Tenant(&row.tenant_id)).await?;
            // Opened at the endpoint's generation, sealed at its next (an endpoint sealed
            // before generations gets its first here).
            let (g, next) = (row.secret_version, crate::vault::next_generation(row.secret_version));
            let from = keys.opening(&row.key_id, Scope::Tenant(&row.tenant_id)).await.map_err(unopenable)?;
            let secret =
                open_secret(&from, row.id, g, Slot::Current, &row.secret_sealed).map_err(|e| unopenable(e.into()))?;
            let sealed = seal_secret(&to, row.id, next, Slot::Current, &secret).map_err(|e| unopenable(e.into()))?;
            let in_overlap = row.previous_until.is_some_and(|u| u > now);
            let previous = match (&row.previous_key_id, &row.previous_secret_sealed) {
                (Some(k), Some(ct)) if in_overlap => {
                    let from = keys.opening(k, Scope::Tenant(&row.tenant_id)).await.map_err(unopenable)?;
                    let old = open_secret(&from, row.id, g, Slot::Previous, ct).map_err(|e| unopenable(e.into()))?;
                    Some(seal_secret(&to, row.id, next, Slot::Previous, &old).map_err(|e| unopenable(e.into()))?)
                }
                _ => None,
            };
            store::webhooks::store_resealed_secrets(&mut *tx, row.id, to.key_id(), &sealed, previous.as_deref(), next)
                .await?;
        }
        tx.commit().await?;
        done += rows.len() as u64;
    }
}

/// The client secrets of providers made over the operator API, re-sealed under the
/// service scope's data key at their next generation.
async fn reseal_provider_secrets(pool: &Db, keys: &Keys, batch: i64) -> Result<u64, RotateError> {
    use crate::providers::client_secret::{open_client_secret, row_identity, seal_client_secret};
    let mut done = 0u64;
    loop {
        let mut tx = pool.begin().await?;
        let rows = store::providers::lock_not_under_active_key(&mut *tx, batch).await?;
        let to = keys.sealing(Scope::Service).await?;
        if rows.is_empty() {
            return Ok(done);
        }
        for row in &rows {
            let unopenable = |e: KeysError| RotateError::ProviderUnopenable(row.id.clone(), e);
            let next = row.secret_version + 1;
            let identity = row_identity(row);
            let from = keys.opening(&row.key_id, Scope::Service).await.map_err(unopenable)?;
            let secret = open_client_secret(&from, row, &identity).map_err(|e| unopenable(e.into()))?;
            let sealed =
                seal_client_secret(&to, &row.id, next, &identity, &secret).map_err(|e| unopenable(e.into()))?;
            store::providers::store_resealed(&mut *tx, &row.id, to.key_id(), &sealed, next).await?;
        }
        tx.commit().await?;
        done += rows.len() as u64;
    }
}

/// The client secrets of registrations at remote MCP servers, re-sealed under the service
/// scope's data key (one that does not open stops the rotation, as a provider's does).
async fn reseal_remote_clients(pool: &Db, keys: &Keys, batch: i64) -> Result<u64, RotateError> {
    let mut done = 0u64;
    loop {
        let mut tx = pool.begin().await?;
        let rows = store::remote_clients::lock_not_under_active_key(&mut *tx, batch).await?;
        let to = keys.sealing(Scope::Service).await?;
        if rows.is_empty() {
            return Ok(done);
        }
        for row in &rows {
            let unopenable = |e: KeysError| RotateError::ProviderUnopenable(row.provider_id.to_string(), e);
            let from = keys.opening(&row.key_id, Scope::Service).await.map_err(unopenable)?;
            let sealed = super::remote::reseal(&from, &to, row).map_err(|e| unopenable(e.into()))?;
            store::remote_clients::store_resealed(&mut *tx, row, to.key_id(), &sealed).await?;
        }
        tx.commit().await?;
        done += rows.len() as u64;
    }
}
