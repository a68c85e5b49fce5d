//! What `GET /query/{id}/result` answers besides a page: its `Accept`
//! negotiation (a page in either shape, or the whole result as CSV, Arrow IPC
//! stream or Parquet), and the whole result streamed from its stored file
//! with `Content-Length`, one `Range` (206) and HEAD. The links to the same
//! files are `GET /query/{id}/csv`'s (`?format=`).

use axum::{
    body::Body,
    http::{HeaderMap, HeaderValue, Method, header},
    response::Response,
};

use super::{
    accept::{self, Offer},
    error::ApiError,
    result_page::{NATIVE_PARAMS, PageShape},
};
use crate::{
    edge::object_response::{StoredFile, requested_range, stored_file_response, wants_body},
    lake::ResultFormat,
    query::service::ResultFile,
};

/// An answer of `GET /query/{id}/result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultAnswer {
    Page(PageShape),
    Whole(ResultFormat),
}

/// The page (spec shape first: the default, reached by wildcards), then the
/// whole result in each format, reached only by naming its media type.
const RESULT_OFFERS: &[Offer<ResultAnswer>] = &[
    Offer {
        media_type: "application/json",
        params: &[],
        by_wildcard: true,
        value: ResultAnswer::Page(PageShape::Spec),
    },
    Offer {
        media_type: "application/json",
        params: NATIVE_PARAMS,
        by_wildcard: false,
        value: ResultAnswer::Page(PageShape::Native),
    },
    Offer {
        media_type: "text/csv",
        params: &[],
        by_wildcard: false,
        value: ResultAnswer::Whole(ResultFormat::Csv),
    },
    Offer {
        media_type: "application/vnd.apache.arrow.stream",
        params: &[],
        by_wildcard: false,
        value: ResultAnswer::Whole(ResultFormat::Arrow),
    },
    Offer {
        media_type: "application/vnd.apache.parquet",
        params: &[],
        by_wildcard: false,
        value: ResultAnswer::Whole(ResultFormat::Parquet),
    },
];

/// What the request's `Accept` header asks `GET /query/{id}/result` for.
pub fn negotiate(headers: &HeaderMap) -> Result<ResultAnswer, ApiError> {
    accept::choose(headers, RESULT_OFFERS).ok_or_else(|| {
        ApiError::NotAcceptable(
            "Not Acceptable: GET /query/{query_id}/result answers application/json (the \
             first page, values as strings; the default), application/json; types=native \
             (the page, values typed by column), or the whole result as text/csv, \
             application/vnd.apache.arrow.stream or application/vnd.apache.parquet; the \
             Accept header names none of them."
                .into(),
        )
    })
}

/// The format `?format=` names on `GET /query/{id}/csv`.
pub fn link_format(value: &str) -> Result<ResultFormat, ApiError> {
    match value {
        "csv" => Ok(ResultFormat::Csv),
        "arrow" => Ok(ResultFormat::Arrow),
        "parquet" => Ok(ResultFormat::Parquet),
        _ => Err(ApiError::BadRequest(
            "InvalidParameterError: \"format\" must be csv, arrow or parquet.".into(),
        )),
    }
}

/// The whole result in `file`, or the range the request asks for.
pub async fn whole_result(
    file: &ResultFile,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    let range =
        requested_range(headers, file.size).map_err(|e| ApiError::RangeNotSatisfiable(e.size))?;
    let length = range.map_or(file.size, |(start, end)| end - start + 1);
    let body = if wants_body(method) && length > 0 {
        let bytes = file
            .bytes(range.map(|(start, end)| start..end + 1))
            .await
            .map_err(ApiError::unexpected)?;
        Body::from_stream(bytes)
    } else {
        Body::empty()
    };
    let stored = StoredFile {
        size: file.size,
        content_type: file.format.media_type(),
        name: file.name(),
        last_modified: None,
    };
    let mut response = stored_file_response(&stored, range, body);
    response
        .headers_mut()
        .insert(header::VARY, HeaderValue::from_static("accept"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::*;

    fn answer(accept: &str) -> Result<ResultAnswer, ApiError> {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
        negotiate(&headers)
    }

    #[test]
    fn each_media_type_reaches_its_answer() {
        assert_eq!(
            negotiate(&HeaderMap::new()).unwrap(),
            ResultAnswer::Page(PageShape::Spec)
        );
        assert_eq!(answer("*/*").unwrap(), ResultAnswer::Page(PageShape::Spec));
        assert_eq!(
            answer("application/json; types=native").unwrap(),
            ResultAnswer::Page(PageShape::Native)
        );
        for format in ResultFormat::ALL {
            let media_type = format.media_type().split(';').next().unwrap();
            assert_eq!(answer(media_type).unwrap(), ResultAnswer::Whole(format));
        }
        let refused = answer("application/vnd.apache.arrow.file").unwrap_err();
        assert_eq!(refused.status(), StatusCode::NOT_ACCEPTABLE);
    }

    #[test]
    fn link_formats_are_named_in_lower_case() {
        assert_eq!(link_format("parquet").unwrap(), ResultFormat::Parquet);
        assert_eq!(link_format("arrow").unwrap(), ResultFormat::Arrow);
        for bad in ["Parquet", "xlsx", ""] {
            assert_eq!(
                link_format(bad).unwrap_err().status(),
                StatusCode::BAD_REQUEST
            );
        }
    }
}
