//! Operator API under `/operator/v1`, for the platform's operator: tenants and providers
//! made, changed and switched off while the service runs, and the tenants' keys. Every call takes an
//! operator-scope key (`mcp-connect apikey create --scope operator`), which belongs to no
//! tenant and reaches no tenant's connections, tokens or links. A change takes effect on
//! every instance within the cache bound (the tenant's row announces it), without a
//! restart. Tenants a configuration file keeps may only be switched off and on here.

use crate::app::AppState;
use crate::config::RawTenant;
use crate::domain::HandOutMode;
use crate::domain::workload::WorkloadIssuer;
use crate::domain::{KeyScope, ProviderId, TenantId};
use crate::flows::providers::{ProviderChange, ProviderRefusal, Settings};
use crate::flows::tenants::{Known, TenantChange, TenantRefusal};
use crate::http::api::OperatorCaller;
use crate::http::error::{ApiError, BODY_LIMIT, ErrorBody, ErrorCode, json_error, path_error, query_error, resource};
use crate::providers::ProviderKind;
use crate::store::{self, tenants::TenantRow};
use actix_web::{HttpResponse, web};
use secrecy::ExposeSecret;

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::scope("/operator/v1")
            .app_data(
                web::JsonConfig::default().limit(BODY_LIMIT).content_type_required(true).error_handler(json_error),
            )
            .app_data(web::PathConfig::default().error_handler(path_error))
            .app_data(web::QueryConfig::default().error_handler(query_error))
            .service(
                resource("/tenants", "GET, POST")
                    .route(web::get().to(list_tenants))
                    .route(web::post().to(create_tenant)),
            )
            .service(
                resource("/tenants/{tenant}", "GET, PATCH")
                    .route(web::get().to(get_tenant))
                    .route(web::patch().to(change_tenant)),
            )
            .service(resource("/tenants/{tenant}/keys", "POST").route(web::post().to(create_tenant_key)))
            .service(resource("/tenants/{tenant}/end", "POST").route(web::post().to(end_tenant)))
            .service(
                resource("/providers", "GET, POST")
                    .route(web::get().to(list_providers))
                    .route(web::post().to(create_provider)),
            )
            .service(
                resource("/providers/{provider}", "GET, PATCH")
                    .route(web::get().to(get_provider))
                    .route(web::patch().to(change_provider)),
            )
            .default_service(web::to(crate::http::api::not_found)),
    );
}

/// A tenant as the operator API shows it.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Tenant {
    #[schema(example = "acme")]
    id: String,
    #[schema(example = "Acme Corp")]
    display_name: String,
    /// The providers its MCP servers may ask for.
    #[schema(example = json!(["github"]))]
    providers: Vec<String>,
    /// Its primary IdP: `default` (`[idp]`) or the name of one of `[idps.<name>]`.
    #[schema(example = "default")]
    idp: String,
    /// The resource URL its users' MCP access tokens must name (`subject_token`), if any.
    subject_token_audience: Option<String>,
    /// Whether a request naming only a `subject` is refused.
    require_subject_token: bool,
    /// What `/v1/token` hands out: `credentials`, or `none` (the grant is used only through
    /// `/v1/proxy`).
    hand_out: HandOutMode,
    /// Providers handed out otherwise than `hand_out` says.
    #[schema(example = json!({"github": "credentials"}))]
    hand_out_providers: std::collections::BTreeMap<String, HandOutMode>,
    /// The issuers whose workload tokens its MCP servers may present instead of an API key,
    /// and the rules that give a token a scope (docs/workload-identity.md).
    workload_issuers: Vec<WorkloadIssuer>,
    /// Switched off: its keys and links work nowhere.
    active: bool,
    /// `file`: a configuration file keeps it (only `active` may change here); `api`: this API.
    #[schema(example = "api")]
    managed_by: String,
}

impl From<TenantRow> for Tenant {
    fn from(r: TenantRow) -> Self {
        let hand_out = crate::domain::HandOutPolicy::from_stored(r.hand_out.as_ref());
        Tenant {
            hand_out: hand_out.default,
            hand_out_providers: hand_out.providers,
            workload_issuers: crate::domain::workload::issuers_from_stored(r.workload_issuers.as_ref()),
            id: r.id,
            display_name: r.display_name,
            providers: r.allowed_providers,
            idp: r.idp,
            subject_token_audience: r.subject_token_audience,
            require_subject_token: r.require_subject_token,
            active: r.active,
            managed_by: r.managed_by,
        }
    }
}

/// Every tenant, active or not.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct Tenants {
    tenants: Vec<Tenant>,
}

/// A new tenant: checked as a configuration file's `[[tenants]]` is.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"id": "globex", "display_name": "Globex", "providers": ["github"]}))]
pub struct NewTenantBody {
    /// 1-64 characters of a-z, 0-9, `-` and `_`, starting with a letter or digit.
    #[schema(min_length = 1, max_length = 64, pattern = "^[a-z0-9][a-z0-9_-]{0,63}$")]
    id: String,
    /// 1-100 printable characters.
    #[schema(min_length = 1, max_length = 100)]
    display_name: String,
    /// Configured providers' names.
    #[schema(max_items = 256)]
    providers: Vec<String>,
    /// `default` when left out.
    idp: Option<String>,
    subject_token_audience: Option<String>,
    require_subject_token: Option<bool>,
    /// `credentials` when left out; `none`: `/v1/token` hands out no credential. (Per
    /// provider overrides come with a change, once the tenant is made.)
    hand_out: Option<HandOutMode>,
    /// None when left out.
    #[schema(max_items = 16)]
    workload_issuers: Option<Vec<WorkloadIssuer>>,
}

/// What to change; what is left out stays.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"providers": ["github", "google"]}))]
pub struct TenantChangeBody {
    #[schema(min_length = 1, max_length = 100)]
    display_name: Option<String>,
    #[schema(max_items = 256)]
    providers: Option<Vec<String>>,
    idp: Option<String>,
    /// `null` removes it (and then `require_subject_token` must be false).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>)]
    subject_token_audience: Option<Option<String>>,
    require_subject_token: Option<bool>,
    hand_out: Option<HandOutMode>,
    /// Providers (each one of the tenant's) handed out otherwise than `hand_out` says;
    /// replaces the overrides whole (`{}` removes them).
    hand_out_providers: Option<std::collections::BTreeMap<String, HandOutMode>>,
    /// Replaces the trusted workload issuers whole (`[]` removes them).
    #[schema(max_items = 16)]
    workload_issuers: Option<Vec<WorkloadIssuer>>,
    /// `false` switches the tenant off on every instance (also one a file keeps).
    active: Option<bool>,
}

/// A field sent as `null` is `Some(None)`; one left out, `None` (by `default`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    serde::Deserialize::deserialize(d).map(Some)
}

/// A tenant's new key.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"scope": "server", "label": "globex assistant"}))]
pub struct NewKeyBody {
    /// `server` (for `/v1`) or `admin` (for `/admin/v1`).
    #[schema(example = "server", pattern = "^(server|admin)$")]
    scope: String,
    /// At most 200 characters, no control characters.
    #[schema(max_length = 200, pattern = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$")]
    label: Option<String>,
}

/// A key made: the only time it is shown.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct NewKey {
    /// The key's public id (the 16 hex digits after `mcpc_`).
    #[schema(example = "3f2a9c0d4b5e6f70")]
    id: String,
    tenant_id: String,
    scope: &'static str,
    /// The key itself. Shown once: store it now.
    key: String,
}

/// `{tenant}` in the operator paths.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct TenantPath {
    /// A tenant's id.
    #[param(min_length = 1, max_length = 64, pattern = "^[a-z0-9][a-z0-9_-]{0,63}$", example = "acme")]
    tenant: String,
}

fn tenant_id(s: &str) -> Result<TenantId, ApiError> {
    TenantId::parse(s).map_err(|e| ApiError::new(ErrorCode::InvalidTenantId, e.0))
}

fn known(state: &AppState) -> Known<'_> {
    Known { providers: state.directory.providers.snapshot(), idps: &state.directory.idps }
}

impl From<TenantRefusal> for ApiError {
    fn from(r: TenantRefusal) -> Self {
        let text = r.to_string();
        match r {
            TenantRefusal::NotFound(_) => ApiError::new(ErrorCode::TenantNotFound, text),
            TenantRefusal::Exists(_) => ApiError::new(ErrorCode::TenantExists, text),
            TenantRefusal::TooMany => ApiError::new(ErrorCode::TooManyTenants, text),
            TenantRefusal::KeptByFile(_) => ApiError::new(ErrorCode::TenantKeptByFile, text),
            TenantRefusal::UnknownProvider { .. } => ApiError::new(ErrorCode::UnknownProvider, text),
            TenantRefusal::UnknownIdp(_) => ApiError::new(ErrorCode::UnknownIdp, text),
            TenantRefusal::Invalid { .. } => ApiError::new(ErrorCode::InvalidRequest, text),
            TenantRefusal::Ended(_) => ApiError::new(ErrorCode::TenantEnded, text),
            TenantRefusal::NotUnderDataKeys { .. } => ApiError::new(ErrorCode::TenantNotUnderDataKeys, text),
            TenantRefusal::Unconfirmed => ApiError::new(ErrorCode::InvalidRequest, text),
            TenantRefusal::Database(e) => ApiError::from_db(e),
        }
    }
}

/// Every tenant, active or not, those of configuration files and of this API.
#[utoipa::path(
    get,
    path = "/operator/v1/tenants",
    operation_id = "listTenants",
    tag = "operator",
    responses((status = 200, description = "The tenants, by id.", body = Tenants)),
    security(("operator_key" = [])),
)]
pub async fn list_tenants(_caller: OperatorCaller, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let rows = store::tenants::all_tenants(&state.pool).await.map_err(ApiError::from_db)?;
    Ok(HttpResponse::Ok().json(Tenants { tenants: rows.into_iter().map(Tenant::from).collect() }))
}

/// Makes a tenant, active at once on every instance (within the cache bound).
#[utoipa::path(
    post,
    path = "/operator/v1/tenants",
    operation_id = "createTenant",
    tag = "operator",
    request_body = NewTenantBody,
    responses(
        (status = 201, description = "Made.", body = Tenant,
            links(
                ("GetTenant" = (operation_id = "getTenant", parameters(("tenant" = "$response.body#/id")))),
                ("ChangeTenant" = (operation_id = "changeTenant", parameters(("tenant" = "$response.body#/id")))),
                ("CreateTenantKey" = (operation_id = "createTenantKey", parameters(("tenant" = "$response.body#/id")))),
            )),
        (status = 400, description = "`invalid_json`, `invalid_request` (the field says which), `unknown_provider` or `unknown_idp`.", body = ErrorBody),
        (status = 409, description = "`tenant_exists`, or `too_many_tenants` (the API made 10000).", body = ErrorBody),
    ),
    security(("operator_key" = [])),
)]
pub async fn create_tenant(
    caller: OperatorCaller,
    state: web::Data<AppState>,
    body: web::Json<NewTenantBody>,
) -> Result<HttpResponse, ApiError> {
    let b = body.into_inner();
    let spec = RawTenant {
        id: b.id,
        display_name: b.display_name,
        providers: b.providers,
        subject_token_audience: b.subject_token_audience,
        require_subject_token: b.require_subject_token,
        idp: Some(b.idp.unwrap_or_else(|| crate::domain::DEFAULT_IDP.to_owned())),
        hand_out: Some(b.hand_out.unwrap_or_default()),
        hand_out_providers: None,
        workload_issuers: b.workload_issuers,
    };
    let row = crate::flows::tenants::create_tenant(&state.pool, &known(&state), spec, &caller.0).await?;
    Ok(HttpResponse::Created().json(Tenant::from(row)))
}

/// One tenant.
#[utoipa::path(
    get,
    path = "/operator/v1/tenants/{tenant}",
    operation_id = "getTenant",
    tag = "operator",
    params(TenantPath),
    responses(
        (status = 200, description = "The tenant.", body = Tenant),
        (status = 400, description = "`invalid_tenant_id`.", body = ErrorBody),
        (status = 404, description = "`tenant_not_found`.", body = ErrorBody),
    ),
    security(("operator_key" = [])),
)]
pub async fn get_tenant(
    _caller: OperatorCaller,
    state: web::Data<AppState>,
    path: web::Path<TenantPath>,
) -> Result<HttpResponse, ApiError> {
    let id = tenant_id(&path.tenant)?;
    let row = store::tenants::tenant(&state.pool, &id, false)
        .await
        .map_err(ApiError::from_db)?
        .ok_or_else(|| ApiError::from(TenantRefusal::NotFound(id.to_string())))?;
    Ok(HttpResponse::Ok().json(Tenant::from(row)))
}

/// Changes a tenant: `active` of any; the rest only of a tenant this API made.
#[utoipa::path(
    patch,
    path = "/operator/v1/tenants/{tenant}",
    operation_id = "changeTenant",
    tag = "operator",
    params(TenantPath),
    request_body = TenantChangeBody,
    responses(
        (status = 200, description = "The tenant afterwards.", body = Tenant),
        (status = 400, description = "`invalid_tenant_id`, `invalid_json`, `invalid_request`, `unknown_provider` or `unknown_idp`.", body = ErrorBody),
        (status = 404, description = "`tenant_not_found`.", body = ErrorBody),
        (status = 409, description = "`tenant_kept_by_file`: a configuration file keeps its settings.", body = ErrorBody),
    ),
    security(("operator_key" = [])),
)]
pub async fn change_tenant(
    caller: OperatorCaller,
    state: web::Data<AppState>,
    path: web::Path<TenantPath>,
    body: web::Json<TenantChangeBody>,
) -> Result<HttpResponse, ApiError> {
    let id = tenant_id(&path.tenant)?;
    let b = body.into_inner();
    let change = TenantChange {
        display_name: b.display_name,
        providers: b.providers,
        idp: b.idp,
        subject_token_audience: b.subject_token_audience,
        require_subject_token: b.require_subject_token,
        hand_out: b.hand_out,
        hand_out_providers: b.hand_out_providers,
        workload_issuers: b.workload_issuers,
        active: b.active,
    };
    let row = crate::flows::tenants::change_tenant(&state.pool, &known(&state), &id, change, &caller.0).await?;
    Ok(HttpResponse::Ok().json(Tenant::from(row)))
}

/// Makes a key of an active tenant this API made. The answer holds the key, once.
#[utoipa::path(
    post,
    path = "/operator/v1/tenants/{tenant}/keys",
    operation_id = "createTenantKey",
    tag = "operator",
    params(TenantPath),
    request_body = NewKeyBody,
    responses(
        (status = 201, description = "Made; it works on every instance at once.", body = NewKey),
        (status = 400, description = "`invalid_tenant_id`, `invalid_json` or `invalid_request` (scope, label).", body = ErrorBody),
        (status = 404, description = "`tenant_not_found`: no active tenant of that id.", body = ErrorBody),
        (status = 409, description = "`tenant_kept_by_file`: its keys are made with the CLI.", body = ErrorBody),
    ),
    security(("operator_key" = [])),
)]
pub async fn create_tenant_key(
    caller: OperatorCaller,
    state: web::Data<AppState>,
    path: web::Path<TenantPath>,
    body: web::Json<NewKeyBody>,
) -> Result<HttpResponse, ApiError> {
    let id = tenant_id(&path.tenant)?;
    let scope = match KeyScope::parse(&body.scope) {
        Ok(s @ (KeyScope::Server | KeyScope::Admin)) => s,
        _ => return Err(ApiError::new(ErrorCode::InvalidRequest, "scope must be server or admin")),
    };
    let label = body.label.as_deref();
    if label.is_some_and(|l| l.chars().count() > 200 || l.chars().any(char::is_control)) {
        return Err(ApiError::new(ErrorCode::InvalidRequest, "label must be at most 200 characters, none a control"));
    }
    let tenant = store::tenants::tenant(&state.pool, &id, false).await.map_err(ApiError::from_db)?;
    let Some(tenant) = tenant.filter(|t| t.active) else {
        return Err(ApiError::new(ErrorCode::TenantNotFound, format!("no active tenant {id}")));
    };
    // The keys of a file's tenant are its operators' (`mcp-connect apikey create`): an
    // operator key reaches no tenant's tokens but those of tenants it made.
    if tenant.managed_by != "api" {
        return Err(ApiError::new(
            ErrorCode::TenantKeptByFile,
            format!("tenant {id} is kept by a configuration file: make its keys with `mcp-connect apikey create`"),
        ));
    }
    let key =
        crate::flows::api_keys::create_api_key_by(&state.pool, &id, scope, label, &caller.0).await.map_err(|e| {
            match e.downcast::<sqlx::Error>() {
                Ok(db) => ApiError::from_db(db),
                Err(e) => ApiError::internal(&e),
            }
        })?;
    Ok(HttpResponse::Created().json(NewKey {
        id: key.id.to_string(),
        tenant_id: id.to_string(),
        scope: scope.as_str(),
        key: key.key.expose_secret().to_owned(),
    }))
}

/// Ending a tenant: its id again, so that no slip ends another.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"confirm": "globex"}))]
pub struct EndTenantBody {
    /// The tenant's id, again.
    #[schema(example = "globex")]
    confirm: String,
}

/// What ending a tenant did.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct TenantEnded {
    #[schema(example = "globex")]
    tenant_id: String,
    /// `false`: it had ended before; nothing more was done.
    ended_now: bool,
    /// Its data keys destroyed now: what they sealed opens nowhere.
    #[schema(example = 1)]
    data_keys_destroyed: u64,
    /// Its connections that held tokens, none of which opens any more.
    #[schema(example = 42)]
    connections: i64,
}

/// Ends a tenant (off-boarding): off for good, and its data keys destroyed, so that every
/// token, credential and webhook secret it held opens on no instance, before any row is
/// deleted (crypto-shredding, docs/keys.md). Audited as `tenant_ended`. Revoke its grants at
/// the providers first where that matters: afterwards nothing can.
#[utoipa::path(
    post,
    path = "/operator/v1/tenants/{tenant}/end",
    operation_id = "endTenant",
    tag = "operator",
    params(TenantPath),
    request_body = EndTenantBody,
    responses(
        (status = 200, description = "Ended (or ended before: `ended_now` false).", body = TenantEnded),
        (status = 400, description = "`invalid_tenant_id`, `invalid_json` or `invalid_request` (`confirm` is not the tenant's id).", body = ErrorBody),
        (status = 404, description = "`tenant_not_found`.", body = ErrorBody),
        (status = 409, description = "`tenant_not_under_data_keys`: it holds values sealed before data keys; run `mcp-connect rotate-key` first.", body = ErrorBody),
    ),
    security(("operator_key" = [])),
)]
pub async fn end_tenant(
    caller: OperatorCaller,
    state: web::Data<AppState>,
    path: web::Path<TenantPath>,
    body: web::Json<EndTenantBody>,
) -> Result<HttpResponse, ApiError> {
    let id = tenant_id(&path.tenant)?;
    let by = caller.0.operator_text();
    let ended = crate::flows::tenants::end_tenant(&state.pool, &id, &body.confirm, &by).await?;
    state.keys.forget_tenant(&id);
    Ok(HttpResponse::Ok().json(TenantEnded {
        tenant_id: id.to_string(),
        ended_now: ended.ended_now,
        data_keys_destroyed: ended.data_keys_destroyed,
        connections: ended.connections,
    }))
}

/// A provider as the operator API shows it: its settings in force, never its secret.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ProviderView {
    #[schema(example = "acme-github")]
    id: String,
    template: ProviderKind,
    display_name: String,
    client_id: String,
    authorize_url: Option<String>,
    token_url: Option<String>,
    userinfo_url: Option<String>,
    revocation_url: Option<String>,
    issuer: Option<String>,
    authorization_response_iss: bool,
    scopes: Vec<String>,
    scope_separator: String,
    allow_account_change: bool,
    allow_private_endpoints: bool,
    /// Configured; `null`: what the server's discovery lists, else `client_secret_basic`.
    token_endpoint_auth_method: Option<crate::providers::client_auth::ClientAuth>,
    /// Switched off: nothing new starts, nothing is handed out; its grants stay revocable.
    active: bool,
    /// `file` (a configuration file keeps it) or `api`.
    #[schema(example = "api")]
    managed_by: &'static str,
}

impl ProviderView {
    fn of(p: &crate::providers::Provider, in_file: bool) -> Self {
        let ends = p.endpoints().cloned().unwrap_or_default();
        let url = |u: Option<url::Url>| u.as_ref().map(ToString::to_string);
        ProviderView {
            id: p.id.to_string(),
            template: p.kind,
            display_name: p.display_name.clone(),
            client_id: p.client().map(|c| c.id.clone()).unwrap_or_default(),
            authorize_url: url(ends.authorize_url),
            token_url: url(ends.token_url),
            userinfo_url: url(ends.userinfo_url),
            revocation_url: url(ends.revocation_url),
            issuer: p.issuer().map(|i| i.as_str().to_owned()),
            authorization_response_iss: p.authorization_response_iss(),
            scopes: p.default_scopes().as_slice().to_vec(),
            scope_separator: p.scope_separator().to_owned(),
            allow_account_change: p.policy.allow_account_change,
            allow_private_endpoints: p.policy.allow_private_endpoints,
            token_endpoint_auth_method: p.client().and_then(|c| c.auth),
            active: p.is_active(),
            managed_by: if in_file { "file" } else { "api" },
        }
    }
}

/// Every provider served: the configuration file's and the operator API's.
#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ProviderViews {
    providers: Vec<ProviderView>,
}

/// Declares a provider body: the settings a file's `[providers.<id>]` has (but
/// `client_secret_file`), each optional, and the fields given.
macro_rules! provider_body {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* }) => {
        #[derive(serde::Deserialize, serde::Serialize, utoipa::ToSchema)]
        #[serde(deny_unknown_fields)]
        $(#[$meta])*
        pub struct $name {
            $($(#[$fmeta])* $field: $ty,)*
            #[serde(skip_serializing_if = "Option::is_none")]
            display_name: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            #[schema(max_length = 2048)]
            authorize_url: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            #[schema(max_length = 2048)]
            token_url: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            #[schema(max_length = 2048)]
            userinfo_url: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            #[schema(max_length = 2048)]
            revocation_url: Option<String>,
            /// Required for the `oidc` template (endpoints come from discovery).
            #[serde(skip_serializing_if = "Option::is_none")]
            #[schema(max_length = 2048)]
            issuer: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            authorization_response_iss: Option<bool>,
            /// The scopes asked for when a tool names none (the template's when left out).
            #[serde(skip_serializing_if = "Option::is_none")]
            #[schema(schema_with = crate::http::schema::opt_scopes)]
            scopes: Option<Vec<String>>,
            /// `" "` or `","`.
            #[serde(skip_serializing_if = "Option::is_none")]
            #[schema(pattern = "^[ ,]$")]
            scope_separator: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            extra_authorize_params: Option<std::collections::BTreeMap<String, String>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            account_id_field: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            account_login_field: Option<String>,
            #[serde(skip_serializing_if = "Option::is_none")]
            allow_account_change: Option<bool>,
            #[serde(skip_serializing_if = "Option::is_none")]
            #[schema(minimum = 0, maximum = 300)]
            clock_skew_seconds: Option<u64>,
            /// How the client authenticates at the token and revocation endpoints; left out:
            /// what the server's discovery lists, else `client_secret_basic`. (`none` and
            /// `private_key_jwt` send no secret: the operator API makes clients with a secret
            /// only; a provider for `private_key_jwt` is configured in the file.)
            #[serde(skip_serializing_if = "Option::is_none")]
            token_endpoint_auth_method: Option<crate::providers::client_auth::ClientAuth>,
        }
    };
}

provider_body! {
    /// A new provider: checked as a configuration file's `[providers.<id>]` is.
    #[schema(example = json!({"id": "acme-github", "template": "github", "client_id": "Iv1.8a61f9b3a7aba766",
                              "client_secret": "the client secret"}))]
    NewProviderBody {
        /// 1-64 characters of a-z, 0-9, `-` and `_`; not one a configuration file names.
        #[schema(min_length = 1, max_length = 64, pattern = "^[a-z0-9][a-z0-9_-]{0,63}$")]
        id: String,
        template: ProviderKind,
        #[schema(min_length = 1, max_length = 1000)]
        client_id: String,
        /// Write-only: sealed by the vault, never shown again.
        #[schema(min_length = 1, max_length = 4096, write_only)]
        client_secret: String,
    }
}

provider_body! {
    /// What to change; what is left out stays. A `client_secret` replaces the secret.
    #[schema(example = json!({"scopes": ["read:user", "repo"]}))]
    ProviderChangeBody {
        #[serde(skip_serializing_if = "Option::is_none")]
        template: Option<ProviderKind>,
        #[serde(skip_serializing_if = "Option::is_none")]
        #[schema(min_length = 1, max_length = 1000)]
        client_id: Option<String>,
        /// Write-only: sealed by the vault, never shown again.
        #[schema(min_length = 1, max_length = 4096, write_only)]
        client_secret: Option<String>,
        /// `false` switches it off on every instance: nothing new starts, nothing is handed out.
        active: Option<bool>,
    }
}

/// `{provider}` in the operator paths.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
pub struct ProviderIdPath {
    /// A provider's id.
    #[param(min_length = 1, max_length = 64, pattern = "^[a-z0-9][a-z0-9_-]{0,63}$", example = "acme-github")]
    provider: String,
}

impl From<ProviderRefusal> for ApiError {
    fn from(r: ProviderRefusal) -> Self {
        let text = r.to_string();
        match r {
            ProviderRefusal::NotFound(_) => ApiError::new(ErrorCode::ProviderNotFound, text),
            ProviderRefusal::Exists(_) => ApiError::new(ErrorCode::ProviderExists, text),
            ProviderRefusal::TooMany => ApiError::new(ErrorCode::TooManyProviders, text),
            ProviderRefusal::KeptByFile(_) => ApiError::new(ErrorCode::ProviderKeptByFile, text),
            ProviderRefusal::Invalid { .. } => ApiError::new(ErrorCode::InvalidRequest, text),
            ProviderRefusal::Unopenable(_) => ApiError::new(ErrorCode::ProviderSecretUnopenable, text),
            ProviderRefusal::Vault(e) => ApiError::internal(&e),
            ProviderRefusal::Keys(e) => crate::flows::fault::Fault::from(e).into(),
            ProviderRefusal::Database(e) => ApiError::from_db(e),
        }
    }
}

/// The settings given, as a JSON object of the fields given: without the id, the secret
/// and `active`, which are no settings (and the secret is never stored but sealed).
fn settings_of(body: &impl serde::Serialize) -> Result<Settings, ApiError> {
    match serde_json::to_value(body) {
        Ok(serde_json::Value::Object(mut m)) => {
            for not_a_setting in ["id", "client_secret", "active"] {
                m.remove(not_a_setting);
            }
            Ok(m)
        }
        _ => Err(ApiError::internal(&"provider settings did not serialize to an object")),
    }
}

fn provider_id(s: &str) -> Result<ProviderId, ApiError> {
    ProviderId::parse(s).map_err(|e| ApiError::new(ErrorCode::UnknownProvider, e.0))
}

/// Every provider served, the file's and the operator API's, active or not.
#[utoipa::path(
    get,
    path = "/operator/v1/providers",
    operation_id = "listProviders",
    tag = "operator",
    responses((status = 200, description = "The providers, by id.", body = ProviderViews)),
    security(("operator_key" = [])),
)]
pub async fn list_providers(_caller: OperatorCaller, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let all = state.directory.providers.snapshot();
    let providers = all.iter().map(|p| ProviderView::of(p, state.directory.providers.in_file(&p.id))).collect();
    Ok(HttpResponse::Ok().json(ProviderViews { providers }))
}

/// Makes a provider; every instance serves it within the cache bound (a tenant uses it once
/// its `providers` name it).
#[utoipa::path(
    post,
    path = "/operator/v1/providers",
    operation_id = "createProvider",
    tag = "operator",
    request_body = NewProviderBody,
    responses(
        // No links: schemathesis's stateful phase draws a body with every optional URL
        // valid too seldom to follow them (tests/api/schemathesis.rs); `id` is the path.
        (status = 201, description = "Made; `GET` and `PATCH /operator/v1/providers/{id}` take its `id`.", body = ProviderView),
        (status = 400, description = "`invalid_json` or `invalid_request` (the field says which).", body = ErrorBody),
        (status = 409, description = "`provider_exists` (also when grants or links of that id exist), `provider_kept_by_file`: a configuration file names that id, or `too_many_providers` (the API made 1000).", body = ErrorBody),
    ),
    security(("operator_key" = [])),
)]
pub async fn create_provider(
    caller: OperatorCaller,
    state: web::Data<AppState>,
    body: web::Json<NewProviderBody>,
) -> Result<HttpResponse, ApiError> {
    let b = body.into_inner();
    let settings = settings_of(&b)?;
    let secret = secrecy::SecretString::from(b.client_secret);
    let p = crate::flows::providers::create_provider(
        &state.pool,
        &state.keys,
        &state.directory.providers,
        &b.id,
        settings,
        secret,
        &caller.0,
    )
    .await?;
    Ok(HttpResponse::Created().json(ProviderView::of(&p, false)))
}

/// One provider, the file's or the operator API's.
#[utoipa::path(
    get,
    path = "/operator/v1/providers/{provider}",
    operation_id = "getProvider",
    tag = "operator",
    params(ProviderIdPath),
    responses(
        (status = 200, description = "The provider.", body = ProviderView),
        (status = 400, description = "`unknown_provider`: not a provider id.", body = ErrorBody),
        (status = 404, description = "`provider_not_found`.", body = ErrorBody),
    ),
    security(("operator_key" = [])),
)]
pub async fn get_provider(
    _caller: OperatorCaller,
    state: web::Data<AppState>,
    path: web::Path<ProviderIdPath>,
) -> Result<HttpResponse, ApiError> {
    let id = provider_id(&path.provider)?;
    let p =
        state.directory.providers.get(&id).ok_or_else(|| ApiError::from(ProviderRefusal::NotFound(id.to_string())))?;
    Ok(HttpResponse::Ok().json(ProviderView::of(&p, state.directory.providers.in_file(&id))))
}

/// Changes a provider made over the operator API (settings, secret, `active`).
#[utoipa::path(
    patch,
    path = "/operator/v1/providers/{provider}",
    operation_id = "changeProvider",
    tag = "operator",
    params(ProviderIdPath),
    request_body = ProviderChangeBody,
    responses(
        (status = 200, description = "The provider afterwards.", body = ProviderView),
        (status = 400, description = "`unknown_provider` (not a provider id), `invalid_json` or `invalid_request` (a field out of range, or one of the provider's identity: template, client and endpoints are fixed once it is made).", body = ErrorBody),
        (status = 404, description = "`provider_not_found`.", body = ErrorBody),
        (status = 409, description = "`provider_kept_by_file`, or `provider_secret_unopenable` (send a new `client_secret`).", body = ErrorBody),
    ),
    security(("operator_key" = [])),
)]
pub async fn change_provider(
    caller: OperatorCaller,
    state: web::Data<AppState>,
    path: web::Path<ProviderIdPath>,
    body: web::Json<ProviderChangeBody>,
) -> Result<HttpResponse, ApiError> {
    let id = provider_id(&path.provider)?;
    let b = body.into_inner();
    let change = ProviderChange {
        settings: settings_of(&b)?,
        client_secret: b.client_secret.map(secrecy::SecretString::from),
        active: b.active,
    };
    let p = crate::flows::providers::change_provider(
        &state.pool,
        &state.keys,
        &state.directory.providers,
        &id,
        change,
        &caller.0,
    )
    .await?;
    Ok(HttpResponse::Ok().json(ProviderView::of(&p, false)))
}
