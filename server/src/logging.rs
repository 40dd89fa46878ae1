//! The log on stderr: text lines or one JSON object per line (`--log-format json`,
//! for log shippers), both with the same fields.
//!
//! One field is rendered differently from the core's raw value: a `floor` (the lowest
//! timestamp a snowflake worker id may use) of `i64::MIN` means "no floor", and prints
//! as `none` rather than `-9223372036854775808`.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::field::MakeExt;
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

use crate::cli::LogFormat;

/// Installs the global subscriber: `level` unless `RUST_LOG` says otherwise.
pub fn init(log_format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match log_format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .fmt_fields(format::debug_fn(text_field).delimited(" "))
            .init(),
        LogFormat::Json => builder.with_ansi(false).event_format(JsonLines).init(),
    }
}

/// Whether a field is the "no floor" sentinel.
fn no_floor(field: &Field, value: i64) -> bool {
    field.name() == "floor" && value == i64::MIN
}

/// A text field as the default formatter writes it (`name=value`, the message bare),
/// with the `floor` sentinel as `none`.
fn text_field(w: &mut Writer<'_>, field: &Field, value: &dyn fmt::Debug) -> fmt::Result {
    let shown = format!("{value:?}");
    if field.name() == "message" {
        return write!(w, "{shown}");
    }
    if field.name() == "floor" && shown == i64::MIN.to_string() {
        return write!(w, "floor=none");
    }
    write!(w, "{}={shown}", field.name())
}

/// One JSON object per event: timestamp (RFC 3339, UTC), level, target, the fields.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Fields(Map::new());
        fields.0.insert(
            "timestamp".into(),
            chrono::Utc::now()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
                .into(),
        );
        fields
            .0
            .insert("level".into(), meta.level().as_str().into());
        fields.0.insert("target".into(), meta.target().into());
        event.record(&mut fields);
        writeln!(writer, "{}", Value::Object(fields.0))
    }
}

/// Collects an event's fields into a JSON map.
struct Fields(Map<String, Value>);

impl Visit for Fields {
    fn record_i64(&mut self, field: &Field, value: i64) {
        let v = if no_floor(field, value) {
            Value::Null
        } else {
            value.into()
        };
        self.0.insert(field.name().into(), v);
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}
