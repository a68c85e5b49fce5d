//! `to_timestamp(text, format)` and `to_date(text, format)` with Postgres'
//! format patterns (`'YYYY-MM-DD HH24:MI:SS.US'`, as Superset's time-range
//! filters send them), beside DataFusion's chrono formats (`'%Y-%m-%d'`),
//! in every session caller SQL runs in (registered with the bounded
//! functions, which every such session has).
//!
//! A format is Postgres' when it is a constant holding no `%`: then
//! `to_timestamp` answers a `timestamptz` (microseconds, UTC: lakehost's
//! `TimeZone`) and `to_date` a date, as in Postgres. Any other call is
//! DataFusion's own. The patterns read are the date and time fields
//! (`YYYY`, `YY`, `MM`, `DD`, `DDD`, `HH24`, `HH12`, `HH`, `MI`, `SS`, `MS`,
//! `US`, `AM`/`PM`, `Month`, `Mon`, `Day`, `Dy`), `FM` (ignored: numbers
//! are read at any width) and `"quoted text"`; anything else is matched as
//! itself. A value that does not match its format is an error naming both.

use std::sync::Arc;

use chrono::{NaiveDate, NaiveDateTime};
use datafusion::{
    arrow::{
        array::{Array, AsArray, Date32Builder, TimestampMicrosecondBuilder},
        compute::cast,
        datatypes::{DataType, Field, FieldRef, TimeUnit},
    },
    common::{Result, ScalarValue, exec_err},
    logical_expr::{
        ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    },
    prelude::SessionContext,
};

/// The time zone a Postgres-pattern `to_timestamp` answers in.
const UTC: &str = "UTC";

/// What a function makes of its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Target {
    Timestamp,
    Date,
}

/// Puts the Postgres-pattern `to_timestamp` and `to_date` in place of
/// `context`'s own, which they call for any other format.
pub fn register(context: &SessionContext) {
    let functions: Vec<ScalarUDF> = {
        let state = context.state_ref();
        let state = state.read();
        [
            ("to_timestamp", Target::Timestamp),
            ("to_date", Target::Date),
        ]
        .into_iter()
        .filter_map(|(name, target)| {
            let inner = state.scalar_functions().get(name)?.clone();
            Some(ScalarUDF::new_from_impl(PostgresPatterns { inner, target }))
        })
        .collect()
    };
    for function in functions {
        context.register_udf(function);
    }
}

/// One Postgres pattern's chrono equivalent, longest patterns first.
const PATTERNS: &[(&str, &str)] = &[
    ("HH24", "%H"),
    ("HH12", "%I"),
    ("YYYY", "%Y"),
    ("MONTH", "%B"),
    ("DDD", "%j"),
    ("MON", "%b"),
    ("DAY", "%A"),
    ("YY", "%y"),
    ("MM", "%m"),
    ("DD", "%d"),
    ("HH", "%I"),
    ("MI", "%M"),
    ("SS", "%S"),
    ("MS", "%3f"),
    ("US", "%6f"),
    ("AM", "%p"),
    ("PM", "%p"),
    ("DY", "%a"),
    ("FM", ""),
];

/// Postgres format `format` as a chrono format, and whether it reads a
/// time of day.
fn chrono_format(format: &str) -> (String, bool) {
    let mut chrono = String::with_capacity(format.len() * 2);
    let mut has_time = false;
    let mut rest = format;
    while let Some(c) = rest.chars().next() {
        if c == '"' {
            let quoted = &rest[1..];
            let end = quoted.find('"').unwrap_or(quoted.len());
            chrono.push_str(&quoted[..end].replace('%', "%%"));
            rest = quoted.get(end + 1..).unwrap_or("");
            continue;
        }
        let upper = rest.get(..5.min(rest.len())).map(str::to_ascii_uppercase);
        let found = PATTERNS.iter().find(|(pattern, _)| {
            upper
                .as_deref()
                .is_some_and(|upper| upper.starts_with(pattern))
        });
        if let Some((pattern, equivalent)) = found {
            has_time |= matches!(
                equivalent.as_bytes().get(1),
                Some(b'H' | b'I' | b'M' | b'S')
            ) || equivalent.ends_with('f');
            chrono.push_str(equivalent);
            rest = &rest[pattern.len()..];
            continue;
        }
        if c == '%' {
            chrono.push_str("%%");
        } else {
            chrono.push(c);
        }
        rest = &rest[c.len_utf8()..];
    }
    (chrono, has_time)
}

/// DataFusion's function, reading Postgres patterns too.
#[derive(Debug, PartialEq, Eq, Hash)]
struct PostgresPatterns {
    inner: Arc<ScalarUDF>,
    target: Target,
}

impl PostgresPatterns {
    /// The Postgres format of a call: its one constant format with no `%`.
    fn postgres_format<'a>(&self, formats: &[Option<&'a ScalarValue>]) -> Option<&'a str> {
        let [Some(format)] = formats else {
            return None;
        };
        match format {
            ScalarValue::Utf8(Some(format))
            | ScalarValue::Utf8View(Some(format))
            | ScalarValue::LargeUtf8(Some(format))
                if !format.contains('%') =>
            {
                Some(format)
            }
            _ => None,
        }
    }

    fn returned(&self) -> DataType {
        match self.target {
            Target::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
            Target::Date => DataType::Date32,
        }
    }
}

impl ScalarUDFImpl for PostgresPatterns {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        match args.scalar_arguments {
            [Some(_) | None, formats @ ..] if self.postgres_format(formats).is_some() => {
                Ok(Arc::new(Field::new(self.name(), self.returned(), true)))
            }
            _ => self.inner.return_field_from_args(args),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let formats: Vec<Option<&ScalarValue>> = args.args[1..]
            .iter()
            .map(|arg| match arg {
                ColumnarValue::Scalar(value) => Some(value),
                ColumnarValue::Array(_) => None,
            })
            .collect();
        let Some(format) = self.postgres_format(&formats) else {
            return self.inner.invoke_with_args(args);
        };
        let (chrono, has_time) = chrono_format(format);
        let texts = cast(&args.args[0].to_array(args.number_rows)?, &DataType::Utf8)?;
        let texts = texts.as_string::<i32>();
        let parse_error = |text: &str| {
            exec_err!(
                "{}: {text:?} does not match the format {format:?}",
                self.name()
            )
        };
        match self.target {
            Target::Timestamp => {
                let mut values = TimestampMicrosecondBuilder::with_capacity(texts.len());
                for text in texts.iter() {
                    let Some(text) = text else {
                        values.append_null();
                        continue;
                    };
                    let parsed = if has_time {
                        NaiveDateTime::parse_from_str(text, &chrono).ok()
                    } else {
                        NaiveDate::parse_from_str(text, &chrono)
                            .ok()
                            .and_then(|date| date.and_hms_opt(0, 0, 0))
                    };
                    match parsed {
                        Some(at) => values.append_value(at.and_utc().timestamp_micros()),
                        None => return parse_error(text),
                    }
                }
                Ok(ColumnarValue::Array(Arc::new(
                    values.finish().with_timezone(UTC),
                )))
            }
            Target::Date => {
                let mut values = Date32Builder::with_capacity(texts.len());
                for text in texts.iter() {
                    let Some(text) = text else {
                        values.append_null();
                        continue;
                    };
                    let parsed = if has_time {
                        NaiveDateTime::parse_from_str(text, &chrono)
                            .ok()
                            .map(|at| at.date())
                    } else {
                        NaiveDate::parse_from_str(text, &chrono).ok()
                    };
                    let days = parsed.and_then(|date| {
                        i32::try_from((date - NaiveDate::default()).num_days()).ok()
                    });
                    match days {
                        Some(days) => values.append_value(days),
                        None => return parse_error(text),
                    }
                }
                Ok(ColumnarValue::Array(Arc::new(values.finish())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_patterns_read_as_chrono_formats() {
        assert_eq!(
            chrono_format("YYYY-MM-DD HH24:MI:SS.US"),
            ("%Y-%m-%d %H:%M:%S.%6f".to_string(), true)
        );
        assert_eq!(chrono_format("yyyy-mm-dd"), ("%Y-%m-%d".to_string(), false));
        assert_eq!(
            chrono_format("FMDD Mon YYYY \"at\" HH12:MI AM 100%"),
            ("%d %b %Y at %I:%M %p 100%%".to_string(), true)
        );
    }

    async fn first(context: &SessionContext, sql: &str) -> Result<String> {
        let rows = context.sql(sql).await?.collect().await?;
        Ok(
            datafusion::arrow::util::pretty::pretty_format_batches(&rows)?
                .to_string()
                .lines()
                .nth(3)
                .unwrap_or_default()
                .to_string(),
        )
    }

    #[tokio::test]
    async fn superset_filters_read_postgres_patterns_and_chrono_formats_stay() {
        let context = SessionContext::new();
        register(&context);
        let at = first(
            &context,
            "SELECT to_timestamp('2026-01-01 10:20:30.000042', 'YYYY-MM-DD HH24:MI:SS.US') AS t, \
             arrow_typeof(to_timestamp('2026-01-01 00:00:00.000000', 'YYYY-MM-DD HH24:MI:SS.US')) AS k, \
             to_date('2026-02-03', 'YYYY-MM-DD') AS d",
        )
        .await
        .unwrap();
        assert!(at.contains("2026-01-01T10:20:30.000042Z"), "{at}");
        assert!(
            at.contains("Timestamp(µs, \"UTC\")")
                || at.contains("Timestamp(Microsecond, Some(\"UTC\"))"),
            "{at}"
        );
        assert!(at.contains("2026-02-03"), "{at}");
        // DataFusion's own formats answer as before.
        let own = first(
            &context,
            "SELECT arrow_typeof(to_timestamp('2026-01-01 00:00', '%Y-%m-%d %H:%M')) AS k",
        )
        .await
        .unwrap();
        assert!(own.contains("Nanosecond") || own.contains("ns"), "{own}");
        // A value that does not match is an error naming both.
        let wrong = first(&context, "SELECT to_timestamp('01/02/2026', 'YYYY-MM-DD')")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            wrong.contains("\"01/02/2026\" does not match the format \"YYYY-MM-DD\""),
            "{wrong}"
        );
    }
}
