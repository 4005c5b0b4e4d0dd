//! Issue 43's rows: the hand-out with the key-encryption key in an HSM (`pkcs11`, Debian's
//! SoftHSM2) and in AWS KMS (`aws-kms`, moto's KMS on loopback) against the keyring
//! (`local`) in the same run, cache on and cache off; and the time a KEK rotation takes for
//! 1,000 tenants' data keys in each store.
//!
//! A hand-out calls no key store while its tenant's data key is cached: with the lookup
//! cache on nothing is read at all, with it off the row is read and opened with the cached
//! data key. So the rates should match; the rows show that neither path waits for a store.
//! The bench tenant's data key moves between stores as a re-wrap moves it: its bytes
//! (unwrapped once by the keyring) wrapped by the next store, the row updated in place, so
//! every instance reads the same table and the same ciphertexts.
//!
//! For each cache setting, one instance per store is started and warmed (each unwraps the
//! key once, while it is wrapped by its store); once the warm-ups' audit minute has been
//! written, short saturating loops run back to back inside one minute: `local`, then each
//! store followed by `local` again, [`ROUNDS`] times over. Each store loop is judged against
//! the mean of the `local` loops just before and after it (the machine's drift cancels out),
//! and a store's ratio is the median of its rounds: on a 2-core machine shared with other
//! work one loop in a round can lose a quarter of its rate to a neighbour, and a single
//! round judged the store by that (0.78 × in one run, 0.98 × in the next, same code).
//!
//! The rotation rows run each on a database of their own (1,000 tenants, each with a data
//! key wrapped under the store's first KEK), timing `Keys::rewrap_all` to a second KEK: a
//! keyring key put first, a new HSM key label, the KMS alias pointed at a new key.

use crate::db::BenchDb;
use crate::http1::Target;
use crate::load::{self, Summary};
use crate::phase::Phase;
use crate::progress;
use crate::service::ServiceSetup;
use anyhow::Context;
use mcp_connect::domain::{SystemClock, TenantId};
use mcp_connect::keys::{CacheBound, Keys, Scope};
use mcp_connect::store::Db;
use mcp_connect::vault::Keyring;
use mcp_connect::vault::kek::aws_kms::{AwsKmsKeyStore, AwsKmsSettings};
use mcp_connect::vault::kek::pkcs11::{Pkcs11KeyStore, Pkcs11Settings};
use mcp_connect::vault::kek::{KeyStore, LocalKeyStore, WrapContext};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Tenants whose data keys the rotation rows re-wrap.
pub const ROTATION_TENANTS: usize = 1_000;
/// Rounds of `store, local` loops per store and cache setting; a ratio is their median.
pub const ROUNDS: usize = 3;
/// One loop: 1 + 2 × stores × [`ROUNDS`] of them (13 with both stores) fit in a minute, so
/// no audit flush falls inside the measured loops.
const LOOP: Duration = Duration::from_secs(4);
const HSM_PIN: &str = "1234";

#[derive(Debug, Clone, Serialize)]
pub struct StoreRun {
    pub store: String,
    /// Saturating closed loops after the warm-up: lookup cache on, then off.
    pub cached: Summary,
    pub uncached: Summary,
}

#[derive(Debug, Clone, Serialize)]
pub struct StoreRatio {
    pub store: String,
    /// The median of `rounds_cached` / `rounds_uncached`.
    pub cached: f64,
    pub uncached: f64,
    /// Each round: the store's loop ÷ the mean of the `local` loops just before and after it.
    pub rounds_cached: Vec<f64>,
    pub rounds_uncached: Vec<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Rotation {
    pub store: String,
    pub data_keys: u64,
    pub seconds: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct KeyStoresRun {
    /// The loops in the order they ran: `local`, then each store that could be set up
    /// followed by `local` again, [`ROUNDS`] times.
    pub runs: Vec<StoreRun>,
    pub ratios: Vec<StoreRatio>,
    pub rotations: Vec<Rotation>,
    /// Stores left out, and why (not installed).
    pub skipped: Vec<String>,
}

impl KeyStoresRun {
    pub fn errors(&self) -> u64 {
        self.runs.iter().map(|r| r.cached.errors + r.uncached.errors).sum()
    }
}

/// A SoftHSM2 token of this run's own, with a KEK labelled `kek-1`, in the directory
/// `SOFTHSM2_CONF` names (bench/run.sh sets it; the service processes inherit it).
struct Hsm {
    settings: Pkcs11Settings,
    pin_file: PathBuf,
}

impl Hsm {
    async fn make(work: &Path) -> anyhow::Result<Hsm> {
        let conf = PathBuf::from(std::env::var_os("SOFTHSM2_CONF").context("SOFTHSM2_CONF is not set (bench/run.sh)")?);
        let dir = conf.parent().context("SOFTHSM2_CONF has no directory")?.to_owned();
        let tokens = dir.join("tokens");
        std::fs::create_dir_all(&tokens)?;
        if !conf.exists() {
            std::fs::write(
                &conf,
                format!("directories.tokendir = {}\nobjectstore.backend = file\nlog.level = ERROR\n", tokens.display()),
            )?;
        }
        let module = ["/usr/lib/softhsm/libsofthsm2.so", "/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so"]
            .into_iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
            .context("SoftHSM2 is not installed (bench/run.sh installs softhsm2)")?;
        let token_label = format!("bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
        let out = tokio::process::Command::new("softhsm2-util")
            .args(["--init-token", "--free", "--label", &token_label, "--pin", HSM_PIN, "--so-pin", "5678"])
            .output()
            .await
            .context("softhsm2-util (bench/run.sh installs softhsm2)")?;
        anyhow::ensure!(out.status.success(), "softhsm2-util: {}", String::from_utf8_lossy(&out.stderr));
        let pin_file = work.join("hsm-pin");
        std::fs::write(&pin_file, HSM_PIN)?;
        let settings = Pkcs11Settings {
            module,
            token_label,
            key_label: "kek-1".to_owned(),
            pin: secrecy::SecretString::from(HSM_PIN.to_owned()),
        };
        Pkcs11KeyStore::create_kek(settings.clone()).await?;
        Ok(Hsm { settings, pin_file })
    }

    fn toml(&self) -> String {
        let s = &self.settings;
        format!(
            "[vault]\nstore = \"pkcs11\"\n[vault.pkcs11]\nmodule = {:?}\ntoken_label = {:?}\nkey_label = {:?}\npin_file = {:?}\n",
            s.module, s.token_label, s.key_label, self.pin_file
        )
    }
}

/// moto's KMS on loopback (tests/kms/moto_kms.py in `.venv-moto`), ended with this.
struct Kms {
    _child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    endpoint: String,
    alias: String,
    secret_file: PathBuf,
}

impl Kms {
    async fn start(work: &Path) -> anyhow::Result<Kms> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let python = root.join(".venv-moto/bin/python");
        anyhow::ensure!(python.exists(), "moto is not installed (bench/run.sh installs .venv-moto)");
        let mut child = tokio::process::Command::new(python)
            .arg(root.join("tests/kms/moto_kms.py"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("start moto_kms.py")?;
        let stdin = child.stdin.take().context("moto's stdin")?;
        let mut lines = BufReader::new(child.stdout.take().context("moto's stdout")?).lines();
        let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .context("moto was not ready within 60 s")??
            .context("moto_kms.py ended before it was ready")?;
        let ready: serde_json::Value = serde_json::from_str(&ready)?;
        let text = |k: &str| ready[k].as_str().map(str::to_owned).with_context(|| format!("moto's {k}"));
        let secret_file = work.join("kms-secret");
        std::fs::write(&secret_file, "testing")?;
        Ok(Kms { endpoint: text("endpoint")?, alias: text("alias")?, _child: child, stdin, lines, secret_file })
    }

    fn settings(&self) -> anyhow::Result<AwsKmsSettings> {
        Ok(AwsKmsSettings {
            key_id: self.alias.clone(),
            region: "eu-central-1".to_owned(),
            endpoint: Some(self.endpoint.parse()?),
            credentials: Some(("testing".to_owned(), secrecy::SecretString::from("testing".to_owned()))),
        })
    }

    fn toml(&self) -> String {
        format!(
            "[vault]\nstore = \"aws-kms\"\n[vault.aws_kms]\nkey_id = {:?}\nregion = \"eu-central-1\"\nendpoint = {:?}\naccess_key_id = \"testing\"\nsecret_access_key_file = {:?}\n",
            self.alias, self.endpoint, self.secret_file
        )
    }

    /// A new key, the alias pointed at it.
    async fn rotate(&mut self) -> anyhow::Result<()> {
        self.stdin.write_all(b"rotate\n").await?;
        self.stdin.flush().await?;
        self.lines.next_line().await?.context("moto ended")?;
        Ok(())
    }
}

/// The bench tenant's active data key: its id, its wrap context's scope, and its bytes as
/// the keyring unwraps them.
async fn bench_tenant_key(
    pool: &mcp_connect::store::PgPool,
    keyring: &str,
) -> anyhow::Result<(uuid::Uuid, zeroize::Zeroizing<[u8; 32]>)> {
    let (id, kek_id, wrapped): (uuid::Uuid, String, Vec<u8>) = sqlx::query_as(
        "SELECT id, kek_id, wrapped FROM data_keys WHERE tenant_id = $1 AND state = 'active' AND kek_store = 'local'",
    )
    .bind(crate::db::TENANT)
    .fetch_one(pool)
    .await
    .context("the bench tenant's data key, wrapped by the keyring")?;
    let local = LocalKeyStore::new(Arc::new(Keyring::parse(keyring)?));
    let bytes = local.unwrap(&kek_id, &WrapContext { data_key: id, scope: crate::db::TENANT }, &wrapped).await?;
    Ok((id, bytes))
}

/// Wraps the data key with `store` and writes the row as a re-wrap does.
async fn move_key(
    pool: &mcp_connect::store::PgPool,
    id: uuid::Uuid,
    bytes: &[u8; 32],
    store: &dyn KeyStore,
) -> anyhow::Result<()> {
    let w = store.wrap(&WrapContext { data_key: id, scope: crate::db::TENANT }, bytes).await?;
    sqlx::query(
        "UPDATE data_keys SET kek_store = $2, kek_id = $3, wrapped = $4, wrap_version = wrap_version + 1 WHERE id = $1",
    )
    .bind(id)
    .bind(store.kind())
    .bind(&w.kek_id)
    .bind(&w.blob)
    .execute(pool)
    .await?;
    Ok(())
}

/// `store`'s loops in `runs` (in the order they ran), each ÷ the mean of its neighbours
/// (`local` loops), and the median of those per cache setting.
fn ratio(runs: &[StoreRun], store: &str) -> StoreRatio {
    let mut rounds_cached = Vec::new();
    let mut rounds_uncached = Vec::new();
    for w in runs.windows(3) {
        let [before, this, after] = w else { continue };
        if this.store != store {
            continue;
        }
        let around = |f: fn(&StoreRun) -> f64| ((f(before) + f(after)) / 2.0).max(1e-9);
        rounds_cached.push(this.cached.rps / around(|r| r.cached.rps));
        rounds_uncached.push(this.uncached.rps / around(|r| r.uncached.rps));
    }
    StoreRatio {
        store: store.to_owned(),
        cached: median(&rounds_cached),
        uncached: median(&rounds_uncached),
        rounds_cached,
        rounds_uncached,
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

impl Phase<'_> {
    /// The key-store rows (see the module doc).
    pub async fn key_stores(&self, work: &Path) -> anyhow::Result<KeyStoresRun> {
        let mut skipped = Vec::new();
        let hsm = Hsm::make(work).await.map_err(|e| skipped.push(format!("pkcs11: {e:#}"))).ok();
        let mut kms = Kms::start(work).await.map_err(|e| skipped.push(format!("aws-kms: {e:#}"))).ok();
        let (id, bytes) = bench_tenant_key(self.pool, &self.setup.vault_keys).await?;
        let local: Arc<dyn KeyStore> = Arc::new(LocalKeyStore::new(Arc::new(Keyring::parse(&self.setup.vault_keys)?)));

        let mut stores: Vec<(Arc<dyn KeyStore>, Option<String>)> = vec![(local.clone(), None)];
        if let Some(h) = &hsm {
            stores.push((Arc::new(Pkcs11KeyStore::open(h.settings.clone()).await?), Some(h.toml())));
        }
        if let Some(k) = &kms {
            stores.push((Arc::new(AwsKmsKeyStore::open(k.settings()?).await?), Some(k.toml())));
        }
        let cached = self.store_rates(&stores, id, &bytes, true).await?;
        let uncached = self.store_rates(&stores, id, &bytes, false).await?;
        // The table as it was: the bench tenant's key wrapped by the keyring.
        move_key(self.pool, id, &bytes, local.as_ref()).await?;
        let runs: Vec<StoreRun> = cached
            .into_iter()
            .zip(uncached)
            .map(|((store, cached), (_, uncached))| StoreRun { store, cached, uncached })
            .collect();
        let ratios = stores.iter().skip(1).map(|(s, _)| ratio(&runs, s.kind())).collect();

        let mut rotations = vec![self.rotation_local().await?];
        if let Some(h) = &hsm {
            rotations.push(self.rotation_pkcs11(h).await?);
        }
        if let Some(k) = &mut kms {
            rotations.push(self.rotation_kms(k).await?);
        }
        Ok(KeyStoresRun { runs, ratios, rotations, skipped })
    }

    /// One instance per store (cache on or off), each started and warmed while the bench
    /// tenant's key is wrapped by its store (it unwraps it once and keeps it); then, once the
    /// warm-ups' audit minute has been written, short saturating loops (`local`, then each
    /// store followed by `local`, [`ROUNDS`] times), all inside one minute: no audit flush.
    async fn store_rates(
        &self,
        stores: &[(Arc<dyn KeyStore>, Option<String>)],
        id: uuid::Uuid,
        bytes: &[u8; 32],
        cache: bool,
    ) -> anyhow::Result<Vec<(String, Summary)>> {
        let (keys, conns, threads) = (self.keys, self.args.concurrency as usize, self.args.client_threads as usize);
        let since = time::OffsetDateTime::now_utc() - time::Duration::minutes(2);
        let written_before = crate::db::handout_events(self.pool, since).await?;
        let mut running = Vec::with_capacity(stores.len());
        let mut answered = 0;
        let result = async {
            for (store, toml) in stores {
                move_key(self.pool, id, bytes, store.as_ref()).await?;
                let setup = ServiceSetup { vault_toml: toml.clone(), ..self.setup.clone() };
                let name = format!("keys-{}-{}", store.kind(), if cache { "cached" } else { "uncached" });
                progress(self.started, &format!("key stores: {name}: start and warm-up"));
                let svc = setup.start(&name, cache).await?;
                let t = Target::token(svc.addr, self.api_key);
                running.push((store.kind().to_owned(), svc));
                let warm = if cache {
                    self.load(move || load::sweep(&t, keys, conns, threads)).await?
                } else {
                    self.load(move || load::closed_loop(&t, keys, conns, threads, Duration::from_secs(2))).await?
                };
                anyhow::ensure!(warm.errors == 0, "{name} warm-up: {}", warm.first_error.unwrap_or_default());
                answered += warm.requests;
            }
            self.wait_for_audit(since, written_before + answered as i64).await?;
            // local, then each store followed by local again, ROUNDS times: each store loop
            // is judged against the local loops just before and after it.
            let stores = 1..running.len();
            let order = std::iter::once(0).chain((0..ROUNDS).flat_map(|_| stores.clone().flat_map(|i| [i, 0])));
            let mut out = Vec::new();
            for i in order {
                let (store, svc) = running.get(i).context("no instance")?;
                let t = Target::token(svc.addr, self.api_key);
                out.push((store.clone(), self.load(move || load::closed_loop(&t, keys, conns, threads, LOOP)).await?));
            }
            anyhow::Ok(out)
        }
        .await;
        for (_, svc) in running {
            if result.is_err() {
                eprintln!("--- {} (tail) ---\n{}", svc.log_path().display(), svc.log_tail(20).await);
            }
            svc.stop().await;
        }
        result
    }

    /// Until the warm-ups' minute has closed and its `written` hand-outs are in the audit
    /// table (at most two minutes): the writer then competes with no measured loop.
    async fn wait_for_audit(&self, since: time::OffsetDateTime, written: i64) -> anyhow::Result<()> {
        let into_minute = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs() % 60;
        progress(self.started, &format!("key stores: waiting {} s for the warm-ups' minute", 62 - into_minute));
        tokio::time::sleep(Duration::from_secs(62 - into_minute)).await;
        let deadline = Instant::now() + Duration::from_secs(120);
        while crate::db::handout_events(self.pool, since).await? < written && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Ok(())
    }

    async fn rotation_local(&self) -> anyhow::Result<Rotation> {
        let (one, two) = (Keyring::generate_entry("r1"), Keyring::generate_entry("r2"));
        let first: Arc<dyn KeyStore> = Arc::new(LocalKeyStore::new(Arc::new(Keyring::parse(&one)?)));
        let second = Keyring::parse(&format!("{two},{one}"))?;
        self.rotation(first, async move { Ok(Arc::new(LocalKeyStore::new(Arc::new(second))) as Arc<dyn KeyStore>) })
            .await
    }

    async fn rotation_pkcs11(&self, hsm: &Hsm) -> anyhow::Result<Rotation> {
        let first = Arc::new(Pkcs11KeyStore::open(hsm.settings.clone()).await?);
        let next = Pkcs11Settings { key_label: "kek-2".to_owned(), ..hsm.settings.clone() };
        self.rotation(first, async move {
            Pkcs11KeyStore::create_kek(next.clone()).await?;
            Ok(Arc::new(Pkcs11KeyStore::open(next).await?) as Arc<dyn KeyStore>)
        })
        .await
    }

    async fn rotation_kms(&self, kms: &mut Kms) -> anyhow::Result<Rotation> {
        let settings = kms.settings()?;
        let first = Arc::new(AwsKmsKeyStore::open(settings.clone()).await?);
        self.rotation(first, async move {
            kms.rotate().await?;
            Ok(Arc::new(AwsKmsKeyStore::open(settings).await?) as Arc<dyn KeyStore>)
        })
        .await
    }

    /// On a database of its own: [`ROTATION_TENANTS`] tenants' data keys wrapped by `first`,
    /// then the time `Keys::rewrap_all` takes to re-wrap them all by `second`'s KEK.
    async fn rotation(
        &self,
        first: Arc<dyn KeyStore>,
        second: impl std::future::Future<Output = anyhow::Result<Arc<dyn KeyStore>>>,
    ) -> anyhow::Result<Rotation> {
        let store = first.kind().to_owned();
        progress(self.started, &format!("key stores: KEK rotation, {ROTATION_TENANTS} data keys, {store}"));
        let db = BenchDb::create(&self.args.database_url).await?;
        let out = async {
            let pool = mcp_connect::store::connect(&db.url, 4).await?;
            mcp_connect::store::migrate(&pool).await?;
            sqlx::query(
                "INSERT INTO tenants (id, display_name, allowed_providers)
                 SELECT 'rot-' || g, 'Rotation ' || g, '{}' FROM generate_series(1, $1) g",
            )
            .bind(ROTATION_TENANTS as i32)
            .execute(&pool)
            .await?;
            let (db_, keyring) = (Db::direct(pool.clone()), Arc::new(Keyring::parse(&self.setup.vault_keys)?));
            let keys =
                |store| Keys::new(db_.clone(), store, keyring.clone(), Arc::new(SystemClock), CacheBound::default());
            let before = keys(first);
            before.switch_on().await?;
            for i in 1..=ROTATION_TENANTS {
                before.sealing(Scope::Tenant(&TenantId::parse(&format!("rot-{i}"))?)).await?;
            }
            let after = keys(second.await?);
            let started = Instant::now();
            let data_keys = after.rewrap_all(100).await?;
            let seconds = started.elapsed().as_secs_f64();
            anyhow::ensure!(after.not_under_current_kek().await? == 0, "{store}: data keys left under the old KEK");
            pool.close().await;
            anyhow::Ok(Rotation { store: store.clone(), data_keys, seconds })
        }
        .await;
        db.drop_database().await?;
        out
    }
}
