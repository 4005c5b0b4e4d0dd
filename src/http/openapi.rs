//! The OpenAPI 3.1 contract of `/v1`, `/admin/v1` and `/operator/v1`, generated (utoipa) from the handlers'
//! own request, response and error types and their `#[utoipa::path]` attributes, served at
//! `GET /openapi.json` and committed as `openapi.json` (a test fails when they differ).
//!
//! What every operation shares is added here rather than repeated on each handler: the
//! responses of the key check (401 and 403 with `WWW-Authenticate`), of an overloaded or
//! draining instance (503 with `Retry-After`), of a fault (500), and of a JSON body that is
//! not JSON, too large or of another media type.

use crate::http::error::{ErrorBody, ErrorCode};
use actix_web::{HttpResponse, web};
use std::sync::OnceLock;
use utoipa::OpenApi;
use utoipa::openapi::path::Operation;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::openapi::{Content, HeaderBuilder, RefOr, ResponseBuilder};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "mcp-connect",
        description = "Third-party OAuth tokens for MCP servers, through MCP's URL-mode elicitation. \
                       `/v1` is for MCP servers (a server-scope key), `/admin/v1` for a tenant's \
                       operators (an admin-scope key), both acting on the key's tenant only; \
                       `/operator/v1` for the platform's operator (an operator-scope key, of no \
                       tenant): tenants and their keys. Errors are \
                       `{\"error\": <code>, \"error_description\": <text>}` with a stable code.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        crate::http::api::token::post_token,
        crate::http::api::elicitations::get_elicitation,
        crate::http::api::elicitations::cancel_elicitation,
        crate::http::api::proxy::proxy,
        crate::http::admin::connections::list_connections,
        crate::http::admin::connections::get_connection,
        crate::http::admin::connections::revoke_one,
        crate::http::admin::connections::revoke_subject,
        crate::http::admin::elicitations::cancel_elicitations,
        crate::http::admin::kill_switches::list_kill_switches,
        crate::http::admin::kill_switches::set_kill_switch,
        crate::http::admin::kill_switches::clear_kill_switch,
        crate::http::admin::audit::audit,
        crate::http::admin::webhooks::create_webhook,
        crate::http::admin::webhooks::list_webhooks,
        crate::http::admin::webhooks::get_webhook,
        crate::http::admin::webhooks::delete_webhook,
        crate::http::admin::webhooks::rotate_secret,
        crate::http::admin::webhooks::list_deliveries,
        crate::http::operator::list_tenants,
        crate::http::operator::create_tenant,
        crate::http::operator::get_tenant,
        crate::http::operator::change_tenant,
        crate::http::operator::create_tenant_key,
        crate::http::operator::end_tenant,
        crate::http::operator::list_providers,
        crate::http::operator::create_provider,
        crate::http::operator::get_provider,
        crate::http::operator::change_provider,
    ),
    components(schemas(ErrorBody, ErrorCode, crate::webhooks::Payload, crate::webhooks::EventData)),
    modifiers(&Shared),
    tags(
        (name = "v1", description = "For MCP servers: tokens and elicitations."),
        (name = "admin", description = "For a tenant's operators: connections, revocation, kill switches, the audit trail, webhooks."),
        (name = "operator", description = "For the platform's operator: tenants, their keys and providers, changed while the service runs."),
    ),
)]
struct ApiDoc;

/// The document, as the service serves it.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document as `openapi.json` holds it and `GET /openapi.json` serves it: pretty JSON
/// and a final newline.
pub fn document_json() -> String {
    let mut doc = serde_json::to_value(document()).unwrap_or_default();
    camel_case_links(&mut doc);
    add_webhooks(&mut doc);
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}

/// utoipa 5.5 serializes a Link Object's fields in snake case (`operation_id`), which no
/// OpenAPI tool reads: they are renamed to the spec's `operationId`, `operationRef` and
/// `requestBody` here.
fn camel_case_links(v: &mut serde_json::Value) {
    let Some(paths) = v.get_mut("paths").and_then(|p| p.as_object_mut()) else { return };
    let responses = paths
        .values_mut()
        .filter_map(|item| item.as_object_mut())
        .flat_map(|item| item.values_mut())
        .filter_map(|op| op.get_mut("responses").and_then(|r| r.as_object_mut()))
        .flat_map(|r| r.values_mut());
    for response in responses {
        let Some(links) = response.get_mut("links").and_then(|l| l.as_object_mut()) else { continue };
        for link in links.values_mut().filter_map(|l| l.as_object_mut()) {
            for (from, to) in
                [("operation_id", "operationId"), ("operation_ref", "operationRef"), ("request_body", "requestBody")]
            {
                if let Some(x) = link.remove(from) {
                    link.insert(to.to_owned(), x);
                }
            }
        }
    }
}

/// OpenAPI 3.1's `webhooks`: what we send to a registered endpoint (utoipa 5.5 has no
/// attribute for it, so it is added to the JSON).
fn add_webhooks(v: &mut serde_json::Value) {
    let Some(doc) = v.as_object_mut() else { return };
    doc.insert(
        "webhooks".to_owned(),
        serde_json::json!({
            "event": {
                "post": {
                    "operationId": "webhookEvent",
                    "summary": "An event, POSTed to each endpoint registered for its kind",
                    "description": "Signed per Standard Webhooks (HMAC-SHA256 over `<webhook-id>.<webhook-timestamp>.<body>`, \
                                    one `v1,<base64>` per secret in force). Answer 2xx within the timeout; anything else \
                                    is retried with exponential backoff for 24 hours, under the same `webhook-id`, signed \
                                    afresh. Events of one connection arrive in order.",
                    "parameters": [
                        { "name": "webhook-id", "in": "header", "required": true, "description": "The event's id (also the body's `id`): the same on every retry; drop duplicates by it.", "schema": { "type": "string" } },
                        { "name": "webhook-timestamp", "in": "header", "required": true, "description": "This attempt's time (Unix seconds); refuse one older than 5 minutes.", "schema": { "type": "string" } },
                        { "name": "webhook-signature", "in": "header", "required": true, "description": "`v1,<base64 signature>`, space-separated, one per secret in force.", "schema": { "type": "string" } }
                    ],
                    "requestBody": {
                        "required": true,
                        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Payload" } } }
                    },
                    "responses": { "2XX": { "description": "Received." } }
                }
            }
        }),
    );
}

/// `GET /openapi.json`, no key needed: the contract is public.
pub async fn serve() -> HttpResponse {
    static JSON: OnceLock<String> = OnceLock::new();
    HttpResponse::Ok().content_type("application/json").body(JSON.get_or_init(document_json).as_str())
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/openapi.json", web::get().to(serve));
}

pub const SERVER_KEY: &str = "server_key";
pub const ADMIN_KEY: &str = "admin_key";
pub const OPERATOR_KEY: &str = "operator_key";

struct Shared;

impl utoipa::Modify for Shared {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        for (name, what) in [
            (SERVER_KEY, "a server-scope API key"),
            (ADMIN_KEY, "an admin-scope API key"),
            (OPERATOR_KEY, "an operator-scope API key"),
        ] {
            let mut http = Http::new(HttpAuthScheme::Bearer);
            http.description = Some(format!("`Authorization: Bearer <{what}>` (`mcp-connect apikey create`)."));
            components.add_security_scheme(name, SecurityScheme::Http(http));
        }
        for item in doc.paths.paths.values_mut() {
            for op in [&mut item.get, &mut item.post, &mut item.put, &mut item.patch, &mut item.delete, &mut item.head]
                .into_iter()
                .flatten()
            {
                add_shared_responses(op);
            }
        }
    }
}

fn error_response(description: &str, header: Option<(&str, Type, &str)>) -> RefOr<utoipa::openapi::Response> {
    let mut r = ResponseBuilder::new().description(description).content(
        "application/json",
        Content::new(Some(RefOr::<Schema>::Ref(utoipa::openapi::Ref::from_schema_name("ErrorBody")))),
    );
    if let Some((name, ty, what)) = header {
        r = r.header(
            name,
            HeaderBuilder::new().schema(ObjectBuilder::new().schema_type(ty)).description(Some(what)).build(),
        );
    }
    RefOr::T(r.build())
}

fn add_shared_responses(op: &mut Operation) {
    let r = &mut op.responses.responses;
    let mut add = |status: &str, response: RefOr<utoipa::openapi::Response>| {
        r.entry(status.to_owned()).or_insert(response);
    };
    let challenge = (
        "WWW-Authenticate",
        Type::String,
        "RFC 6750: `Bearer realm=\"mcp-connect\"`, with `error=\"invalid_token\"` when a key was sent \
         (or `error=\"insufficient_scope\"` and the `scope` needed).",
    );
    let retry = ("Retry-After", Type::Integer, "Seconds to wait before retrying.");
    add(
        "401",
        error_response(
            "`invalid_api_key`: no key, a malformed one, or an unknown, wrong or revoked one.",
            Some(challenge.clone()),
        ),
    );
    add(
        "403",
        error_response(
            "`insufficient_scope`: a valid key of another scope (server, admin or operator).",
            Some(challenge),
        ),
    );
    if op.request_body.is_some() {
        add("413", error_response("`payload_too_large`: the body is larger than 16 KiB.", None));
        add("415", error_response("`unsupported_media_type`: send a body as `application/json`.", None));
    }
    add(
        "429",
        error_response(
            "`too_many_attempts`: several wrong secrets were sent for this key id just now; one verification \
             a second is let through for it. Retry after `Retry-After` seconds.",
            Some(retry.clone()),
        ),
    );
    add(
        "503",
        error_response(
            "`temporarily_unavailable`: the database is unreachable or busy, this instance is shutting down, \
             too many keys are being verified at once, or the request collided with a concurrent change. \
             Retry after `Retry-After` seconds.",
            Some(retry),
        ),
    );
    add(
        "500",
        error_response(
            "`internal_error`: a fault on our side, never expected; the details are in the service log only.",
            None,
        ),
    );
}
