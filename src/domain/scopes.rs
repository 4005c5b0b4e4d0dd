//! OAuth scopes as a sorted, de-duplicated set (RFC 6749 §3.3 scope-token syntax).

use super::ParseError;

const MAX_SCOPES: usize = 50;
const MAX_SCOPE_LEN: usize = 256;

/// A sorted, de-duplicated list of scope tokens. Sorting makes "the same scopes" one value,
/// so a retried call with the scopes in another order reuses its pending elicitation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default, serde::Serialize)]
#[serde(transparent)]
pub struct Scopes(Vec<String>);

impl Scopes {
    /// What a caller names: at most 50 scope tokens.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, ParseError> {
        if items.len() > MAX_SCOPES {
            return Err(ParseError("at most 50 scopes"));
        }
        Self::tokens(items)
    }

    /// What was stored: scope tokens, as many as there are. A stored set is a union of
    /// checked ones (a re-connect asks for what was asked plus what was granted, and a
    /// provider may grant more), so it may hold more than a caller may name; reading it
    /// back must not fail on that.
    pub fn parse_stored<S: AsRef<str>>(items: &[S]) -> Result<Self, ParseError> {
        Self::tokens(items)
    }

    fn tokens<S: AsRef<str>>(items: &[S]) -> Result<Self, ParseError> {
        let mut v = Vec::with_capacity(items.len());
        for s in items {
            let s = s.as_ref();
            if s.is_empty() || s.len() > MAX_SCOPE_LEN {
                return Err(ParseError("each scope must be 1-256 characters"));
            }
            // scope-token = 1*( %x21 / %x23-5B / %x5D-7E )
            if !s.bytes().all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b)) {
                return Err(ParseError("a scope may hold printable ASCII except space, '\"' and '\\'"));
            }
            v.push(s.to_owned());
        }
        v.sort();
        v.dedup();
        Ok(Self(v))
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether every scope of `wanted` is in `self`.
    pub fn covers(&self, wanted: &Scopes) -> bool {
        wanted.0.iter().all(|w| self.0.binary_search(w).is_ok())
    }

    /// The union, for a re-connect that must keep what was granted before.
    pub fn union(&self, other: &Scopes) -> Scopes {
        let mut v: Vec<String> = self.0.iter().chain(other.0.iter()).cloned().collect();
        v.sort();
        v.dedup();
        Scopes(v)
    }

    pub fn join(&self, sep: &str) -> String {
        self.0.join(sep)
    }
}

/// Stored in a `TEXT[]` column as the sorted list, and read back through
/// [`Scopes::parse_stored`]: a stored list holding something that is no scope token is a
/// decode error, never quietly no scopes; one longer than a request may name is not.
impl sqlx::Type<sqlx::Postgres> for Scopes {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <Vec<String> as sqlx::Type<sqlx::Postgres>>::type_info()
    }
    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <Vec<String> as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, sqlx::Postgres> for Scopes {
    fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let items = <Vec<String> as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
        Ok(Self::parse_stored(&items)?)
    }
}

impl sqlx::Encode<'_, sqlx::Postgres> for Scopes {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        <&[String] as sqlx::Encode<sqlx::Postgres>>::encode(self.as_slice(), buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_union_may_hold_more_than_a_request_names_but_only_scope_tokens() {
        let many: Vec<String> = (0..60).map(|i| format!("s{i:02}")).collect();
        assert!(Scopes::parse(&many).is_err(), "a request names at most 50");
        let stored = Scopes::parse_stored(&many).unwrap();
        assert_eq!(stored.as_slice().len(), 60);
        let a = Scopes::parse(&many[..40]).unwrap();
        let b = Scopes::parse(&many[20..]).unwrap();
        assert_eq!(a.union(&b), stored, "the union of two requests reads back as stored");
        assert!(Scopes::parse_stored(&["ok", "not ok"]).is_err());
        assert!(Scopes::parse_stored(&[""]).is_err());
    }

    #[test]
    fn scopes_are_sorted_and_deduplicated() {
        let s = Scopes::parse(&["repo", "read:user", "repo"]).unwrap();
        assert_eq!(s.as_slice(), &["read:user".to_owned(), "repo".to_owned()]);
    }

    #[test]
    fn scopes_refuse_spaces_quotes_backslashes_and_empties() {
        assert!(Scopes::parse(&["a b"]).is_err());
        assert!(Scopes::parse(&["a\"b"]).is_err());
        assert!(Scopes::parse(&["a\\b"]).is_err());
        assert!(Scopes::parse(&[""]).is_err());
        assert!(Scopes::parse(&["é"]).is_err());
        assert!(Scopes::parse(&vec!["x"; 51]).is_err());
        assert!(Scopes::parse(&["https://www.googleapis.com/auth/userinfo.email"]).is_ok());
    }

    #[test]
    fn covers_is_subset() {
        let have = Scopes::parse(&["a", "b", "c"]).unwrap();
        assert!(have.covers(&Scopes::parse(&["a", "c"]).unwrap()));
        assert!(have.covers(&Scopes::default()));
        assert!(!have.covers(&Scopes::parse(&["d"]).unwrap()));
    }
}
