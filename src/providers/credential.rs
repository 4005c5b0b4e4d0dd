//! Providers without OAuth: credentials a person types on our connect page (an API key, a
//! username and password), checked against the provider before they are kept.
//!
//! What the provider needs is described in the configuration (`template = "api_key"` or
//! `"basic"`): the fields to ask for, and optionally a check request (where the credential
//! goes: a header, a query parameter or HTTP Basic; the status that means valid) and the
//! account fields read from its answer. The values are sealed as one JSON document
//! ([`Credential`]) into the connection's access-token slot and handed out with their
//! kind, so the MCP server knows how to use them. Nothing here logs a value: the check's
//! span names method and host only (`net::http`).

use super::templates::ProviderKind;
use crate::domain::Account;
use crate::net::http::{Outbound, OutboundError};
use secrecy::{ExposeSecret, SecretString};
use std::collections::BTreeMap;
use url::Url;

/// The longest value a field takes (API keys and passwords are far shorter).
pub const MAX_VALUE_CHARS: usize = 4096;

/// One input of the form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The form's input name and the key the MCP server reads (`[a-z0-9_]`, 1-32).
    pub name: String,
    /// What the page shows above the input.
    pub label: String,
    /// A password input, and never shown back; non-secret fields (a username, a site
    /// name) are plain text inputs.
    pub secret: bool,
}

/// Where the check request carries the credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// `<name>: <prefix><value>` (`Authorization: Bearer …`, `X-Api-Key: …`).
    Header { name: reqwest::header::HeaderName, prefix: String },
    /// `?<name>=<value>` on the check URL.
    Query { name: String },
    /// HTTP Basic with the `username` and `password` fields (the `basic` template).
    Basic,
}

/// A request that tells a good credential from a bad one.
#[derive(Debug, Clone)]
pub struct Check {
    pub method: reqwest::Method,
    pub url: Url,
    pub placement: Placement,
    /// The status that means valid; any other 4xx means refused, a 5xx or no answer means
    /// the provider could not say.
    pub valid_status: u16,
}

/// What a credential provider asks for and how it is checked.
#[derive(Debug, Clone)]
pub struct CredentialSpec {
    pub kind: ProviderKind,
    pub fields: Vec<Field>,
    pub check: Option<Check>,
}

/// Whether a connection row's `token_type` is a typed credential's (its access-token slot
/// holds a sealed [`Credential`] document, not a token).
pub fn is_typed(token_type: &str) -> bool {
    matches!(token_type, "api_key" | "basic")
}

/// The fields of the `basic` template.
pub fn basic_fields() -> Vec<Field> {
    vec![
        Field { name: "username".into(), label: "Username".into(), secret: false },
        Field { name: "password".into(), label: "Password".into(), secret: true },
    ]
}

/// The one field of an `api_key` provider that names none.
pub fn api_key_fields() -> Vec<Field> {
    vec![Field { name: "api_key".into(), label: "API key".into(), secret: true }]
}

/// Why a submitted form was not taken (no value is in the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormRefusal {
    #[error("{0} is empty")]
    Missing(String),
    #[error("{0} is longer than {MAX_VALUE_CHARS} characters")]
    TooLong(String),
    #[error("{0} holds a control character")]
    Control(String),
    /// HTTP Basic cannot carry a username with a colon (RFC 7617 §2).
    #[error("{0} may not hold a colon")]
    Colon(String),
}

impl CredentialSpec {
    /// `api_key` or `basic`: the `credential_type` of `/v1/token` and the stored
    /// `token_type`.
    pub fn credential_type(&self) -> &'static str {
        match self.kind {
            ProviderKind::Basic => "basic",
            _ => "api_key",
        }
    }

    /// The field whose value is the `access_token` handed out and the one the check
    /// carries: `password` for `basic`, else the first secret field (validation makes sure
    /// there is one).
    pub fn primary(&self) -> &Field {
        self.fields.iter().find(|f| f.secret).unwrap_or(&self.fields[0])
    }

    /// Whether a stored credential (its row's `token_type` and its document) is of this
    /// kind, with these fields: one that is not is not handed out (the file changed the
    /// provider since; the person connects anew).
    pub fn fits(&self, token_type: &str, c: &Credential) -> bool {
        token_type == self.credential_type()
            && c.fields.len() == self.fields.len()
            && self.fields.iter().all(|f| c.fields.contains_key(&f.name))
            && c.fields.get(&self.primary().name) == Some(&c.token)
    }

    /// The values of the form, one per field, each non-empty, bounded and printable
    /// (surrounding white space is dropped: a pasted key often brings a newline). Other
    /// inputs of the form are ignored.
    pub fn values(&self, form: &BTreeMap<String, String>) -> Result<Credential, FormRefusal> {
        let mut fields = BTreeMap::new();
        for f in &self.fields {
            let v = form.get(&f.name).map(|v| v.trim()).unwrap_or_default();
            if v.is_empty() {
                return Err(FormRefusal::Missing(f.label.clone()));
            }
            if v.chars().count() > MAX_VALUE_CHARS {
                return Err(FormRefusal::TooLong(f.label.clone()));
            }
            if v.chars().any(char::is_control) {
                return Err(FormRefusal::Control(f.label.clone()));
            }
            if self.kind == ProviderKind::Basic && f.name == "username" && v.contains(':') {
                return Err(FormRefusal::Colon(f.label.clone()));
            }
            fields.insert(f.name.clone(), v.to_owned());
        }
        let token = fields.get(&self.primary().name).cloned().unwrap_or_default();
        Ok(Credential { token, fields })
    }
}

/// A credential as typed: what is sealed and what `/v1/token` hands out. Its `Debug`
/// shows no value.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct Credential {
    /// The primary field's value (`access_token` in `/v1/token`).
    pub token: String,
    /// Every field by name.
    pub fields: BTreeMap<String, String>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential").field("fields", &self.fields.keys().collect::<Vec<_>>()).finish_non_exhaustive()
    }
}

impl Credential {
    /// The JSON document sealed into the vault.
    pub fn sealable(&self) -> SecretString {
        SecretString::from(serde_json::to_string(self).unwrap_or_default())
    }

    /// The sealed document opened again; `None` if it is not one.
    pub fn from_opened(opened: &SecretString) -> Option<Self> {
        serde_json::from_str(opened.expose_secret()).ok()
    }
}

/// What the provider said of a credential.
#[derive(Debug)]
pub enum Checked {
    /// Valid; the account read from the answer, where the provider names the fields.
    Valid(Option<Account>),
    /// Not valid: the status the provider answered.
    Refused(u16),
}

/// Sends the check request with the credential in it. `Err`: the provider could not say
/// (no answer, a 5xx, a 429, an address the guard refuses).
pub async fn check(
    http: &Outbound,
    check: &Check,
    credential: &Credential,
    account_fields: (&str, &str),
) -> Result<Checked, OutboundError> {
    let mut url = check.url.clone();
    let mut headers = reqwest::header::HeaderMap::new();
    let mut basic = None;
    match &check.placement {
        Placement::Header { name, prefix } => {
            let mut value = reqwest::header::HeaderValue::try_from(format!("{prefix}{}", credential.token))
                .map_err(|_| OutboundError::Request("the value cannot be sent in a header".into()))?;
            value.set_sensitive(true);
            headers.insert(name.clone(), value);
        }
        Placement::Query { name } => {
            url.query_pairs_mut().append_pair(name, &credential.token);
        }
        Placement::Basic => {
            let user = credential.fields.get("username").cloned().unwrap_or_default();
            basic = Some((user, credential.token.clone()));
        }
    }
    let (status, body) = http.send_check(check.method.clone(), &url, headers, basic).await?;
    if status == check.valid_status {
        let (id_field, login_field) = account_fields;
        if id_field.is_empty() {
            return Ok(Checked::Valid(None));
        }
        // The account is what pins the connection to one upstream account: an answer that
        // does not name it is not taken as valid (as a failed user lookup is not, in OAuth).
        let answer: serde_json::Value = serde_json::from_slice(&body).map_err(|_| OutboundError::Json)?;
        let id = super::json_field(&answer, id_field).ok_or(OutboundError::Json)?;
        let login = (!login_field.is_empty()).then(|| super::json_field(&answer, login_field)).flatten();
        return Ok(Checked::Valid(Some(Account { id, login })));
    }
    if status == 429 || status >= 500 {
        return Err(OutboundError::Status(status));
    }
    Ok(Checked::Refused(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(fields: Vec<Field>) -> CredentialSpec {
        CredentialSpec { kind: ProviderKind::ApiKey, fields, check: None }
    }

    fn form(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn a_form_gives_one_trimmed_value_per_field_and_refuses_empty_long_or_control_values() {
        let s = spec(api_key_fields());
        let c = s.values(&form(&[("api_key", "  sk-123\n"), ("other", "x")])).unwrap();
        assert_eq!(c.token, "sk-123");
        assert_eq!(c.fields.keys().collect::<Vec<_>>(), ["api_key"], "other inputs are not kept");
        assert_eq!(s.values(&form(&[])).unwrap_err(), FormRefusal::Missing("API key".into()));
        assert_eq!(s.values(&form(&[("api_key", "   ")])).unwrap_err(), FormRefusal::Missing("API key".into()));
        let long = "k".repeat(MAX_VALUE_CHARS + 1);
        assert_eq!(s.values(&form(&[("api_key", &long)])).unwrap_err(), FormRefusal::TooLong("API key".into()));
        assert_eq!(s.values(&form(&[("api_key", "a\u{7}b")])).unwrap_err(), FormRefusal::Control("API key".into()));
    }

    #[test]
    fn the_primary_field_is_the_first_secret_one_and_basic_hands_out_the_password() {
        let fields = vec![
            Field { name: "site".into(), label: "Site".into(), secret: false },
            Field { name: "key".into(), label: "Key".into(), secret: true },
        ];
        assert_eq!(spec(fields).primary().name, "key");
        let basic = CredentialSpec { kind: ProviderKind::Basic, fields: basic_fields(), check: None };
        let c = basic.values(&form(&[("username", "ann"), ("password", "pw")])).unwrap();
        assert_eq!((c.token.as_str(), basic.credential_type()), ("pw", "basic"));
    }

    #[test]
    fn a_stored_credential_fits_only_the_kind_and_fields_it_was_typed_for() {
        let fields = |names: &[&str]| -> BTreeMap<String, String> {
            names.iter().map(|n| ((*n).to_owned(), format!("v-{n}"))).collect()
        };
        let key = spec(api_key_fields());
        let typed = key.values(&fields(&["api_key"])).unwrap();
        assert!(key.fits("api_key", &typed));
        assert!(!key.fits("basic", &typed), "the row's type");
        let basic = CredentialSpec { kind: ProviderKind::Basic, fields: basic_fields(), check: None };
        let pair = basic.values(&fields(&["username", "password"])).unwrap();
        assert!(basic.fits("basic", &pair));
        assert!(!key.fits("api_key", &pair), "a password is not handed out as a key");
        assert!(!basic.fits("basic", &typed));
        assert_eq!(
            basic.values(&form(&[("username", "a:b"), ("password", "p")])).unwrap_err(),
            FormRefusal::Colon("Username".into())
        );
    }

    #[test]
    fn a_credentials_debug_shows_no_value() {
        let c = spec(api_key_fields()).values(&form(&[("api_key", "sk-very-secret")])).unwrap();
        let shown = format!("{c:?}");
        assert!(!shown.contains("sk-very-secret"), "{shown}");
        let back = Credential::from_opened(&c.sealable()).unwrap();
        assert_eq!(back.token, "sk-very-secret");
    }
}
