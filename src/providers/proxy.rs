//! Where the proxy (`/v1/proxy/{provider}/…`) may send a caller's request with the user's
//! credential attached: the provider's API origins, the path prefixes and the methods the
//! operator allows ([`ProxyRules`]), and the one check of a request's target against them
//! ([`ProxyRules::target`]).
//!
//! A path is refused rather than normalised: a dot segment, an empty segment, an encoded
//! slash, backslash, dot or percent sign, or a byte RFC 3986 does not allow in a path could
//! mean another resource to the provider (or to a server in front of it that decodes once
//! more) than the one checked. What passes is sent byte for byte as it was checked.

use reqwest::Method;
use url::Url;

/// The methods a proxied request may use where the configuration names none.
pub const DEFAULT_METHODS: [Method; 6] =
    [Method::GET, Method::HEAD, Method::POST, Method::PUT, Method::PATCH, Method::DELETE];

/// The longest path (after `/v1/proxy/{provider}`) and query a proxied request may have.
pub const MAX_PATH: usize = 4096;

/// Where a provider's proxied requests may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRules {
    /// Origins (`https://api.github.com`), serialised; the first is the default, another is
    /// chosen with the `MCP-Connect-Origin` header.
    pub origins: Vec<String>,
    /// Path prefixes, each starting with `/`: `/` allows any path; `/api/` allows `/api`
    /// and what is below it; `/user` allows `/user` and `/user/…`, not `/users`.
    pub paths: Vec<String>,
    pub methods: Vec<Method>,
    /// An encoded slash (`%2F`) may stand inside a segment, as GitLab names a project
    /// (`/api/v4/projects/group%2Fproject`): each piece between them is held to a segment's
    /// rules (no dot or empty piece), so that a server that decodes it before routing
    /// still sees no traversal. Sent encoded, as received.
    pub encoded_slashes: bool,
}

/// Why a request's target is refused; nothing was sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyRefusal {
    /// The path or query is not one the proxy forwards as it is.
    #[error("the path is refused: {0}")]
    Malformed(&'static str),
    #[error("the path is not under one this provider's proxy allows")]
    PathNotAllowed,
    #[error("the method is not one this provider's proxy allows")]
    MethodNotAllowed,
    #[error("MCP-Connect-Origin is not one of this provider's API origins")]
    OriginNotAllowed,
}

impl ProxyRules {
    /// The URL a request for `path` (from its `/`, percent-encoded as received) and `query`
    /// goes to, at the configured origin `origin` names (the first when `None`).
    pub fn target(
        &self,
        method: &Method,
        origin: Option<&str>,
        path: &str,
        query: Option<&str>,
    ) -> Result<Url, ProxyRefusal> {
        let origin = match origin {
            None => self.origins.first().ok_or(ProxyRefusal::OriginNotAllowed)?,
            Some(o) => self.origins.iter().find(|c| *c == o).ok_or(ProxyRefusal::OriginNotAllowed)?,
        };
        check_path(path, self.encoded_slashes)?;
        if let Some(q) = query {
            check_query(q, self.encoded_slashes)?;
        }
        if path.len() + query.map_or(0, str::len) > MAX_PATH {
            return Err(ProxyRefusal::Malformed("longer than 4096 bytes"));
        }
        if !self.methods.contains(method) {
            return Err(ProxyRefusal::MethodNotAllowed);
        }
        if !self.paths.iter().any(|prefix| under(path, prefix)) {
            return Err(ProxyRefusal::PathNotAllowed);
        }
        let raw = match query {
            Some(q) => format!("{origin}{path}?{q}"),
            None => format!("{origin}{path}"),
        };
        let url = Url::parse(&raw).map_err(|_| ProxyRefusal::Malformed("not a URL"))?;
        // What was checked is what goes: the parser changed nothing (it would resolve dot
        // segments or move to another host, both refused above). A query it may re-encode
        // (`'`): it names no place.
        if url.origin().ascii_serialization() != *origin || url.path() != path {
            return Err(ProxyRefusal::Malformed("not sent as it is"));
        }
        Ok(url)
    }

    /// The methods, for a 405's `Allow`.
    pub fn allow(&self) -> String {
        self.methods.iter().map(Method::as_str).collect::<Vec<_>>().join(", ")
    }
}

/// Whether `path` is `prefix` or below it (on a segment boundary).
fn under(path: &str, prefix: &str) -> bool {
    let bare = prefix.trim_end_matches('/');
    bare.is_empty() || path == bare || path.strip_prefix(bare).is_some_and(|rest| rest.starts_with('/'))
}

/// RFC 3986 `pchar` without `%` (checked apart): unreserved, sub-delims, `:` and `@`.
fn is_pchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b)
}

/// A path the proxy forwards as it is: from `/`, segments of `pchar` and `%XX` encodings of
/// neither `/` (unless `encoded_slashes`), `\`, `.`, `%` nor a control character; no `.`
/// or `..` segment (also before a `;`, which some servers strip); no empty segment but a
/// last one (`/repos/`). With `encoded_slashes`, the pieces of a segment between its `%2F`s
/// are held to the same rules.
pub fn check_path(path: &str, encoded_slashes: bool) -> Result<(), ProxyRefusal> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err(ProxyRefusal::Malformed("it does not start with /"));
    };
    let segments: Vec<&str> = rest.split('/').collect();
    for (i, segment) in segments.iter().enumerate() {
        if segment.is_empty() && i + 1 < segments.len() {
            return Err(ProxyRefusal::Malformed("an empty segment (//)"));
        }
        check_encoded(segment, is_pchar, encoded_slashes)?;
        let pieces: Vec<&str> = if encoded_slashes { split_encoded_slashes(segment) } else { vec![segment] };
        for piece in &pieces {
            let name = piece.split(';').next().unwrap_or_default();
            if name == "." || name == ".." {
                return Err(ProxyRefusal::Malformed("a dot segment"));
            }
            if piece.is_empty() && pieces.len() > 1 {
                return Err(ProxyRefusal::Malformed("an encoded slash at the end of a name or next to another"));
            }
        }
    }
    Ok(())
}

/// `segment` split at each `%2F` (either case).
fn split_encoded_slashes(segment: &str) -> Vec<&str> {
    let bytes = segment.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i + 3 <= bytes.len() {
        if bytes[i] == b'%' && bytes[i + 1] == b'2' && bytes[i + 2].eq_ignore_ascii_case(&b'f') {
            out.push(&segment[start..i]);
            start = i + 3;
            i += 3;
        } else {
            i += 1;
        }
    }
    out.push(&segment[start..]);
    out
}

/// A query of RFC 3986 `query` characters, with the same encodings refused as in a path
/// but `/` (and `%2F` where the provider takes it in a path).
fn check_query(query: &str, encoded_slashes: bool) -> Result<(), ProxyRefusal> {
    check_encoded(query, |b| is_pchar(b) || b == b'/' || b == b'?', encoded_slashes)
}

/// Each byte allowed by `plain`, or a `%XX` that does not decode to a separator (but `/`
/// where `slash` says), a dot, a percent sign or a control character.
fn check_encoded(s: &str, plain: impl Fn(u8) -> bool, slash: bool) -> Result<(), ProxyRefusal> {
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = bytes.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            let decoded = hex.and_then(|h| u8::from_str_radix(h, 16).ok());
            match decoded {
                None => return Err(ProxyRefusal::Malformed("a % that is not an encoding")),
                Some(b'/') if slash => i += 3,
                Some(b'/' | b'\\') => return Err(ProxyRefusal::Malformed("an encoded slash or backslash")),
                Some(b'.') => return Err(ProxyRefusal::Malformed("an encoded dot")),
                Some(b'%') => return Err(ProxyRefusal::Malformed("an encoded percent sign")),
                Some(c) if c < 0x20 || c == 0x7f => {
                    return Err(ProxyRefusal::Malformed("an encoded control character"));
                }
                Some(_) => i += 3,
            }
        } else if plain(b) {
            i += 1;
        } else {
            return Err(ProxyRefusal::Malformed("a character that must be percent-encoded"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> ProxyRules {
        ProxyRules {
            origins: vec!["https://api.example.com".into(), "https://uploads.example.com".into()],
            paths: vec!["/user".into(), "/repos/".into()],
            methods: vec![Method::GET, Method::POST],
            encoded_slashes: false,
        }
    }

    #[test]
    fn an_encoded_slash_passes_where_the_provider_takes_it_and_its_pieces_are_segments() {
        let gitlab = ProxyRules { paths: vec!["/api/v4/".into()], encoded_slashes: true, ..rules() };
        let url = gitlab.target(&Method::GET, None, "/api/v4/projects/group%2Fsub%2fproject/issues", None).unwrap();
        assert_eq!(url.path(), "/api/v4/projects/group%2Fsub%2fproject/issues", "sent encoded, as received");
        let url = gitlab.target(&Method::GET, None, "/api/v4/projects/1/files", Some("path=a%2Fb.txt")).unwrap();
        assert_eq!(url.query(), Some("path=a%2Fb.txt"));
        for path in [
            "/api/v4/projects/group%2F..%2F..%2Fadmin",
            "/api/v4/projects/..%2Fadmin",
            "/api/v4/projects/group%2F.",
            "/api/v4/projects/group%2F..;x",
            "/api/v4/projects/group%2F%2Fx",
            "/api/v4/projects/group%2F",
            "/api/v4/projects/%2Fgroup",
            "/api/v4/projects/group%5cx",
            "/api/v4/projects/group%252Fx",
        ] {
            let out = gitlab.target(&Method::GET, None, path, None);
            assert!(matches!(out, Err(ProxyRefusal::Malformed(_))), "{path}: {out:?}");
        }
        // A prefix is matched on real slashes: an encoded one does not make `/api/v4/`.
        assert_eq!(gitlab.target(&Method::GET, None, "/api%2Fv4/x", None), Err(ProxyRefusal::PathNotAllowed));
        // Elsewhere refused as before.
        let github = ProxyRules { paths: vec!["/".into()], ..rules() };
        assert!(matches!(github.target(&Method::GET, None, "/a%2Fb", None), Err(ProxyRefusal::Malformed(_))));
    }

    #[test]
    fn a_path_under_a_prefix_goes_to_the_chosen_origin_as_it_is() {
        let r = rules();
        let url = r.target(&Method::GET, None, "/repos/o/r/issues", Some("state=open&q=a%20b")).unwrap();
        assert_eq!(url.as_str(), "https://api.example.com/repos/o/r/issues?state=open&q=a%20b");
        let url = r.target(&Method::POST, Some("https://uploads.example.com"), "/user", None).unwrap();
        assert_eq!(url.as_str(), "https://uploads.example.com/user");
        assert!(r.target(&Method::GET, None, "/user/keys", None).is_ok());
        assert!(r.target(&Method::GET, None, "/repos", None).is_ok());
        assert!(r.target(&Method::GET, None, "/repos/", None).is_ok());
        assert!(r.target(&Method::GET, None, "/repos/o/r/contents/a%20b.txt", None).is_ok());
    }

    #[test]
    fn what_is_not_allowed_is_refused_for_its_reason() {
        let r = rules();
        assert_eq!(r.target(&Method::GET, None, "/users", None), Err(ProxyRefusal::PathNotAllowed));
        assert_eq!(r.target(&Method::GET, None, "/", None), Err(ProxyRefusal::PathNotAllowed));
        assert_eq!(r.target(&Method::DELETE, None, "/user", None), Err(ProxyRefusal::MethodNotAllowed));
        let other = Some("https://evil.example");
        assert_eq!(r.target(&Method::GET, other, "/user", None), Err(ProxyRefusal::OriginNotAllowed));
        // An origin is compared whole: no prefix, no other port, no trailing slash.
        for o in ["https://api.example.com/", "https://api.example.com:8443", "https://api.example.co"] {
            assert_eq!(r.target(&Method::GET, Some(o), "/user", None), Err(ProxyRefusal::OriginNotAllowed), "{o}");
        }
    }

    #[test]
    fn traversal_and_ambiguous_paths_are_refused_in_every_spelling() {
        let r = ProxyRules { paths: vec!["/".into()], ..rules() };
        let refused = [
            "/user/../admin",
            "/user/./x",
            "/..",
            "/user/%2e%2e/admin",
            "/user/%2E%2E/admin",
            "/user/.%2e/admin",
            "/user/%2e./admin",
            "/user%2f..%2fadmin",
            "/user%2F..",
            "/user%5c..%5cadmin",
            "/user\\..\\admin",
            "/user/..;/admin",
            "/user/%252e%252e/admin",
            "//evil.example/x",
            "/user//x",
            "/user/%00",
            "/user/%0d%0aHost:%20evil",
            "/user/%zz",
            "/user/%2",
            "/user /x",
            "/user/\u{e9}",
            "user",
            "/user#frag",
            "/a\"b",
        ];
        for path in refused {
            assert!(
                matches!(r.target(&Method::GET, None, path, None), Err(ProxyRefusal::Malformed(_))),
                "{path} should be refused as malformed"
            );
        }
        for query in ["a=%2e%2e%2f", "a b", "a=\u{7f}", "x=%0a", "a=%"] {
            let out = r.target(&Method::GET, None, "/user", Some(query));
            assert!(matches!(out, Err(ProxyRefusal::Malformed(_))), "{query}: {out:?}");
        }
        // Dots inside a name are a name.
        assert!(r.target(&Method::GET, None, "/repos/o/r/contents/.github/a..b", None).is_ok());
        assert!(r.target(&Method::GET, None, "/a/...", None).is_ok());
        let long = format!("/{}", "a".repeat(MAX_PATH));
        assert!(matches!(r.target(&Method::GET, None, &long, None), Err(ProxyRefusal::Malformed(_))));
    }
}
