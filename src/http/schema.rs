//! The schemas the handlers' request types share (`#[schema(schema_with = ...)]`,
//! `#[param(schema_with = ...)]`) and the path parameters: the rules of the parsers in
//! `domain`, so that what the contract allows is what they accept. A leaf of `http`: the
//! handlers use it, and `openapi`, which gathers the handlers, does too.

use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Type};

/// `{id}` in the elicitation paths.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ElicitationPath {
    /// The elicitation id from `connect_required` (a lower-case hyphenated UUID).
    // Not `schema_with`: utoipa then leaves a path parameter optional.
    #[param(format = Uuid, min_length = 36, max_length = 36, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub id: String,
}

/// `{id}` in the connection paths.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ConnectionPath {
    /// A connection id (a lower-case hyphenated UUID).
    #[param(format = Uuid, min_length = 36, max_length = 36, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub id: String,
}

/// `{id}` in the webhook paths.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct WebhookPath {
    /// A webhook endpoint's id (a lower-case hyphenated UUID).
    #[param(format = Uuid, min_length = 36, max_length = 36, pattern = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")]
    pub id: String,
}

/// `{provider}` in the kill-switch paths.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ProviderPath {
    /// A configured provider's name: 1-64 characters of a-z, 0-9, `-` and `_`.
    #[param(min_length = 1, max_length = 64, pattern = "^[a-z0-9][a-z0-9_-]{0,63}$", example = "github")]
    pub provider: String,
}

// Field and parameter schemas shared by several types (`#[schema(schema_with = ...)]`): the
// rules of the parsers in `domain`, so that what the contract allows is what they accept.

fn string(min: usize, max: usize, pattern: &str, description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(min))
        .max_length(Some(max))
        .pattern(Some(pattern))
        .description(Some(description))
}

fn nullable(o: ObjectBuilder) -> ObjectBuilder {
    o.schema_type(utoipa::openapi::schema::SchemaType::from_iter([Type::String, Type::Null]))
}

/// No control characters (Unicode Cc, which `char::is_control` refuses).
const PRINTABLE: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]+$";
const SLUG: &str = "^[a-z0-9][a-z0-9_-]{0,63}$";
const UUID: &str = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";

pub fn subject() -> ObjectBuilder {
    string(1, 255, PRINTABLE, "The MCP user: their `sub` at the primary IdP. 1-255 characters, no control characters.")
        .examples([serde_json::json!("alice")])
}

pub fn provider() -> ObjectBuilder {
    string(1, 64, SLUG, "A configured provider's name: 1-64 characters of a-z, 0-9, `-` and `_`.")
        .examples([serde_json::json!("github")])
}

pub fn elicitation_id() -> ObjectBuilder {
    string(36, 36, UUID, "An elicitation id as this service gave it out (a lower-case hyphenated UUID).")
        .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::Uuid)))
}

pub fn opt_subject() -> ObjectBuilder {
    nullable(subject())
}

/// The longest `subject_token` taken (an access token of a few claims is under 2,000).
pub const SUBJECT_TOKEN_MAX: usize = 8192;

pub fn opt_subject_token() -> ObjectBuilder {
    nullable(string(
        1,
        SUBJECT_TOKEN_MAX,
        "^[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+\\.[A-Za-z0-9_-]+$",
        "The user's MCP access token (an RFC 9068 JWT of the primary IdP for the tenant's \
         `subject_token_audience`): the subject is its `sub`. Never logged or stored.",
    ))
}

pub fn opt_provider() -> ObjectBuilder {
    nullable(provider())
}

pub fn opt_elicitation_id() -> ObjectBuilder {
    nullable(elicitation_id())
}

/// RFC 6749 §3.3 scope-tokens, at most 50.
pub fn opt_scopes() -> ArrayBuilder {
    ArrayBuilder::new()
        .schema_type(utoipa::openapi::schema::SchemaType::from_iter([Type::Array, Type::Null]))
        .items(string(1, 256, "^[\\u0021\\u0023-\\u005b\\u005d-\\u007e]+$", "A scope-token (RFC 6749 §3.3)."))
        .max_items(Some(50))
        .description(Some("Scopes wanted; the provider's configured scopes when left out."))
        .examples([serde_json::json!(["read:user"])])
}

/// `mcp_session_id`: 1-256 characters, no control characters.
/// `wait_seconds`: 0 to 30.
pub fn opt_wait_seconds() -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(utoipa::openapi::schema::SchemaType::from_iter([Type::Integer, Type::Null]))
        .minimum(Some(0))
        .maximum(Some(30))
        .description(Some("Seconds to hold the answer while the named elicitation is pending (0 to 30)."))
}

pub fn opt_server_name() -> ObjectBuilder {
    nullable(string(
        1,
        64,
        PRINTABLE,
        "The MCP server's name as its users know it (its `serverInfo` title or name), said in the elicitation's \
         message instead of the tenant's display name. 1-64 characters, without control or invisible formatting ones.",
    ))
    .examples([serde_json::json!("Whoami Tools")])
}

pub fn opt_session_id() -> ObjectBuilder {
    nullable(string(1, 256, PRINTABLE, "The MCP session the call belongs to, kept with the elicitation for the audit."))
}
