//! The tasks that keep the caches honest: the change listener (`LISTEN/NOTIFY`, with a
//! ping that proves it hears before the caches serve) and the confirmer, which re-reads the
//! versions of entries in use before they reach their maximum age.

use super::*;

/// Listens for change notifications until the process ends; reconnects on its own.
pub fn spawn_listener(
    pool: PgPool,
    listen_url: Option<secrecy::SecretString>,
    caches: Arc<Caches>,
    api_keys: Arc<crate::api_keys::ApiKeyVerifier>,
    tenants: Arc<crate::tenants::Tenants>,
) {
    tokio::spawn(async move {
        loop {
            if let Err(e) = listen(&pool, listen_url.as_ref(), &caches, &api_keys, &tenants).await {
                tracing::warn!(error = %e, "change listener failed; caches bypassed until it is back");
            }
            caches.set_healthy(false);
            api_keys.set_listening(false);
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    });
}

async fn listen(
    pool: &PgPool,
    listen_url: Option<&secrecy::SecretString>,
    caches: &Caches,
    api_keys: &crate::api_keys::ApiKeyVerifier,
    tenants: &crate::tenants::Tenants,
) -> Result<(), sqlx::Error> {
    let mut listener = match listen_url {
        Some(url) => sqlx::postgres::PgListener::connect(secrecy::ExposeSecret::expose_secret(url)).await?,
        None => sqlx::postgres::PgListener::connect_with(pool).await?,
    };
    listener.listen_all([CONNECTIONS, KILL_SWITCHES, API_KEYS, ELICITATIONS, PING]).await?;
    // Prove the round trip before serving from the caches.
    let token = crate::crypto::random_token(16);
    sqlx::query("SELECT pg_notify($1, $2)").bind(PING).bind(&token).execute(pool).await?;
    loop {
        match listener.try_recv().await? {
            None => return Ok(()), // connection lost; the caller flushes and reconnects
            Some(n) => match n.channel() {
                CONNECTIONS => caches.invalidate_connection(n.payload()),
                KILL_SWITCHES => caches.invalidate_kill_switches(),
                ELICITATIONS => caches.waiters.changed(n.payload()),
                API_KEYS => {
                    api_keys.on_notification(n.payload());
                    if n.payload().starts_with("tenant:") {
                        tenants.reload(pool).await?;
                    }
                }
                PING if n.payload() == token => {
                    // Changes made while we were not listening are in the table.
                    tenants.reload(pool).await?;
                    // The key verifier first: once the caches say they listen, all do.
                    api_keys.set_listening(true);
                    caches.set_healthy(true);
                    tracing::info!("change listener ready; caches serving");
                }
                PING => caches.release_barrier(n.payload()),
                _ => {}
            },
        }
    }
}

/// Re-reads, in batches, the entries in use before they reach their maximum age, so that a
/// connection in steady use stays cached while the database confirms it every few
/// seconds. An entry nobody asks for is not re-read and ages out.
pub fn spawn_confirmer(pool: PgPool, caches: Arc<Caches>) {
    if !caches.enabled {
        return;
    }
    // A pass over every shard each max_age/20, often enough that entries falling due at
    // different moments are re-read at different moments too; a few shards per tick, so
    // that each tick's read is small and Postgres gets a steady trickle of them.
    let pass = (caches.max_age / 20).max(Duration::from_millis(50));
    let every = pass / (SHARDS / SHARDS_PER_TICK) as u32;
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_shard = 0;
        let mut due = Vec::new();
        loop {
            tick.tick().await;
            if !caches.is_serving() {
                continue;
            }
            for _ in 0..SHARDS_PER_TICK {
                caches.due_in_shard(next_shard, &mut due);
                next_shard = (next_shard + 1) % SHARDS;
            }
            for batch in due.chunks(CONFIRM_BATCH) {
                let read_ms = caches.now_ms();
                let batch_ids: Vec<Uuid> = batch.iter().map(|d| d.id).collect();
                match crate::store::connections::row_versions(&pool, &batch_ids).await {
                    Ok(rows) => {
                        let (confirmed, dropped) = caches.confirm(read_ms, batch, &rows);
                        tracing::debug!(asked = batch.len(), confirmed, dropped, "cache entries re-read");
                    }
                    // The entries simply age out; the next pass tries again.
                    Err(e) => tracing::warn!(error = %e, "re-reading cache entries failed"),
                }
            }
            due.clear();
        }
    });
}
