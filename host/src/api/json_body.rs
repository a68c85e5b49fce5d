//! `JsonBody`: a request body as JSON, rejected in the spec's shape once for
//! every handler: a body that is not JSON answers 400 "JSON not well
//! formed."; an empty (or all-whitespace) body is `None`, for the endpoints
//! whose body is optional.

use axum::{
    body::Bytes,
    extract::{FromRequest, Request},
    response::{IntoResponse as _, Response},
};
use serde_json::{Map, Value};

use super::error::ApiError;

/// The spec's 400 for a body that is not the JSON an endpoint takes.
pub const NOT_JSON: &str = "JSON not well formed.";

pub fn not_json() -> ApiError {
    ApiError::BadRequest(NOT_JSON.into())
}

/// The body, parsed; `None` when it is empty.
#[derive(Debug)]
pub struct JsonBody(pub Option<Value>);

impl JsonBody {
    /// A body already read: `None` when it is empty, else JSON or the 400.
    pub fn parse(bytes: &[u8]) -> Result<Self, ApiError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Self(None));
        }
        serde_json::from_slice(bytes)
            .map(|value| Self(Some(value)))
            .map_err(|_| not_json())
    }

    /// The body as a JSON object, which it must be.
    pub fn object(self) -> Result<Map<String, Value>, ApiError> {
        match self.0 {
            Some(Value::Object(object)) => Ok(object),
            _ => Err(not_json()),
        }
    }
}

impl<S: Send + Sync> FromRequest<S> for JsonBody {
    type Rejection = Response;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| rejection.into_response())?;
        Self::parse(&bytes).map_err(|e| e.into_response())
    }
}
