//! The embedded S3-compatible upload endpoint on `storage.s3_listen` (DESIGN.md
//! "Uploads"): the one bucket `uploads.bucket`, whose objects are the staged
//! files of loads. It takes exactly what upload descriptors allow:
//!
//! - a form POST to `/<bucket>` with the descriptor's `presigned_url.fields`
//!   (`form.rs`, checked and streamed by us, so that expiry reads the
//!   injected clock and nothing is buffered whole);
//! - anything signed with the descriptor's temporary credentials (SigV4, as
//!   boto3 sends it, path-style): PutObject and multipart uploads of the
//!   descriptor's key (`staging.rs`, on s3s, which parses S3 requests, checks
//!   signatures and writes S3's XML errors).
//!
//! It also serves presigned GETs of query results (`results.rs`): the CSV
//! links of `GET /query/{id}/csv` when the lake is on local disk.
//!
//! This module knows HTTP (like `api/`) but never the catalog: both upload
//! routes ask `LoadService::check_upload` whether a grant lets an upload
//! write, and answer its refusals and every failure of ours as S3 does
//! (`refusal.rs`: a failure's cause is logged, never shown).

pub mod form;
mod post_policy;
mod refusal;
pub mod results;
pub mod staged_object;
pub mod staging;

use std::sync::Arc;

use axum::{
    Router,
    body::Body,
    extract::{DefaultBodyLimit, Request, State},
    http::{Method, header},
    response::{IntoResponse, Response},
    routing::post,
};
use object_store::ObjectStore;
use tower::ServiceExt as _;

use crate::load::LoadService;

/// Routes form POSTs to `form.rs` and everything else to s3s.
#[derive(Clone)]
struct Dispatch {
    forms: Router,
    s3: s3s::service::S3Service,
    results: results::ResultDownloads,
}

fn is_form_post(request: &Request) -> bool {
    let multipart = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("multipart/form-data"));
    let bucket_only = request.uri().path().trim_matches('/').split('/').count() == 1;
    request.method() == Method::POST && multipart && bucket_only
}

async fn dispatch(State(dispatch): State<Dispatch>, request: Request) -> Response {
    if results::is_presigned_read(&request) {
        return results::serve(&dispatch.results, request).await;
    }
    if is_form_post(&request) {
        return match dispatch.forms.oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
    }
    let mut s3 = dispatch.s3.clone();
    match tower::Service::call(&mut s3, request).await {
        Ok(response) => response.map(Body::new),
        Err(e) => {
            let cause: s3s::StdError = e.into();
            refusal::internal("serving an S3 request", &*cause).into_response()
        }
    }
}

/// The upload endpoint's router.
pub fn router(
    loads: Arc<LoadService>,
    store: Arc<dyn ObjectStore>,
    results: results::ResultDownloads,
) -> Router {
    let forms = Router::new()
        .route("/{bucket}", post(form::post_object))
        .route("/{bucket}/", post(form::post_object))
        .layer(DefaultBodyLimit::disable())
        .with_state(form::FormState {
            loads: loads.clone(),
            store: store.clone(),
        });
    let mut builder = s3s::service::S3ServiceBuilder::new(staging::StagingBucket {
        loads: loads.clone(),
        store,
    });
    builder.set_auth(staging::GrantAuth {
        loads: loads.clone(),
    });
    builder.set_access(staging::GrantAccess { loads });
    Router::new().fallback(dispatch).with_state(Dispatch {
        forms,
        s3: builder.build(),
        results,
    })
}
