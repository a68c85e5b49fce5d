//! A distributed read that failed because a worker stopped answering: the
//! transport's status is found under DataFusion's and Arrow's wrappers (or
//! as the text another worker relayed), and the query's reason says so.

/// Why a statement failed, when it failed because a worker of its
/// distributed plan stopped answering: the transport's error (a gRPC
/// status) somewhere in its chain, seen here or relayed by another worker.
pub fn worker_failure(error: &datafusion::common::DataFusionError) -> Option<String> {
    let status = transport_status(error)?;
    Some(format!(
        "A server running part of this query stopped answering ({status}); \
         the query was not run again. Run it again."
    ))
}

/// The gRPC status under `error`, through DataFusion's and Arrow's
/// wrappers and any error's `source`, as text.
fn transport_status(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    use datafusion::{arrow::error::ArrowError, common::DataFusionError};
    if let Some(status) = error.downcast_ref::<tonic::Status>() {
        return Some(format!(
            "{}: {}",
            status.code().description(),
            status.message()
        ));
    }
    let inner: Option<&(dyn std::error::Error + 'static)> =
        match error.downcast_ref::<DataFusionError>() {
            Some(DataFusionError::External(inner)) => {
                // Another worker's: the crate relays its peer's status as
                // text (tonic's `Display`: "code: '...', message: ...").
                let text = inner.to_string();
                if inner.downcast_ref::<tonic::Status>().is_none() && text.starts_with("code: '") {
                    return Some(text);
                }
                Some(inner.as_ref())
            }
            Some(DataFusionError::Shared(inner)) => Some(inner.as_ref()),
            Some(DataFusionError::Context(_, inner)) => Some(inner.as_ref()),
            Some(DataFusionError::ArrowError(inner, _)) => Some(inner.as_ref()),
            Some(DataFusionError::Diagnostic(_, inner)) => Some(inner.as_ref()),
            _ => match error.downcast_ref::<ArrowError>() {
                Some(ArrowError::ExternalError(inner)) => Some(inner.as_ref()),
                _ => None,
            },
        };
    inner.or_else(|| error.source()).and_then(transport_status)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::{arrow::error::ArrowError, common::DataFusionError};

    use super::worker_failure;

    #[test]
    fn a_transport_status_is_found_under_any_wrapper() {
        let status = || Box::new(tonic::Status::unknown("h2 protocol error: broken pipe"));
        let wrapped = [
            DataFusionError::External(status()),
            DataFusionError::Shared(Arc::new(DataFusionError::External(status()))),
            DataFusionError::Context(
                "stage 2".into(),
                Box::new(DataFusionError::ArrowError(
                    Box::new(ArrowError::ExternalError(status())),
                    None,
                )),
            ),
        ];
        for error in &wrapped {
            let reason = worker_failure(error).unwrap_or_else(|| panic!("{error:?}"));
            assert!(
                reason.starts_with("A server running part of this query stopped answering")
                    && reason.contains("h2 protocol error: broken pipe"),
                "{reason}"
            );
        }
        #[derive(Debug)]
        struct Relayed(String);
        impl std::fmt::Display for Relayed {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl std::error::Error for Relayed {}
        let relayed = DataFusionError::External(Box::new(Relayed(status().to_string())));
        let reason = worker_failure(&relayed).unwrap();
        assert!(reason.contains("code: 'Unknown error'"), "{reason}");
        let plain = DataFusionError::ResourcesExhausted("repeat would return 1 bytes".into());
        assert_eq!(worker_failure(&plain), None);
        assert_eq!(
            worker_failure(&DataFusionError::External(Box::new(std::io::Error::other(
                "disk"
            )))),
            None
        );
    }
}
