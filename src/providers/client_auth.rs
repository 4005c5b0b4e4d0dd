//! How mcp-connect proves to an authorization server that it is the client (RFC 6749
//! §2.3.1; the names are RFC 7591 §2's `token_endpoint_auth_method` values): the secret in
//! an HTTP Basic header, the secret in the form body, or no secret (a public client, whose
//! `client_id` goes in the body). Used alike on token, refresh and revocation requests.
//!
//! Which one: the provider's configuration says, else the server's metadata
//! (`token_endpoint_auth_methods_supported`, RFC 8414 §2 / OIDC Discovery §3) decides
//! among those we can use, else RFC 8414's default, HTTP Basic. A secret is never sent a
//! way the server did not list: many servers (the MCP TypeScript SDK's among them) answer
//! HTTP Basic with `invalid_request`, not with a hint.

/// Form fields, in order.
pub type Form<'a> = Vec<(&'a str, &'a str)>;
/// An HTTP Basic user and password.
pub type Basic = (String, String);

/// One way of authenticating the client at the token and revocation endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize, utoipa::ToSchema)]
pub enum ClientAuth {
    /// The id and secret in an `Authorization: Basic` header (RFC 6749 §2.3.1).
    #[serde(rename = "client_secret_basic")]
    Basic,
    /// The id and secret as `client_id` and `client_secret` in the form body.
    #[serde(rename = "client_secret_post")]
    Post,
    /// No secret: a public client names itself with `client_id` in the body (PKCE protects
    /// its codes).
    #[serde(rename = "none")]
    Public,
    /// No secret: a fresh assertion signed by the service's client key (RFC 7523 §2.2), whose
    /// public half the server fetches from `/.well-known/jwks.json`.
    #[serde(rename = "private_key_jwt")]
    PrivateKeyJwt,
}

impl ClientAuth {
    /// The RFC 7591 name.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuth::Basic => "client_secret_basic",
            ClientAuth::Post => "client_secret_post",
            ClientAuth::Public => "none",
            ClientAuth::PrivateKeyJwt => "private_key_jwt",
        }
    }

    /// An RFC 7591 name we can use (`client_secret_jwt` is not: its key would be a shared
    /// secret again).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "client_secret_basic" => Some(ClientAuth::Basic),
            "client_secret_post" => Some(ClientAuth::Post),
            "none" => Some(ClientAuth::Public),
            "private_key_jwt" => Some(ClientAuth::PrivateKeyJwt),
            _ => None,
        }
    }

    /// Whether it sends a client secret.
    pub fn sends_secret(self) -> bool {
        matches!(self, ClientAuth::Basic | ClientAuth::Post)
    }

    /// A form request (RFC 7009 revocation) authenticated this way: the form with what
    /// goes in the body, and the HTTP Basic user and password (form-encoded first, RFC
    /// 6749 §2.3.1), if any.
    /// `credential` is the client secret, or for `private_key_jwt` a fresh assertion.
    pub fn form<'a>(self, client_id: &'a str, credential: &'a str, mut form: Form<'a>) -> (Form<'a>, Option<Basic>) {
        let enc = |s: &str| url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
        match self {
            ClientAuth::Basic => return (form, Some((enc(client_id), enc(credential)))),
            ClientAuth::Post => form.extend([("client_id", client_id), ("client_secret", credential)]),
            // A public client names itself in the body (RFC 7009 §2.1).
            ClientAuth::Public => form.push(("client_id", client_id)),
            ClientAuth::PrivateKeyJwt => form.extend([
                ("client_id", client_id),
                ("client_assertion_type", crate::keys::client_keys::JWT_BEARER),
                ("client_assertion", credential),
            ]),
        }
        (form, None)
    }
}

/// The method to use with a server that advertises `supported` (`None`: its metadata says
/// nothing, or there is none), for a client with or without a secret, unless the
/// configuration named one (`configured`, which wins: the operator's word).
///
/// With a secret: HTTP Basic where listed or where nothing is listed (RFC 8414 §2's
/// default), else the form body where listed; a server that lists neither cannot take our
/// secret, and is refused with the reason. Without a secret: `none`, which a server that
/// lists methods must list.
pub fn choose(
    configured: Option<ClientAuth>,
    supported: Option<&[String]>,
    has_secret: bool,
) -> Result<ClientAuth, String> {
    if let Some(c) = configured {
        return Ok(c);
    }
    let listed = |m: ClientAuth| supported.is_none_or(|list| list.iter().any(|s| s == m.as_str()));
    let listed_names = || supported.map(|l| l.join(", ")).unwrap_or_default();
    if has_secret {
        [ClientAuth::Basic, ClientAuth::Post].into_iter().find(|m| listed(*m)).ok_or_else(|| {
            format!(
                "its token endpoint takes neither client_secret_basic nor client_secret_post (it lists: {}); set \
                 token_endpoint_auth_method to one it takes",
                listed_names()
            )
        })
    } else if listed(ClientAuth::Public) {
        Ok(ClientAuth::Public)
    } else {
        Err(format!(
            "its token endpoint takes no public client (it lists: {}): configure a client secret",
            listed_names()
        ))
    }
}

/// The method to register with (RFC 7591 §2) at a server that lists `supported`: one that
/// sends a secret where the server offers one (a confidential client: a stolen refresh
/// token alone is then useless), else `none`.
pub fn for_registration(supported: Option<&[String]>) -> ClientAuth {
    choose(None, supported, true).unwrap_or(ClientAuth::Public)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn the_method_is_the_configured_one_else_one_the_server_lists() {
        use ClientAuth::*;
        let sdk = list(&["client_secret_post", "none"]);
        let basic_only = list(&["client_secret_basic"]);
        let both = list(&["client_secret_post", "client_secret_basic"]);
        let jwt_only = list(&["private_key_jwt"]);
        type Case<'a> = (Option<ClientAuth>, Option<&'a [String]>, bool, Result<ClientAuth, ()>);
        let cases: [Case<'_>; 10] = [
            (None, None, true, Ok(Basic)),
            (None, Some(&sdk), true, Ok(Post)),
            (None, Some(&basic_only), true, Ok(Basic)),
            (None, Some(&both), true, Ok(Basic)),
            (None, Some(&jwt_only), true, Err(())),
            (None, Some(&sdk), false, Ok(Public)),
            (None, None, false, Ok(Public)),
            (None, Some(&basic_only), false, Err(())),
            (Some(Post), Some(&basic_only), true, Ok(Post)),
            (Some(Basic), None, true, Ok(Basic)),
        ];
        for (configured, supported, secret, want) in cases {
            let got = choose(configured, supported, secret);
            assert_eq!(got.clone().map_err(|_| ()), want, "{configured:?} {supported:?} {secret}: {got:?}");
        }
        assert!(choose(None, Some(&jwt_only), true).unwrap_err().contains("private_key_jwt"));
    }

    #[test]
    fn a_registration_asks_for_a_secret_where_the_server_offers_one() {
        assert_eq!(for_registration(Some(&list(&["client_secret_post", "none"]))), ClientAuth::Post);
        assert_eq!(for_registration(None), ClientAuth::Basic);
        assert_eq!(for_registration(Some(&list(&["none"]))), ClientAuth::Public);
        for m in [ClientAuth::Basic, ClientAuth::Post, ClientAuth::Public, ClientAuth::PrivateKeyJwt] {
            assert_eq!(ClientAuth::parse(m.as_str()), Some(m));
            assert_eq!(serde_json::to_value(m).unwrap(), m.as_str());
        }
        // Its key would be a shared secret again.
        assert_eq!(ClientAuth::parse("client_secret_jwt"), None);
        assert!(!ClientAuth::PrivateKeyJwt.sends_secret());
    }
}
