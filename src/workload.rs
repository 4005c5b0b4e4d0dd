//! Workload identity (issue 44): an MCP server presents a token its platform signed (a
//! Kubernetes projected service-account token, a SPIFFE JWT-SVID, a GitHub Actions token,
//! an OAuth server's client-credentials access token) as `Authorization: Bearer` instead
//! of an API key. A tenant trusts issuers (`domain::workload`); a rule of the tenant maps
//! the token's claims to a scope. The operator trusts issuers of its own, whose rules
//! grant the operator scope (`/operator/v1`) and nothing else.
//!
//! Told apart from an API key by its shape (a compact JWS; an API key is `mcpc_…`), never
//! by trying both. The checks are those of a subject token (`oauth::access_token`): an
//! asymmetric algorithm, `typ` where the issuer sets one, a key of the issuer's JWKS,
//! `iss`, `aud`, `exp`, `nbf` with the issuer's skew; and a lifetime (`exp` − `iat`) no
//! longer than the tenant allows, and a `jti` no other token carried.
//!
//! A verified token is kept until its `exp`, by the SHA-256 of its text, with the issuer
//! settings it was checked under: a hit costs no signature check and no read. The rules
//! are applied on every request against the tenants as they are now, so a changed rule, a
//! removed issuer or a switched-off tenant holds at once; a changed issuer (another `Arc`
//! after the tenants are read again) checks the token again.

use crate::domain::workload::WorkloadIssuer;
use crate::domain::{ApiKeyId, Clock, KeyScope, TenantId};
use crate::net::http::Outbound;
use crate::oauth::access_token::{self, AccessTokenRefusal};
use crate::store::{self, Db};
use openidconnect::core::CoreJsonWebKeySet;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

pub use crate::tenants::WorkloadIssuers;

/// Counted per verification (a cache miss) and refusal, by tenant (`unknown` before one is
/// known; never a value from an unverified token) and result (the error code, or `ok`).
pub const METRIC_VERIFICATIONS: &str = "mcp_connect_workload_verifications_total";

/// Why a workload token was refused: one reason per check, each its own error code
/// (`http::error`). Never the token's content.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadRefusal {
    #[error("{}", token_refusal_text(*.0))]
    Token(AccessTokenRefusal),
    /// `exp` − `iat` (or − `nbf`, or − now) longer than the issuer's `max_lifetime_seconds`.
    #[error("the workload token lives longer than its tenant allows")]
    Lifetime,
    /// Another token of the issuer carried its `jti`.
    #[error("another token of this issuer carried the same jti")]
    Replayed,
    /// Verified, but no rule of any tenant gives it any scope.
    #[error("no rule of a tenant that trusts this issuer matches the token")]
    NoRule,
    /// Rules of two tenants give it this scope: which tenant is meant cannot be told.
    #[error("rules of more than one tenant match the token")]
    Ambiguous,
    /// The issuer's keys cannot be had now: a retry may succeed.
    #[error("the workload issuer's keys are unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// What a workload token's refusal by a shared JWT check says (never the token).
fn token_refusal_text(r: AccessTokenRefusal) -> &'static str {
    use AccessTokenRefusal as R;
    match r {
        R::Invalid => {
            "the workload token is not a valid signed JWT of its issuer (malformed, no kid, a bad signature, or no exp, aud or sub)"
        }
        R::Algorithm => "the workload token is signed with an algorithm that is never accepted (none, HMAC)",
        R::Type => "the workload token's typ is not the one its issuer's tokens carry",
        R::UnknownKey => "the workload token names a key its issuer does not publish",
        R::Issuer => "no active tenant trusts the workload token's issuer",
        R::Audience => "the workload token is meant for another audience",
        R::Expired => "the workload token has expired",
        R::NotYetValid => "the workload token is not valid yet",
    }
}

impl WorkloadRefusal {
    /// The result label of [`METRIC_VERIFICATIONS`].
    pub fn label(&self) -> &'static str {
        use AccessTokenRefusal as R;
        match self {
            Self::Token(R::Invalid) => "invalid",
            Self::Token(R::Algorithm) => "algorithm",
            Self::Token(R::Type) => "type",
            Self::Token(R::UnknownKey) => "unknown_key",
            Self::Token(R::Issuer) => "issuer",
            Self::Token(R::Audience) => "audience",
            Self::Token(R::Expired) => "expired",
            Self::Token(R::NotYetValid) => "not_yet_valid",
            Self::Lifetime => "lifetime",
            Self::Replayed => "replayed",
            Self::NoRule => "no_rule",
            Self::Ambiguous => "ambiguous",
            Self::Unavailable(_) => "unavailable",
            Self::Database(_) => "database",
        }
    }
}

impl From<AccessTokenRefusal> for WorkloadRefusal {
    fn from(r: AccessTokenRefusal) -> Self {
        Self::Token(r)
    }
}

/// Whether a presented bearer is shaped as a compact JWS (three base64url parts), and so
/// is taken for a workload token rather than an API key.
pub fn looks_like_jwt(presented: &str) -> bool {
    // One pass, no allocation: on every request that presents one.
    let mut parts = presented.split('.');
    let b64url = |p: &str| p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(h), Some(c), Some(sig), None) => !h.is_empty() && !c.is_empty() && b64url(h) && b64url(c) && b64url(sig),
        _ => false,
    }
}

/// Who trusts the issuer (a tenant; `None`: the operator), its settings, and where the
/// token passed them and some rule takes it: the caller id and the scopes it gets.
type Checked = (Option<TenantId>, Arc<WorkloadIssuer>, Option<(ApiKeyId, Vec<KeyScope>)>);

/// A token that passed its checks under some tenants' settings of its issuer.
pub struct Verified {
    /// Each tenant that trusts the issuer, with the settings the token was checked under
    /// and, where it passed them, the workload's caller id under them: its id where a key
    /// id goes (the audit trail), 16 hex digits of the SHA-256 of issuer, that tenant's
    /// key source and subject, recorded in `workload_callers`.
    /// (A tenant; `None`: the operator.) With the scopes its rules give the token, worked
    /// out once: the rules are those of that `Arc`, and another one checks it again.
    checked: Vec<Checked>,
    iss: String,
    exp: i64,
    /// Checked again from then on (Unix seconds): a tenant's keys lacked the token's key.
    recheck_at: Option<i64>,
}

impl Verified {
    /// The one tenant (`None`: the operator) whose rules give the token `scope`, by the
    /// issuers as they are now (`trusted`). `Ok(None)`: it still verifies but some tenant's rules give it
    /// another scope only (the caller answers insufficient_scope). `Err(None)`: checked
    /// under other settings than the current ones: check it again.
    fn tenant_for(
        &self,
        now: &[(Option<TenantId>, Arc<WorkloadIssuer>)],
        scope: KeyScope,
    ) -> Result<Option<(Option<TenantId>, ApiKeyId)>, Option<WorkloadRefusal>> {
        let same = now.len() == self.checked.len()
            && now.iter().zip(&self.checked).all(|((t, w), (ct, cw, _))| t == ct && Arc::ptr_eq(w, cw));
        if !same {
            return Err(None);
        }
        let mut any_scope = false;
        let mut found: Option<(&Option<TenantId>, &ApiKeyId)> = None;
        for (tenant, _, taken) in &self.checked {
            let Some((caller, scopes)) = taken else { continue };
            any_scope |= !scopes.is_empty();
            if scopes.contains(&scope) {
                if found.is_some_and(|(f, _)| f != tenant) {
                    return Err(Some(WorkloadRefusal::Ambiguous));
                }
                found = Some((tenant, caller));
            }
        }
        match found {
            Some((t, c)) => Ok(Some((t.clone(), c.clone()))),
            None if any_scope => Ok(None),
            None => Err(Some(WorkloadRefusal::NoRule)),
        }
    }
}

/// How a caller proved who it is, to be checked again after a long wait (`/v1/token` with
/// `wait_seconds`): its API key's id is looked up again; a workload token is admitted again
/// against the tenants as they are then.
#[derive(Clone)]
pub enum Proof {
    ApiKey,
    Workload(Arc<secrecy::SecretString>),
}

impl Proof {
    /// Who `id` is, proved this way: a key, or a workload's caller id.
    pub fn caller(&self, id: ApiKeyId) -> crate::domain::Caller {
        crate::domain::Caller { id, workload: matches!(self, Self::Workload(_)) }
    }
}

impl std::fmt::Debug for Proof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ApiKey => "ApiKey",
            Self::Workload(_) => "Workload([REDACTED])",
        })
    }
}

/// What a workload token gets for one request: the tenant (`None`: the operator's scope)
/// and the workload's caller id there; `None`: no rule gives it the scope asked for (some
/// rule gives it another).
pub struct Admitted {
    pub granted: Option<(Option<TenantId>, ApiKeyId)>,
}

/// Verified tokens at most (a full map drops the expired, then refuses to keep more: a
/// miss costs a verification, never memory past the bound). Hand-written: a map with a
/// per-entry deadline, no library's eviction is needed for it.
const CAPACITY: usize = 10_000;
/// An issuer's keys are fetched again after an hour, at most once a minute for a key id
/// they lack, and serve for a day while the issuer cannot be reached (as an IdP's do).
const KEYS_FRESH: Duration = Duration::from_secs(3600);
const REFETCH_AT_MOST_EVERY: Duration = Duration::from_secs(60);
const KEYS_STALE_FOR: Duration = Duration::from_secs(24 * 3600);

/// Issuer, JWKS URL (`None`: discovery) and whether a private discovered `jwks_uri` may be
/// reached: tenants that trust one issuer with other reach keep keys of their own.
type KeysOf = (String, Option<String>, bool);

/// After a fetch failed, none for this long: the last keys serve (or the request is told
/// to come back) without a fetch per request while the issuer is down.
const FAILURE_KEPT: Duration = Duration::from_secs(30);

#[derive(Default)]
struct IssuerKeys {
    /// The last keys fetched, and when.
    jwks: Option<(Arc<CoreJsonWebKeySet>, Instant)>,
    /// The last fetch for a key id they lacked (whether it worked).
    tried: Option<Instant>,
    /// The last failed fetch, and why.
    failed: Option<(Instant, String)>,
}

impl IssuerKeys {
    /// The last keys if they are at most a day old, else why there are none.
    fn last(&self, now: Instant, why: &str) -> Result<Arc<CoreJsonWebKeySet>, WorkloadRefusal> {
        match (&self.jwks, &self.failed) {
            (Some((jwks, at)), _) if now.saturating_duration_since(*at) < KEYS_STALE_FOR => Ok(jwks.clone()),
            (_, Some((_, failed))) => Err(WorkloadRefusal::Unavailable(failed.clone())),
            _ => Err(WorkloadRefusal::Unavailable(why.to_owned())),
        }
    }
}

pub struct WorkloadVerifier {
    pool: Db,
    /// Accepted as `aud` where an issuer sets no audience: the public base as configured
    /// and without its trailing `/`.
    default_audiences: [String; 2],
    verified: RwLock<HashMap<[u8; 32], Arc<Verified>>>,
    /// By issuer and JWKS URL (`None`: discovery).
    keys: std::sync::Mutex<HashMap<KeysOf, IssuerKeys>>,
    /// One fetch per issuer at a time; the others' fetches and every cached key go on.
    fetching: crate::domain::gate::Gates<KeysOf>,
    clock: Arc<dyn Clock>,
}

impl WorkloadVerifier {
    pub fn new(pool: Db, public_base: &url::Url, clock: Arc<dyn Clock>) -> Self {
        let base = public_base.as_str().to_owned();
        let trimmed = base.trim_end_matches('/').to_owned();
        Self {
            pool,
            default_audiences: [base, trimmed],
            verified: RwLock::default(),
            keys: std::sync::Mutex::default(),
            fetching: crate::domain::gate::Gates::default(),
            clock,
        }
    }

    /// The caller and tenant a workload token stands for, for `scope`; `trusted`: the
    /// active tenants' issuers now.
    pub async fn admit(
        &self,
        http: &Outbound,
        presented: &str,
        trusted: &WorkloadIssuers,
        scope: KeyScope,
    ) -> Result<Admitted, WorkloadRefusal> {
        let fingerprint: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let now = self.clock.wall();
        let cached = self.verified.read().ok().and_then(|m| m.get(&fingerprint).cloned());
        let t = now.unix_timestamp();
        if let Some(v) = cached.filter(|v| v.exp > t && v.recheck_at.is_none_or(|r| t < r)) {
            match v.tenant_for(trusted.get(&v.iss).map_or(&[][..], Vec::as_slice), scope) {
                Ok(granted) => return Ok(Admitted { granted }),
                Err(Some(refusal)) => return Err(refusal),
                Err(None) => {}
            }
        }
        let (v, keep) = match self.verify(http, presented, fingerprint, trusted, now).await {
            Ok(v) => v,
            Err(e) => {
                metrics::counter!(METRIC_VERIFICATIONS, "tenant" => "unknown", "result" => e.label()).increment(1);
                return Err(e);
            }
        };
        let outcome = v.tenant_for(trusted.get(&v.iss).map_or(&[][..], Vec::as_slice), scope);
        let result = match &outcome {
            Err(Some(e)) => e.label(),
            _ => "ok",
        };
        for (tenant, ..) in v.checked.iter().filter(|c| c.2.is_some()) {
            // `(operator)` is no tenant id (those are a-z, 0-9, - and _).
            let tenant = tenant.as_ref().map_or_else(|| "(operator)".to_owned(), TenantId::to_string);
            metrics::counter!(METRIC_VERIFICATIONS, "tenant" => tenant, "result" => result).increment(1);
        }
        if keep {
            self.keep(fingerprint, Arc::new(v), now.unix_timestamp());
        }
        match outcome {
            Ok(granted) => Ok(Admitted { granted }),
            Err(Some(refusal)) => Err(refusal),
            Err(None) => Err(WorkloadRefusal::NoRule),
        }
    }

    /// Whether `token` still gets the server scope for `tenant` (a cached verification: no
    /// signature check), by the tenants' issuers and rules now.
    pub async fn still_admits(
        &self,
        http: &Outbound,
        token: &str,
        trusted: &WorkloadIssuers,
        tenant: &TenantId,
    ) -> bool {
        self.admit(http, token, trusted, KeyScope::Server)
            .await
            .is_ok_and(|a| a.granted.is_some_and(|(t, _)| t.as_ref() == Some(tenant)))
    }

    /// Keeps a verification; a full map drops the expired, then any one entry (a token
    /// verified now is as likely to come again as any other).
    fn keep(&self, fingerprint: [u8; 32], v: Arc<Verified>, now: i64) {
        let Ok(mut m) = self.verified.write() else { return };
        if m.len() >= CAPACITY {
            m.retain(|_, v| v.exp > now);
            if m.len() >= CAPACITY
                && let Some(k) = m.keys().next().copied()
            {
                m.remove(&k);
            }
        }
        m.insert(fingerprint, v);
    }

    /// Every check of a token not verified before, under each tenant's settings of its
    /// issuer. Only a token some tenant's rule gives a scope has its `jti` claimed, its
    /// workload recorded and (`true`) may be kept: one no rule takes leaves no trace, and
    /// one checked while a tenant's keys were unavailable is checked again next time.
    async fn verify(
        &self,
        http: &Outbound,
        raw: &str,
        fingerprint: [u8; 32],
        trusted: &WorkloadIssuers,
        now: time::OffsetDateTime,
    ) -> Result<(Verified, bool), WorkloadRefusal> {
        let header = access_token::read_header(raw)?;
        let iss = access_token::unverified_issuer(raw).ok_or(AccessTokenRefusal::Invalid)?;
        let entries = trusted.get(&iss).ok_or(AccessTokenRefusal::Issuer)?;
        let mut results = Vec::with_capacity(entries.len());
        let mut claims = None;
        let mut first_refusal = None;
        let mut transient = false;
        let mut unknown_key = false;
        for (tenant, w) in entries {
            match self.check(http, raw, &header, w, now).await {
                Ok(c) => {
                    claims.get_or_insert(c);
                    results.push((tenant, w, true));
                }
                Err(e) => {
                    transient |= matches!(e, WorkloadRefusal::Unavailable(_) | WorkloadRefusal::Database(_));
                    // Keys that lack the token's key now may hold it after the next
                    // refetch (at most a minute away): kept, but checked again by then.
                    unknown_key |= matches!(e, WorkloadRefusal::Token(AccessTokenRefusal::UnknownKey));
                    first_refusal.get_or_insert(e);
                    results.push((tenant, w, false));
                }
            }
        }
        let Some(claims) = claims else {
            return Err(first_refusal.unwrap_or(WorkloadRefusal::Token(AccessTokenRefusal::Invalid)));
        };
        let exp = claims.get("exp").and_then(serde_json::Value::as_i64).ok_or(AccessTokenRefusal::Invalid)?;
        let sub = claims.get("sub").and_then(|s| s.as_str()).ok_or(AccessTokenRefusal::Invalid)?.to_owned();
        if sub.is_empty() || sub.len() > 255 || sub.chars().any(char::is_control) {
            return Err(AccessTokenRefusal::Invalid.into());
        }
        // The scopes each tenant's rules give it, where it passed that tenant's checks and
        // some rule takes it (worked out once: kept with the verification).
        let results: Vec<_> = results
            .into_iter()
            .map(|(t, w, ok)| (t, w, ok.then(|| w.scopes_for(&claims)).filter(|s| !s.is_empty())))
            .collect();
        // The keys that verified it, per tenant: an issuer URL two clusters share (the
        // in-cluster default) is told apart by where each one's keys are.
        let mut sources: Vec<&str> =
            results.iter().filter(|(.., scopes)| scopes.is_some()).map(|(_, w, _)| source_of(w)).collect();
        if sources.is_empty() {
            return Err(WorkloadRefusal::NoRule);
        }
        sources.sort_unstable();
        sources.dedup();
        for source in sources {
            self.claim(&iss, source, &sub, claims.get("jti"), exp, &fingerprint).await?;
        }
        let checked = results
            .into_iter()
            .map(|(t, w, scopes)| {
                let taken = scopes.map(|s| (caller_id(&iss, source_of(w), &sub), s));
                (t.clone(), w.clone(), taken)
            })
            .collect();
        // A second past the minute: `now` is whole seconds, and the refetch may come no
        // sooner than a minute after it was tried (a moment after `now`).
        let recheck_at = unknown_key.then(|| now.unix_timestamp() + REFETCH_AT_MOST_EVERY.as_secs() as i64 + 1);
        Ok((Verified { checked, iss, exp, recheck_at }, !transient))
    }

    /// Under one key source: claims the token's `jti` (where it has one: another token
    /// with it is a replay) and records the workload as a caller.
    async fn claim(
        &self,
        iss: &str,
        source: &str,
        sub: &str,
        jti: Option<&serde_json::Value>,
        exp: i64,
        fingerprint: &[u8; 32],
    ) -> Result<(), WorkloadRefusal> {
        if let Some(jti) = jti {
            let jti = jti.as_str().filter(|j| !j.is_empty() && j.len() <= 255).ok_or(AccessTokenRefusal::Invalid)?;
            let until = time::OffsetDateTime::from_unix_timestamp(exp).map_err(|_| AccessTokenRefusal::Invalid)?;
            let mut tx = store::begin(&self.pool).await?;
            if !store::workload::claim_jti(&mut tx, iss, source, jti, fingerprint, until).await? {
                return Err(WorkloadRefusal::Replayed);
            }
            tx.commit().await?;
        }
        let caller = caller_id(iss, source, sub);
        store::workload::record_caller(&self.pool, caller.as_str(), iss, source, sub).await?;
        Ok(())
    }

    /// One tenant's checks of the token: its `typ`, signature, `iss`, `aud`, times and
    /// lifetime. The claims, when they pass.
    async fn check(
        &self,
        http: &Outbound,
        raw: &str,
        header: &access_token::Header,
        w: &WorkloadIssuer,
        now: time::OffsetDateTime,
    ) -> Result<serde_json::Map<String, serde_json::Value>, WorkloadRefusal> {
        if let Some(typ) = &w.typ
            && !header.typ_is(typ)
        {
            return Err(AccessTokenRefusal::Type.into());
        }
        let jwks = self.keys_holding(http, w, &header.kid).await?;
        let audiences: Vec<&str> = match &w.audience {
            Some(a) => vec![a.as_str()],
            None => self.default_audiences.iter().map(String::as_str).collect(),
        };
        let claims: serde_json::Map<String, serde_json::Value> =
            access_token::decode(raw, header, &jwks, &w.issuer, &audiences)?;
        let int = |k: &str| claims.get(k).and_then(serde_json::Value::as_i64);
        let exp = int("exp").ok_or(AccessTokenRefusal::Invalid)?;
        let skew = time::Duration::seconds(i64::from(w.clock_skew_seconds));
        access_token::times(exp, int("nbf"), now, skew)?;
        // From when it was made (or valid), else from now: a token without `iat` or `nbf`
        // is held to what is left of it.
        let from = int("iat").or(int("nbf")).unwrap_or(now.unix_timestamp());
        if exp.saturating_sub(from) > i64::from(w.max_lifetime_seconds) + skew.whole_seconds() {
            return Err(WorkloadRefusal::Lifetime);
        }
        if int("iat").is_some_and(|iat| iat.saturating_sub(skew.whole_seconds()) > now.unix_timestamp()) {
            return Err(AccessTokenRefusal::NotYetValid.into());
        }
        Ok(claims)
    }

    /// The issuer's keys, fetched again when they lack `kid` (at most once a minute), and
    /// the last ones while the issuer cannot be reached (up to a day).
    async fn keys_holding(
        &self,
        http: &Outbound,
        w: &WorkloadIssuer,
        kid: &str,
    ) -> Result<Arc<CoreJsonWebKeySet>, WorkloadRefusal> {
        let key = (w.issuer.clone(), w.jwks_uri.clone(), w.allow_private_endpoints);
        if let Some(jwks) = self.usable_keys(&key, kid) {
            return Ok(jwks);
        }
        let gate = crate::domain::gate::Gate::new(&self.fetching, key.clone());
        let _held = gate.acquire().await;
        // The request before this one may have fetched them.
        if let Some(jwks) = self.usable_keys(&key, kid) {
            return Ok(jwks);
        }
        let now = self.clock.now();
        // A fetch failed a moment ago: none again yet; the last keys serve meanwhile.
        let failed_lately = self.with_keys(|m| {
            let k = m.get(&key)?;
            let (at, why) = k.failed.as_ref()?;
            (now.saturating_duration_since(*at) < FAILURE_KEPT).then(|| k.last(now, why))
        });
        if let Some(last) = failed_lately {
            return last;
        }
        // Fetched for a key id the keys lack: no other such fetch within the minute.
        let lacking = self.with_keys(|m| {
            m.get(&key).and_then(|k| k.jwks.as_ref()).is_some_and(|(j, _)| !crate::oauth::flow::jwks_has_key(j, kid))
        });
        let fetched = fetch_keys(http, w).await;
        self.with_keys(|m| {
            let k = m.entry(key).or_default();
            if lacking {
                k.tried = Some(now);
            }
            match fetched {
                Ok(jwks) => {
                    // Fetched and still without it: no other fetch for it within the minute.
                    if !crate::oauth::flow::jwks_has_key(&jwks, kid) {
                        k.tried = Some(now);
                    }
                    let jwks = Arc::new(jwks);
                    k.jwks = Some((jwks.clone(), now));
                    k.failed = None;
                    Ok(jwks)
                }
                Err(why) => {
                    tracing::warn!(issuer = %w.issuer, reason = %why, "a workload issuer's keys could not be fetched; the last ones (up to a day old) serve");
                    k.failed = Some((now, why.clone()));
                    k.last(now, &why)
                }
            }
        })
    }

    /// The keys held for `key`, if they are fresh and hold `kid` (or were fetched for a
    /// key id they lacked within the minute).
    fn usable_keys(&self, key: &KeysOf, kid: &str) -> Option<Arc<CoreJsonWebKeySet>> {
        let now = self.clock.now();
        self.with_keys(|m| {
            let k = m.get(key)?;
            let (jwks, fetched) = k.jwks.as_ref()?;
            let fresh = now.saturating_duration_since(*fetched) < KEYS_FRESH;
            let has = crate::oauth::flow::jwks_has_key(jwks, kid);
            let tried_lately = k.tried.is_some_and(|t| now.saturating_duration_since(t) < REFETCH_AT_MOST_EVERY);
            (fresh && (has || tried_lately)).then(|| jwks.clone())
        })
    }

    fn with_keys<T>(&self, f: impl FnOnce(&mut HashMap<KeysOf, IssuerKeys>) -> T) -> T {
        f(&mut self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }
}

/// The issuer's JWKS: from its `jwks_uri` if set, else by OpenID discovery (the document's
/// `issuer` must be the issuer exactly). The configured origins are reached as they are;
/// a discovered `jwks_uri` elsewhere only through the outbound guard.
async fn fetch_keys(http: &Outbound, w: &WorkloadIssuer) -> Result<CoreJsonWebKeySet, String> {
    let parse = |u: &str| url::Url::parse(u).map_err(|e| e.to_string());
    let issuer = parse(&w.issuer)?;
    let mut configured = vec![issuer.origin()];
    let jwks_uri = match &w.jwks_uri {
        Some(j) => {
            let u = parse(j)?;
            configured.push(u.origin());
            u
        }
        None => {
            let doc_url = parse(&format!("{}/.well-known/openid-configuration", w.issuer.trim_end_matches('/')))?;
            let mut adm = crate::net::metadata::Admission::new(
                configured.clone(),
                w.allow_private_endpoints,
                "the workload issuer",
            );
            let doc = adm.get_json(http, &doc_url, "discovery").await.map_err(|e| e.to_string())?;
            if doc.get("issuer").and_then(|i| i.as_str()) != Some(w.issuer.as_str()) {
                return Err("the discovery document names another issuer".to_owned());
            }
            let j = doc.get("jwks_uri").and_then(|j| j.as_str()).ok_or("the discovery document has no jwks_uri")?;
            crate::domain::resource_url(j).map_err(|e| format!("jwks_uri: {e}"))?;
            parse(j)?
        }
    };
    let mut adm = crate::net::metadata::Admission::new(configured, w.allow_private_endpoints, "the workload issuer");
    let raw = adm.get_json(http, &jwks_uri, "jwks_uri").await.map_err(|e| e.to_string())?;
    serde_json::from_value(raw).map_err(|e| format!("jwks: {e}"))
}

/// Where an issuer's keys are found: its `jwks_uri`, or `discovery`.
fn source_of(w: &WorkloadIssuer) -> &str {
    w.jwks_uri.as_deref().unwrap_or("discovery")
}

/// 16 hex digits of SHA-256(issuer, NUL, key source, NUL, subject): the workload's caller
/// id. The key source is the issuer's `jwks_uri`, or `discovery`.
pub fn caller_id(issuer: &str, source: &str, subject: &str) -> ApiKeyId {
    let mut h = Sha256::new();
    h.update(issuer.as_bytes());
    h.update([0]);
    h.update(source.as_bytes());
    h.update([0]);
    h.update(subject.as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    ApiKeyId::from_bits(u64::from_be_bytes(first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jwt_is_told_from_an_api_key_by_its_shape() {
        assert!(looks_like_jwt("eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"));
        assert!(looks_like_jwt("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."));
        assert!(!looks_like_jwt("mcpc_0123456789abcdef_secret"));
        assert!(!looks_like_jwt("a.b"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt("a.b+.c"));
    }

    #[test]
    fn a_caller_id_is_a_key_id_of_issuer_and_subject() {
        let sa = "system:serviceaccount:tools:mcp";
        let a = caller_id("https://k8s.example", "discovery", sa);
        assert_eq!(a.as_str().len(), 16);
        assert_eq!(a, caller_id("https://k8s.example", "discovery", sa));
        assert_ne!(a, caller_id("https://k8s.example/", "discovery", sa));
        // Two clusters with one issuer URL and their own keys are two workloads.
        assert_ne!(a, caller_id("https://k8s.example", "https://keys.a.example/jwks", sa));
        // The separator keeps issuer and subject apart.
        assert_ne!(caller_id("https://a.example/x", "d", "y"), caller_id("https://a.example/", "d", "xy"));
    }
}
