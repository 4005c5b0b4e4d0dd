//! Request parameters with the one rule every OAuth endpoint shares: no name twice
//! (RFC 6749 §3.1 and §3.2).

use std::collections::BTreeMap;

#[derive(Debug, Default)]
pub(crate) struct Params(BTreeMap<String, String>);

/// The name that appeared more than once.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Repeated(pub String);

impl Params {
    pub(crate) fn from_pairs(pairs: Vec<(String, String)>) -> Result<Self, Repeated> {
        let mut map = BTreeMap::new();
        for (name, value) in pairs {
            if map.contains_key(&name) {
                return Err(Repeated(name));
            }
            map.insert(name, value);
        }
        Ok(Self(map))
    }

    /// RFC 6749 §3.1: a parameter sent without a value is treated as omitted.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str).filter(|v| !v.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_repeated_name_is_refused() {
        let err = Params::from_pairs(pairs(&[("a", "1"), ("b", "2"), ("a", "3")])).unwrap_err();
        assert_eq!(err, Repeated("a".into()));
    }

    #[test]
    fn an_empty_value_counts_as_omitted() {
        let params = Params::from_pairs(pairs(&[("a", ""), ("b", "x")])).unwrap();
        assert_eq!(params.get("a"), None);
        assert_eq!(params.get("b"), Some("x"));
    }
}
