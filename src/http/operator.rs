//! Operator API under `/operator/v1`, for the platform's operator: tenants made, changed
//! and switched off while the service runs, and their keys. Every call takes an
//! operator-scope key (`mcp-connect apikey create --scope operator`), which belongs to no
//! tenant and reaches no tenant's connections, tokens or links. A change takes effect on
//! every instance within the cache bound (the tenant's row announces it), without a
//! restart. Tenants a configuration file keeps may only be switched off and on here.

use crate::app::AppState;
use crate::config::RawTenant;
use crate::domain::{KeyScope, TenantId};
use crate::flows::tenants::{Known, TenantChange, TenantRefusal};
use crate::http::api::OperatorCaller;
use crate::http::error::{ApiError, BODY_LIMIT, ErrorBody, ErrorCode, json_error, path_error, query_error, resource};
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
    /// Switched off: its keys and links work nowhere.
    active: bool,
    /// `file`: a configuration file keeps it (only `active` may change here); `api`: this API.
    #[schema(example = "api")]
    managed_by: String,
}

impl From<TenantRow> for Tenant {
    fn from(r: TenantRow) -> Self {
        Tenant {
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
    Known { providers: &state.providers, idps: &state.idps }
}

impl From<TenantRefusal> for ApiError {
    fn from(r: TenantRefusal) -> Self {
        let text = r.to_string();
        match r {
            TenantRefusal::NotFound(_) => ApiError::new(ErrorCode::TenantNotFound, text),
            TenantRefusal::Exists(_) => ApiError::new(ErrorCode::TenantExists, text),
            TenantRefusal::KeptByFile(_) => ApiError::new(ErrorCode::TenantKeptByFile, text),
            TenantRefusal::UnknownProvider { .. } => ApiError::new(ErrorCode::UnknownProvider, text),
            TenantRefusal::UnknownIdp(_) => ApiError::new(ErrorCode::UnknownIdp, text),
            TenantRefusal::Invalid { .. } => ApiError::new(ErrorCode::InvalidRequest, text),
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
        (status = 409, description = "`tenant_exists`.", body = ErrorBody),
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
    let row = store::tenants::tenant(&state.pool, id.as_str(), false)
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
        active: b.active,
    };
    let row = crate::flows::tenants::change_tenant(&state.pool, &known(&state), &id, change, &caller.0).await?;
    Ok(HttpResponse::Ok().json(Tenant::from(row)))
}

/// Makes a key of an active tenant. The answer holds the key, once.
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
    if !store::tenants::tenant_exists(&state.pool, id.as_str()).await.map_err(ApiError::from_db)? {
        return Err(ApiError::new(ErrorCode::TenantNotFound, format!("no active tenant {id}")));
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
