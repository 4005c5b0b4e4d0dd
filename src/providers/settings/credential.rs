//! `[providers.<name>]` of the `api_key` and `basic` templates: no OAuth client, no
//! endpoints, no scopes; the fields the connect page asks for and the check request.

use super::{RawCheck, RawField, RawProvider, SettingError, err};
use crate::domain::ProviderId;
use crate::net::urls;
use crate::providers::credential::{Check, CredentialSpec, Field, Placement, api_key_fields, basic_fields};
use crate::providers::{AccountFields, Origin, Provider, ProviderKind, Typed, Upstream};
use std::sync::Arc;

/// A credential provider, checked; `secret` is a client secret from the environment,
/// which such a provider does not take.
pub(super) fn validate(
    id: ProviderId,
    f: &dyn Fn(&str) -> String,
    p: RawProvider,
    secret: Option<String>,
) -> Result<Provider, SettingError> {
    let template = serde_json::to_value(p.template).ok().and_then(|v| v.as_str().map(str::to_owned));
    let template = template.unwrap_or_default();
    let unused = [
        ("client_id", p.client_id.is_some()),
        ("client_secret_file", p.client_secret_file.is_some() || secret.is_some()),
        ("authorize_url", p.authorize_url.is_some()),
        ("token_url", p.token_url.is_some()),
        ("userinfo_url", p.userinfo_url.is_some()),
        ("revocation_url", p.revocation_url.is_some()),
        ("issuer", p.issuer.is_some()),
        ("authorization_response_iss", p.authorization_response_iss.is_some()),
        ("scopes", p.scopes.is_some()),
        ("scope_separator", p.scope_separator.is_some()),
        ("extra_authorize_params", !p.extra_authorize_params.is_empty()),
        ("clock_skew_seconds", p.clock_skew_seconds.is_some()),
        ("allow_private_endpoints", p.allow_private_endpoints),
        ("resource", p.resource.is_some()),
        ("token_endpoint_auth_method", p.token_endpoint_auth_method.is_some()),
        ("login_hint", p.login_hint.is_some()),
    ];
    if let Some((field, _)) = unused.iter().find(|(_, set)| *set) {
        return Err(err(f(field), format!("the {template} template has no OAuth client, endpoints or scopes")));
    }
    // No ID token to check; `allow_private_endpoints` was refused above.
    let policy = p.policy(time::Duration::ZERO);
    let fields = match (p.template, p.fields) {
        (ProviderKind::Basic, Some(_)) => {
            return Err(err(f("fields"), "the basic template asks for a username and a password; it takes no fields"));
        }
        (ProviderKind::Basic, None) => basic_fields(),
        (_, None) => api_key_fields(),
        (_, Some(raw)) => fields(&f("fields"), raw)?,
    };
    let check = p.check.map(|c| check(&f("check"), p.template, c, &p.allow_idn_hosts)).transpose()?;
    let has_account = p.account_id_field.as_ref().is_some_and(|a| !a.is_empty());
    if has_account && check.as_ref().is_none_or(|c| c.method == reqwest::Method::HEAD) {
        return Err(err(
            f("account_id_field"),
            "is read from the check's answer: configure a [check] that is not HEAD",
        ));
    }
    if !has_account && p.account_login_field.is_some() {
        return Err(err(f("account_login_field"), "needs account_id_field"));
    }
    let display_name = p.display_name.unwrap_or_else(|| id.to_string());
    Ok(Provider {
        id,
        kind: p.template,
        display_name,
        policy,
        origin: Origin::File,
        proxy: None,
        upstream: Upstream::Typed(Typed {
            spec: Arc::new(CredentialSpec { kind: p.template, fields, check }),
            account: AccountFields {
                id_field: p.account_id_field.unwrap_or_default(),
                login_field: p.account_login_field.unwrap_or_default(),
            },
        }),
    })
}

/// 1-5 fields of distinct names, `[a-z0-9_]{1,32}`, labels of 1-60 printable characters,
/// at least one secret (its value is what the check carries and `access_token` is).
fn fields(field: &str, raw: Vec<RawField>) -> Result<Vec<Field>, SettingError> {
    if raw.is_empty() || raw.len() > 5 {
        return Err(err(field, "must name 1 to 5 fields"));
    }
    let mut out: Vec<Field> = Vec::new();
    for (i, r) in raw.into_iter().enumerate() {
        let at = format!("{field}[{i}]");
        let name_ok = (1..=32).contains(&r.name.len())
            && r.name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !name_ok {
            return Err(err(format!("{at}.name"), "must be 1-32 of a-z, 0-9 and _"));
        }
        // `csrf`, `e` and `decision` are the form's own inputs.
        if matches!(r.name.as_str(), "csrf" | "e" | "decision") || out.iter().any(|f| f.name == r.name) {
            return Err(err(format!("{at}.name"), format!("{:?} is taken", r.name)));
        }
        let label = r.label.trim();
        if label.is_empty() || label.chars().count() > 60 || label.chars().any(char::is_control) {
            return Err(err(format!("{at}.label"), "must be 1-60 printable characters"));
        }
        out.push(Field { name: r.name, label: label.to_owned(), secret: r.secret });
    }
    if !out.iter().any(|f| f.secret) {
        return Err(err(field, "at least one field must be secret"));
    }
    Ok(out)
}

fn check(field: &str, kind: ProviderKind, c: RawCheck, allow_idn: &[String]) -> Result<Check, SettingError> {
    let f = |sub: &str| format!("{field}.{sub}");
    let url = urls::endpoint(&c.url, allow_idn).map_err(|e| err(f("url"), format!("{:?} {e}", c.url)))?;
    let method = match c.method.as_deref().unwrap_or("GET") {
        "GET" => reqwest::Method::GET,
        "POST" => reqwest::Method::POST,
        "HEAD" => reqwest::Method::HEAD,
        other => return Err(err(f("method"), format!("{other:?}: must be GET, POST or HEAD"))),
    };
    let valid_status = c.valid_status.unwrap_or(200);
    if !(200..300).contains(&valid_status) {
        return Err(err(f("valid_status"), "must be a 2xx status"));
    }
    let placement = match (kind, c.header, c.query) {
        (ProviderKind::Basic, None, None) if c.prefix.is_none() => Placement::Basic,
        (ProviderKind::Basic, ..) => {
            return Err(err(f("header"), "the basic template sends HTTP Basic; no header, prefix or query"));
        }
        (_, Some(_), Some(_)) => return Err(err(f("query"), "a header or a query parameter, not both")),
        (_, None, Some(q)) => {
            if c.prefix.is_some() {
                return Err(err(f("prefix"), "is for a header"));
            }
            if q.is_empty() || q.len() > 64 || !q.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
                return Err(err(f("query"), "must be 1-64 of A-Z, a-z, 0-9, -, _ and ."));
            }
            Placement::Query { name: q }
        }
        (_, header, None) => {
            let name = header.unwrap_or_else(|| "Authorization".to_owned());
            let prefix = c.prefix.unwrap_or_else(|| {
                if name.eq_ignore_ascii_case("authorization") { "Bearer ".into() } else { String::new() }
            });
            let name = reqwest::header::HeaderName::try_from(name.as_str())
                .map_err(|_| err(f("header"), format!("{name:?} is not a header name")))?;
            if prefix.chars().count() > 32 || prefix.chars().any(char::is_control) {
                return Err(err(f("prefix"), "must be at most 32 printable characters"));
            }
            Placement::Header { name, prefix }
        }
    };
    Ok(Check { method, url, placement, valid_status })
}

#[cfg(test)]
mod tests {
    use crate::providers::settings::{RawProvider, validate_provider};

    fn refused(toml_text: &str) -> (String, String) {
        let raw: RawProvider = toml::from_str(toml_text).unwrap();
        let e = validate_provider("p", raw, None).unwrap_err();
        (e.field, e.message)
    }

    #[test]
    fn a_credential_provider_takes_no_oauth_setting_and_checks_its_fields_and_check() {
        let ok: RawProvider = toml::from_str(
            "template = \"api_key\"\naccount_id_field = \"id\"\n[check]\nurl = \"https://api.example.com/me\"\n",
        )
        .unwrap();
        let p = validate_provider("p", ok, None).unwrap();
        let spec = p.credential().unwrap();
        assert_eq!((spec.fields.len(), spec.primary().name.as_str()), (1, "api_key"));
        assert!(p.client().is_none() && p.endpoints().is_none());

        let cases = [
            ("template = \"api_key\"\nclient_id = \"c\"", "providers.p.client_id"),
            ("template = \"basic\"\nscopes = [\"x\"]", "providers.p.scopes"),
            ("template = \"basic\"\nfields = [{ name = \"a\", label = \"A\" }]", "providers.p.fields"),
            ("template = \"api_key\"\nfields = []", "providers.p.fields"),
            ("template = \"api_key\"\nfields = [{ name = \"csrf\", label = \"A\" }]", "providers.p.fields[0].name"),
            ("template = \"api_key\"\nfields = [{ name = \"Key\", label = \"A\" }]", "providers.p.fields[0].name"),
            (
                "template = \"api_key\"\nfields = [{ name = \"a\", label = \"A\", secret = false }]",
                "providers.p.fields",
            ),
            ("template = \"api_key\"\nfields = [{ name = \"a\", label = \"\" }]", "providers.p.fields[0].label"),
            ("template = \"api_key\"\naccount_id_field = \"id\"", "providers.p.account_id_field"),
            ("template = \"api_key\"\n[check]\nurl = \"http://api.example.com/me\"", "providers.p.check.url"),
            (
                "template = \"api_key\"\n[check]\nurl = \"https://a.example/\"\nmethod = \"PUT\"",
                "providers.p.check.method",
            ),
            (
                "template = \"api_key\"\n[check]\nurl = \"https://a.example/\"\nvalid_status = 401",
                "providers.p.check.valid_status",
            ),
            (
                "template = \"api_key\"\n[check]\nurl = \"https://a.example/\"\nheader = \"X\"\nquery = \"k\"",
                "providers.p.check.query",
            ),
            (
                "template = \"api_key\"\n[check]\nurl = \"https://a.example/\"\nheader = \"bad header\"",
                "providers.p.check.header",
            ),
            (
                "template = \"basic\"\n[check]\nurl = \"https://a.example/\"\nheader = \"X-Key\"",
                "providers.p.check.header",
            ),
            (
                "template = \"api_key\"\naccount_id_field = \"id\"\n[check]\nurl = \"https://a.example/\"\nmethod = \"HEAD\"",
                "providers.p.account_id_field",
            ),
            ("template = \"github\"\nclient_id = \"c\"\n[check]\nurl = \"https://a.example/\"", "providers.p.check"),
        ];
        for (text, field) in cases {
            assert_eq!(refused(text).0, field, "{text}");
        }
        // A client secret from the environment is refused too (it would be unused).
        let raw: RawProvider = toml::from_str("template = \"api_key\"").unwrap();
        assert_eq!(validate_provider("p", raw, Some("s".into())).unwrap_err().field, "providers.p.client_secret_file");
    }
}
