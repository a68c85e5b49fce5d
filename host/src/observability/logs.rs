//! Where log lines go and how they read: `server.log_format = "text"` (the
//! default: tracing's human-readable lines) or `"json"` (one JSON object per
//! line). Both write to stderr; stdout is for what commands print. In
//! `"json"` what is written outside tracing takes the same shape
//! ([`json_line`]: the startup banner on stdout, the error that stops
//! startup), and so does a panic (its hook is replaced), so that every line
//! a `serve` process writes is JSON.
//!
//! A JSON line is flat: `timestamp`, `level`, `target`, `message`, then the
//! fields of every span the event is in (outermost first: the request span's
//! `request_id`, `method`, `path`; a query's `query`), then the event's own.
//! So every line logged while a request is served carries its `request_id`
//! at the top level. What is logged is the callers'; nothing here adds a
//! header or a body, so no token can reach a line through this module.

use std::fmt;

use serde_json::{Map, Value};
use tracing::{
    Event, Subscriber,
    field::{Field, Visit},
};
use tracing_subscriber::{
    EnvFilter,
    fmt::{
        FmtContext, FormatEvent, FormatFields, FormattedFields, format::JsonFields, format::Writer,
    },
    registry::LookupSpan,
};

use crate::config::LogFormat;

/// What `init` started that needs a word at exit.
#[must_use = "call `shutdown` at exit, so batched spans are sent"]
pub struct Logging {
    #[cfg(feature = "otel")]
    traces: Option<super::traces::Traces>,
}

impl Logging {
    /// Flushes what is still batched (OpenTelemetry spans); call while the
    /// runtime runs.
    pub async fn shutdown(self) {
        #[cfg(feature = "otel")]
        if let Some(traces) = self.traces {
            traces.shutdown().await;
        }
    }
}

/// Starts logging to stderr in `format`, filtered by `RUST_LOG` (else
/// `info`); in `otel` builds also exports spans when a collector is named.
/// Call once, before anything logs, inside the runtime.
pub fn init(format: LogFormat) -> Logging {
    use tracing_subscriber::{Layer as _, layer::SubscriberExt as _, util::SubscriberInitExt as _};
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    if format == LogFormat::Json {
        log_panics_as_json();
    }
    let lines = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let registry = tracing_subscriber::registry().with(filter).with(lines);
    #[cfg(feature = "otel")]
    {
        let (layer, traces) = super::traces::layer().unzip();
        registry.with(layer).init();
        Logging { traces }
    }
    #[cfg(not(feature = "otel"))]
    {
        registry.init();
        Logging {}
    }
}

/// A line in the JSON log's shape, for what is written outside tracing:
/// `timestamp`, `level`, `target`, `message`, then `fields`.
pub fn json_line<'a>(
    level: tracing::Level,
    target: &str,
    message: &str,
    fields: impl IntoIterator<Item = (&'a str, Value)>,
) -> String {
    let mut line = line_head(&level, target);
    line.insert("message".into(), Value::String(message.into()));
    line.extend(
        fields
            .into_iter()
            .map(|(key, value)| (key.to_string(), value)),
    );
    serde_json::to_string(&Value::Object(line)).expect("a JSON object serialises")
}

/// The keys every JSON line begins with.
fn line_head(level: &tracing::Level, target: &str) -> Map<String, Value> {
    let mut line = Map::new();
    line.insert(
        "timestamp".into(),
        Value::String(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
    );
    line.insert("level".into(), Value::String(level.to_string()));
    line.insert("target".into(), Value::String(target.to_string()));
    line
}

/// Replaces the panic hook, whose text is plain, with one JSON line on
/// stderr (`panic`, `location`, `thread`), written directly so that no
/// `RUST_LOG` filter hides it.
fn log_panics_as_json() {
    std::panic::set_hook(Box::new(|info| {
        use std::io::Write as _;
        let thread = std::thread::current();
        let line = json_line(
            tracing::Level::ERROR,
            "lakehost::panic",
            "a thread panicked",
            [
                (
                    "panic",
                    Value::String(info.payload_as_str().unwrap_or("(not text)").into()),
                ),
                (
                    "location",
                    Value::String(info.location().map(ToString::to_string).unwrap_or_default()),
                ),
                (
                    "thread",
                    Value::String(thread.name().unwrap_or("unnamed").into()),
                ),
            ],
        );
        let _ = writeln!(std::io::stderr(), "{line}");
    }));
}

/// One JSON object per event, span fields flattened in (see the header).
#[derive(Debug, Clone, Copy, Default)]
pub struct FlatJson;

impl<S, N> FormatEvent<S, N> for FlatJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut line = line_head(meta.level(), meta.target());
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                // With `JsonFields`, a span's fields are stored as a JSON object.
                if let Some(fields) = extensions.get::<FormattedFields<N>>()
                    && let Ok(Value::Object(fields)) = serde_json::from_str(&fields.fields)
                {
                    line.extend(fields);
                }
            }
        }
        event.record(&mut JsonVisitor(&mut line));
        let text = serde_json::to_string(&Value::Object(line)).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

/// An event's fields as JSON values.
struct JsonVisitor<'a>(&'a mut Map<String, Value>);

impl Visit for JsonVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0
            .insert(field.name().into(), Value::String(value.into()));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), Value::Bool(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0
            .insert(field.name().into(), Value::String(value.to_string()));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), Value::String(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    #[test]
    fn a_line_carries_its_spans_fields_at_the_top_level() {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(captured.clone())
            .fmt_fields(JsonFields::new())
            .event_format(FlatJson)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let request = tracing::info_span!("request", request_id = "abc", method = "GET");
            let _request = request.enter();
            let job = tracing::info_span!("query", query = "q-1");
            let _job = job.enter();
            tracing::info!(state = "RUNNING", attempt = 2u64, "job state");
        });
        let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1, "{text}");
        let line: Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(line["request_id"], "abc");
        assert_eq!(line["method"], "GET");
        assert_eq!(line["query"], "q-1");
        assert_eq!(line["state"], "RUNNING");
        assert_eq!(line["attempt"], 2);
        assert_eq!(line["message"], "job state");
        assert_eq!(line["level"], "INFO");
    }

    #[test]
    fn a_line_written_outside_tracing_has_the_logs_shape() {
        let line = json_line(
            tracing::Level::INFO,
            "lakehost::banner",
            "lakehost listening on http://127.0.0.1:8080",
            [("url", Value::String("http://127.0.0.1:8080".into()))],
        );
        let line: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(line["level"], "INFO");
        assert_eq!(line["target"], "lakehost::banner");
        assert_eq!(
            line["message"],
            "lakehost listening on http://127.0.0.1:8080"
        );
        assert_eq!(line["url"], "http://127.0.0.1:8080");
        let stamp = line["timestamp"].as_str().unwrap();
        assert!(
            chrono::DateTime::parse_from_rfc3339(stamp).is_ok(),
            "{stamp}"
        );
    }
}
