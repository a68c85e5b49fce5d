//! OpenTelemetry traces, in builds with the `otel` feature only: the spans
//! the server opens (`request` with its request id, method and path; `query`
//! with its id) exported as OTLP over HTTP (protobuf) to the collector the
//! standard variables name (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else
//! `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`); neither set, nothing is
//! exported. `OTEL_BSP_*` tune the batching, as in any OTel SDK.
//!
//! Requests go out through the project's own reqwest client on the server's
//! runtime: the SDK's batch processor exports from its own thread with a
//! blocking executor, where reqwest's async client cannot run by itself.
//! Spans carry the same fields as the log lines, so no token reaches them.

use std::time::Duration;

use bytes::Bytes;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithHttpConfig as _;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;

/// How long one export may take, and how long the flush at exit waits.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(3);

/// The variables that turn the export on.
const ENDPOINT_VARIABLES: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// The exporter's pipeline, kept to flush it at exit.
pub struct Traces {
    provider: SdkTracerProvider,
}

impl Traces {
    /// Flushes the spans still batched (call while the runtime runs).
    pub async fn shutdown(self) {
        let provider = self.provider;
        let _ = tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(EXPORT_TIMEOUT))
            .await;
    }
}

/// The tracing layer that exports spans, when an endpoint is configured.
/// Call from inside the tokio runtime.
pub fn layer<S>() -> Option<(
    tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer>,
    Traces,
)>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let configured = ENDPOINT_VARIABLES
        .iter()
        .any(|name| std::env::var_os(name).is_some_and(|v| !v.is_empty()));
    if !configured {
        return None;
    }
    let client = ReqwestOnRuntime {
        client: reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .ok()?,
        runtime: tokio::runtime::Handle::try_current().ok()?,
    };
    let exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .build()
    {
        Ok(exporter) => exporter,
        Err(e) => {
            eprintln!("lakehost: OpenTelemetry export off: {e}");
            return None;
        }
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name("lakehost")
                .build(),
        )
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("lakehost"));
    Some((layer, Traces { provider }))
}

/// Sends the exporter's requests with reqwest on the server's runtime; the
/// SDK's thread only awaits the spawned task.
#[derive(Debug, Clone)]
struct ReqwestOnRuntime {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for ReqwestOnRuntime {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let client = self.client.clone();
        self.runtime
            .spawn(async move {
                let request = reqwest::Request::try_from(request.map(reqwest::Body::from))?;
                let response = client.execute(request).await?;
                let mut out = http::Response::builder().status(response.status());
                for (name, value) in response.headers() {
                    out = out.header(name, value);
                }
                Ok::<_, opentelemetry_http::HttpError>(out.body(response.bytes().await?)?)
            })
            .await?
    }
}
