//! `GET /migration` and `POST /migration` of the Org and Zone APIs: not in the
//! spec. The Comotion SDK (1.2.2) asks `GET /v2/migration` before every upload
//! helper to choose between this v2 load API and a retired v1 endpoint, and
//! sends users to the dead v1 path unless the lake reports a completed
//! migration. A lakehost lake has only ever been v2, so the answer is always
//! "Completed", and starting a migration is refused with 409: there is
//! nothing to migrate.

use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::{
    AppState,
    error::ApiError,
    principal::{AnyScope, Caller},
    schemas,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_migration, start_migration))
}

/// The lake's migration state, in the field names the Comotion SDK reads.
#[derive(Debug, Serialize, ToSchema)]
pub struct MigrationStatus {
    /// Always `Completed`: a lakehost lake is a v2 lake from its start.
    full_migration_status: &'static str,
    full_migration_message: &'static str,
    flash_schema_status: &'static str,
    flash_schema_message: &'static str,
}

const NOTHING_TO_MIGRATE: &str =
    "This lake has always been a v2 lake; there is nothing to migrate.";

/// Whether the lake is migrated to the v2 load API (it always is).
#[utoipa::path(
    get,
    path = "/v2/migration",
    tag = "migration",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The migration state: always Completed", body = MigrationStatus),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
    )
)]
async fn get_migration(_caller: Caller<AnyScope>) -> Json<MigrationStatus> {
    Json(MigrationStatus {
        full_migration_status: "Completed",
        full_migration_message: NOTHING_TO_MIGRATE,
        flash_schema_status: "Completed",
        flash_schema_message: NOTHING_TO_MIGRATE,
    })
}

/// Starting a migration: refused, there is nothing to migrate.
#[utoipa::path(
    post,
    path = "/v2/migration",
    tag = "migration",
    security(("bearer" = [])),
    responses(
        (status = 409, description = "{message}: there is nothing to migrate", body = schemas::ErrorBody),
        (status = 401, description = "Missing or invalid token", body = schemas::ErrorBody),
    )
)]
async fn start_migration(_caller: Caller<AnyScope>) -> ApiError {
    ApiError::Conflict(NOTHING_TO_MIGRATE.into())
}
