//! Workload issuers a tenant trusts (issue 44): platforms that sign a short-lived token for
//! each workload (a Kubernetes cluster's service-account issuer, a SPIFFE trust domain,
//! GitHub Actions, an OAuth server's client-credentials tokens). An MCP server presents
//! such a token instead of an API key; a rule of its tenant maps the token's claims to a
//! scope. No rule, no access.
//!
//! As stored (`tenants.workload_issuers`, a JSON array), written in a configuration file
//! (`[[tenants.workload_issuers]]`) and over the operator API. The platform's operator
//! trusts issuers of its own, in the file only (`[[operator.workload_issuers]]`): their
//! rules grant the operator scope and nothing else.

use super::KeyScope;
use std::collections::BTreeMap;

/// Longest lifetime a tenant may allow (a day): a platform's workload tokens live minutes
/// to an hour; a longer one is a static secret by another name.
pub const MAX_LIFETIME_CAP: u32 = 86_400;
pub const DEFAULT_MAX_LIFETIME: u32 = 3_600;
pub const DEFAULT_CLOCK_SKEW: u32 = 30;
/// Issuers per tenant, rules per issuer, claims per rule: bounded, since every token of an
/// issuer is checked against each.
const MAX_ISSUERS: usize = 16;
const MAX_RULES: usize = 32;
const MAX_CLAIMS: usize = 8;
/// A rule names at least one of these: claims that say which workload it is. A rule on
/// `workflow` or `environment` alone would take anyone's token from a public issuer
/// (every GitHub repository can mint one with any audience).
pub const IDENTITY_CLAIMS: &[&str] = &["sub", "client_id", "azp", "repository", "repository_id"];

/// One trusted issuer of a tenant.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadIssuer {
    /// A short name of the tenant's choosing (`[a-z0-9-]`, up to 40), unique in the tenant.
    pub name: String,
    /// The `iss` its tokens carry, exactly (an https URL; http on loopback).
    pub issuer: String,
    /// Where its keys are; left out: OpenID discovery of `issuer`
    /// (`/.well-known/openid-configuration`, its `jwks_uri`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_uri: Option<String>,
    /// The `aud` its tokens must name; left out: mcp-connect's public URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// The JOSE `typ` its tokens carry (`at+jwt` for RFC 9068 access tokens), compared
    /// without case; left out: not checked (Kubernetes sets none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typ: Option<String>,
    /// The longest lifetime (`exp` − `iat`, or − `nbf`) of a token taken, in seconds.
    #[serde(default = "default_max_lifetime")]
    pub max_lifetime_seconds: u32,
    /// Tolerance for `exp`, `nbf` and `iat`, in seconds.
    #[serde(default = "default_clock_skew")]
    pub clock_skew_seconds: u32,
    /// A `jwks_uri` that discovery names on another origin than the issuer's may be a
    /// private address (a cluster's API server); the configured origins always may.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_private_endpoints: bool,
    /// Which tokens get which scope; a token no rule matches gets none.
    #[serde(default)]
    pub rules: Vec<WorkloadRule>,
}

/// A token whose claims equal every one of `claims` gets `scope` for the tenant.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadRule {
    /// Top-level string claims and the value each must have, exactly (for example
    /// `sub = "system:serviceaccount:tools:mcp-github"`). At least `sub` or one other.
    pub claims: BTreeMap<String, String>,
    /// `server` (`/v1`) or `admin` (`/admin/v1`) for a tenant's issuer; `operator`
    /// (`/operator/v1`) for the operator's (`[[operator.workload_issuers]]`) and only there.
    #[schema(value_type = String)]
    pub scope: RuleScope,
}

/// The scopes a rule can grant: a tenant's rules `server` and `admin`, the operator's
/// `operator` (it belongs to no tenant).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleScope {
    Server,
    Admin,
    Operator,
}

impl RuleScope {
    pub fn key_scope(self) -> KeyScope {
        match self {
            Self::Server => KeyScope::Server,
            Self::Admin => KeyScope::Admin,
            Self::Operator => KeyScope::Operator,
        }
    }
}

/// Whose issuers are checked: a tenant's grant `server` and `admin`, the operator's
/// `operator` only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truster {
    Tenant,
    Operator,
}

fn default_max_lifetime() -> u32 {
    DEFAULT_MAX_LIFETIME
}

fn default_clock_skew() -> u32 {
    DEFAULT_CLOCK_SKEW
}

impl WorkloadIssuer {
    /// The rules' scopes for a token with `claims` (a JSON object).
    pub fn scopes_for(&self, claims: &serde_json::Map<String, serde_json::Value>) -> Vec<KeyScope> {
        let mut out: Vec<KeyScope> = self
            .rules
            .iter()
            .filter(|r| r.claims.iter().all(|(k, v)| claims.get(k).and_then(|c| c.as_str()) == Some(v.as_str())))
            .map(|r| r.scope.key_scope())
            .collect();
        out.dedup();
        out
    }

    /// Checks one issuer; the error names the field (relative to the issuer) and why.
    fn check(&self, truster: Truster) -> Result<(), (String, String)> {
        let bad = |f: &str, why: &str| Err((f.to_owned(), why.to_owned()));
        if self.name.is_empty()
            || self.name.len() > 40
            || !self.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return bad("name", "must be 1 to 40 of a-z, 0-9 and -");
        }
        super::resource_url(&self.issuer).map_err(|e| ("issuer".to_owned(), e))?;
        if self.issuer.trim() != self.issuer || self.issuer.contains('?') {
            return bad("issuer", "must be the exact iss of the tokens, without a query");
        }
        if let Some(j) = &self.jwks_uri {
            super::resource_url(j).map_err(|e| ("jwks_uri".to_owned(), e))?;
        }
        if let Some(a) = &self.audience
            && (a.is_empty() || a.len() > 2000 || a.chars().any(char::is_control))
        {
            return bad("audience", "must be 1 to 2000 characters, none a control character");
        }
        if let Some(t) = &self.typ
            && (t.is_empty() || t.len() > 100 || !t.is_ascii() || t.chars().any(|c| c.is_ascii_control()))
        {
            return bad("typ", "must be 1 to 100 printable ASCII characters");
        }
        if !(60..=MAX_LIFETIME_CAP).contains(&self.max_lifetime_seconds) {
            return bad("max_lifetime_seconds", "must be 60 to 86400");
        }
        if self.clock_skew_seconds > 300 {
            return bad("clock_skew_seconds", "must be at most 300");
        }
        if self.rules.len() > MAX_RULES {
            return bad("rules", "at most 32 rules");
        }
        for (i, r) in self.rules.iter().enumerate() {
            if (r.scope == RuleScope::Operator) != (truster == Truster::Operator) {
                return Err((
                    format!("rules[{i}].scope"),
                    match truster {
                        Truster::Tenant => "must be server or admin (the operator scope belongs to no tenant)",
                        Truster::Operator => "must be operator (an operator's issuer grants no tenant's scope)",
                    }
                    .into(),
                ));
            }
            if r.claims.is_empty() || r.claims.len() > MAX_CLAIMS {
                return Err((
                    format!("rules[{i}].claims"),
                    "1 to 8 claims (a rule without any matches nothing)".into(),
                ));
            }
            if !r.claims.keys().any(|k| IDENTITY_CLAIMS.contains(&k.as_str())) {
                return Err((
                    format!("rules[{i}].claims"),
                    format!("must name one of {} (which workload it is)", IDENTITY_CLAIMS.join(", ")),
                ));
            }
            for (k, v) in &r.claims {
                if k.is_empty() || k.len() > 100 || v.is_empty() || v.len() > 1000 {
                    return Err((
                        format!("rules[{i}].claims"),
                        "claim names up to 100, values 1 to 1000 characters".into(),
                    ));
                }
                // Claims a rule could match but that say nothing of which workload it is.
                if matches!(k.as_str(), "iss" | "aud" | "exp" | "nbf" | "iat" | "jti") {
                    return Err((format!("rules[{i}].claims.{k}"), "names a claim checked apart from rules".into()));
                }
            }
        }
        Ok(())
    }
}

/// A tenant's (or the operator's) issuers, checked: each one's fields, and names and
/// issuers unique (one issuer, one set of checks and rules per tenant). The error names
/// the field below the tenant's (`workload_issuers[1].issuer`) and why.
pub fn check_issuers(issuers: &[WorkloadIssuer], truster: Truster) -> Result<(), (String, String)> {
    if issuers.len() > MAX_ISSUERS {
        return Err(("workload_issuers".to_owned(), "at most 16 issuers".to_owned()));
    }
    for (i, w) in issuers.iter().enumerate() {
        w.check(truster).map_err(|(f, why)| (format!("workload_issuers[{i}].{f}"), why))?;
        if issuers[..i].iter().any(|o| o.name == w.name) {
            return Err((format!("workload_issuers[{i}].name"), "is used by another issuer of the tenant".into()));
        }
        if issuers[..i].iter().any(|o| o.issuer == w.issuer) {
            return Err((format!("workload_issuers[{i}].issuer"), "is trusted by another entry of the tenant".into()));
        }
    }
    Ok(())
}

/// The issuers as stored; unreadable means none (a trust setting fails closed).
pub fn issuers_from_stored(v: Option<&serde_json::Value>) -> Vec<WorkloadIssuer> {
    parse_stored(v).unwrap_or_else(|_| {
        tracing::warn!("a tenant's workload_issuers are unreadable: no workload token is taken for it");
        Vec::new()
    })
}

/// The issuers as stored, or why this release cannot read them (written by a newer one).
pub fn parse_stored(v: Option<&serde_json::Value>) -> Result<Vec<WorkloadIssuer>, String> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(v) => {
            let issuers = serde_json::from_value::<Vec<WorkloadIssuer>>(v.clone()).map_err(|e| e.to_string())?;
            check_issuers(&issuers, Truster::Tenant).map_err(|(f, why)| format!("{f}: {why}"))?;
            Ok(issuers)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer() -> WorkloadIssuer {
        serde_json::from_value(serde_json::json!({
            "name": "cluster", "issuer": "https://k8s.example",
            "rules": [{"claims": {"sub": "system:serviceaccount:tools:mcp"}, "scope": "server"}]
        }))
        .unwrap()
    }

    #[test]
    fn defaults_and_checks() {
        let w = issuer();
        assert_eq!((w.max_lifetime_seconds, w.clock_skew_seconds), (3600, 30));
        assert!(check_issuers(std::slice::from_ref(&w), Truster::Tenant).is_ok());
        for (change, field) in [
            (serde_json::json!({"name": "Cluster"}), "workload_issuers[0].name"),
            (serde_json::json!({"issuer": "http://k8s.example"}), "workload_issuers[0].issuer"),
            (serde_json::json!({"issuer": "https://k8s.example?x=1"}), "workload_issuers[0].issuer"),
            (serde_json::json!({"max_lifetime_seconds": 86401}), "workload_issuers[0].max_lifetime_seconds"),
            (serde_json::json!({"rules": [{"claims": {}, "scope": "server"}]}), "workload_issuers[0].rules[0].claims"),
            (
                serde_json::json!({"rules": [{"claims": {"sub": "s", "aud": "x"}, "scope": "server"}]}),
                "workload_issuers[0].rules[0].claims.aud",
            ),
            (
                serde_json::json!({"rules": [{"claims": {"workflow": "deploy"}, "scope": "server"}]}),
                "workload_issuers[0].rules[0].claims",
            ),
        ] {
            let mut v = serde_json::to_value(&w).unwrap();
            for (k, x) in change.as_object().unwrap() {
                v[k] = x.clone();
            }
            let changed: WorkloadIssuer = serde_json::from_value(v).unwrap();
            assert_eq!(check_issuers(&[changed], Truster::Tenant).unwrap_err().0, field);
        }
        let twice = [w.clone(), WorkloadIssuer { name: "other".into(), ..w.clone() }];
        assert_eq!(check_issuers(&twice, Truster::Tenant).unwrap_err().0, "workload_issuers[1].issuer");
        // The operator scope is the operator's issuers' only, and theirs is only that.
        let mut op = w.clone();
        op.rules[0].scope = RuleScope::Operator;
        assert_eq!(
            check_issuers(std::slice::from_ref(&op), Truster::Tenant).unwrap_err().0,
            "workload_issuers[0].rules[0].scope"
        );
        assert!(check_issuers(std::slice::from_ref(&op), Truster::Operator).is_ok());
        assert_eq!(
            check_issuers(std::slice::from_ref(&w), Truster::Operator).unwrap_err().0,
            "workload_issuers[0].rules[0].scope"
        );
        // Stored for a tenant with the operator scope (written by hand): none is taken.
        assert!(issuers_from_stored(Some(&serde_json::json!([op]))).is_empty());
    }

    #[test]
    fn a_rule_matches_when_every_claim_is_equal() {
        let mut w = issuer();
        w.rules.push(WorkloadRule {
            claims: [("sub".into(), "system:serviceaccount:tools:mcp".into()), ("team".into(), "ops".into())].into(),
            scope: RuleScope::Admin,
        });
        let claims = |v: serde_json::Value| v.as_object().unwrap().clone();
        assert_eq!(
            w.scopes_for(&claims(serde_json::json!({"sub": "system:serviceaccount:tools:mcp"}))),
            [KeyScope::Server]
        );
        assert_eq!(
            w.scopes_for(&claims(serde_json::json!({"sub": "system:serviceaccount:tools:mcp", "team": "ops"}))),
            [KeyScope::Server, KeyScope::Admin]
        );
        assert!(w.scopes_for(&claims(serde_json::json!({"sub": "system:serviceaccount:tools:other"}))).is_empty());
        // Not a string: never equal.
        assert!(w.scopes_for(&claims(serde_json::json!({"sub": ["system:serviceaccount:tools:mcp"]}))).is_empty());
    }

    #[test]
    fn unreadable_stored_issuers_are_none() {
        assert!(issuers_from_stored(Some(&serde_json::json!([{"name": 1}]))).is_empty());
        assert_eq!(issuers_from_stored(Some(&serde_json::json!([issuer()]))).len(), 1);
    }
}
