//! `GET /livez` and `GET /readyz`: beyond the spec, for load balancers and
//! orchestrators. Served without auth on every host (the bare host, org,
//! zone and DailyRun hosts alike) and listed in each host's document.
//! `/readyz` answers 503 naming the first part that is not ready
//! (`readiness.rs` says what is checked).

use axum::{Json, extract::State, http::StatusCode};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(livez))
        .routes(routes!(readyz))
}

/// 200 of GET /livez.
#[derive(Serialize, ToSchema)]
pub struct Liveness {
    /// Always `live`.
    #[schema(example = "live")]
    pub status: &'static str,
}

/// 200 and 503 of GET /readyz.
#[derive(Serialize, ToSchema)]
pub struct ReadinessBody {
    /// `ready` or `not ready`.
    #[schema(example = "ready")]
    pub status: &'static str,
    /// On 503: the first part that is not ready and why, `<part>: <reason>`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "store: no answer within 1000 ms")]
    pub message: Option<String>,
    /// Each part (`store`, `migrations`, `lake`, `drain`): `ok` or why not.
    pub checks: ReadinessChecks,
}

/// Each part's answer, `ok` or why it is not ready.
#[derive(Serialize, ToSchema)]
pub struct ReadinessChecks {
    pub store: String,
    pub migrations: String,
    pub lake: String,
    pub drain: String,
}

/// The process answers (nothing else is checked).
#[utoipa::path(
    get,
    path = "/livez",
    tag = "health",
    responses((status = 200, description = "The process answers", body = Liveness))
)]
async fn livez() -> Json<Liveness> {
    Json(Liveness { status: "live" })
}

/// Whether this replica should get traffic: the store answers and has every
/// migration, the lake answers, and the replica is not draining.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    responses(
        (status = 200, description = "Ready for traffic", body = ReadinessBody),
        (status = 503, description = "Not ready: `message` names the first part that is not", body = ReadinessBody),
    )
)]
async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<ReadinessBody>) {
    let report = state.readiness.check().await;
    let answer = |part: &str| -> String {
        match report.parts.iter().find(|(p, _)| *p == part) {
            Some((_, Ok(()))) => "ok".into(),
            Some((_, Err(why))) => why.to_string(),
            None => "not checked".into(),
        }
    };
    let checks = ReadinessChecks {
        store: answer("store"),
        migrations: answer("migrations"),
        lake: answer("lake"),
        drain: answer("drain"),
    };
    match report.first_failure() {
        None => (
            StatusCode::OK,
            Json(ReadinessBody {
                status: "ready",
                message: None,
                checks,
            }),
        ),
        Some((part, why)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(ReadinessBody {
                status: "not ready",
                message: Some(format!("{part}: {why}")),
                checks,
            }),
        ),
    }
}
