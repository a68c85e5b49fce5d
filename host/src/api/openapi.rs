//! The OpenAPI 3.1 document, assembled from the same `OpenApiRouter`s that route
//! requests, so every endpoint that exists is in it. Served without auth at
//! `GET /v2/openapi.json`.

use utoipa::{
    Modify, OpenApi,
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "lakehost",
        description = "Data lake query, load and daily run APIs. Org API: `<org>.api.<region_domain>/v2`; \
            Zone API: `<zone>.<org>.api.<region_domain>/v2` (same query and load paths, scopes prefixed `<zone>:`); \
            DailyRun API: `api.<org>.<region_domain>/dailyRun`. Any other host serves the default org.",
    ),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}
