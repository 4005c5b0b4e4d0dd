//! Property tests of the callback query: it parses exactly when no parameter of RFC 6749
//! §3.1 is repeated, and keeps every value as sent.

use super::CallbackQuery;
use crate::domain::props::{any_string, made_of};
use actix_web::web::Query;
use proptest::prelude::*;

const CALLBACK_PARAMETERS: [&str; 4] = ["code", "state", "iss", "error"];

const QUERY_PIECES: &[&str] = &[
    "code=",
    "state=",
    "iss=",
    "error=",
    "error_description=",
    "c%6Fde=",
    "st%61te=",
    "&",
    "=",
    "%",
    "%2",
    "%26",
    "%3D",
    "+",
    ";",
    "&&",
    "x",
];

proptest! {
    /// An arbitrary query parses (as the handlers' `web::Query` does) exactly when none of
    /// `code`, `state`, `iss`, `error` is repeated (RFC 6749 §3.1), and then each holds the
    /// decoded value its parameter had, whatever else the query carries.
    #[test]
    fn callback_query_holds_exactly_its_decoded_parameters(query in made_of(QUERY_PIECES, 0..12)) {
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        let values = |name: &str| pairs.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_str()).collect::<Vec<_>>();
        let repeated = CALLBACK_PARAMETERS.into_iter().any(|name| values(name).len() > 1);
        match Query::<CallbackQuery>::from_query(&query) {
            Ok(q) => {
                prop_assert!(!repeated, "a repeated parameter was accepted: {query:?}");
                for (name, value) in CALLBACK_PARAMETERS.into_iter().zip([&q.code, &q.state, &q.iss, &q.error]) {
                    prop_assert_eq!(value.as_deref(), values(name).first().copied(), "{}", name);
                }
            }
            Err(_) => prop_assert!(repeated, "refused: {query:?}"),
        }
    }

    /// Any values, encoded as a provider encodes them, come back exactly; unknown
    /// parameters are ignored.
    #[test]
    fn callback_query_keeps_every_value_as_sent(
        fields in prop::array::uniform4(prop::option::of(any_string(40))),
        extra in prop::collection::vec(
            (
                "[a-z_]{1,12}".prop_filter("not a callback parameter", |n| !CALLBACK_PARAMETERS.contains(&n.as_str())),
                any_string(10),
            ),
            0..4,
        ),
    ) {
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        for (name, value) in &extra {
            form.append_pair(name, value);
        }
        for (name, value) in CALLBACK_PARAMETERS.into_iter().zip(&fields) {
            if let Some(value) = value {
                form.append_pair(name, value);
            }
        }
        let q = Query::<CallbackQuery>::from_query(&form.finish()).unwrap().into_inner();
        prop_assert_eq!([q.code, q.state, q.iss, q.error], fields);
    }
}
