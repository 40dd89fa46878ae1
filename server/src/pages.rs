//! The bodies Leaf's server renders: the `/cache` and `/db` monitor pages, the
//! `/decodeSnowflakeId` map and Spring Boot's JSON error body (leaf-spec §2.4, §5).
//! Pure functions from data to text, so the routes in `http.rs` stay small.

use std::fmt::Write;

use leafid::segment::TagRow;
use leafid::TagStats;
use serde_json::{json, Map, Value};

/// Leaf's `/cache` page (`segment.ftl`): one row per tag buffer with columns name,
/// init, next, pos, value0, max0, step0, value1, max1, step1.
pub fn cache(stats: &[TagStats]) -> String {
    let mut rows = String::new();
    for s in stats {
        let [a, b] = s.segments;
        // Infallible: writing to a String.
        let _ = writeln!(
            rows,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&s.tag),
            s.initialized,
            s.next_ready,
            s.current,
            a.value,
            a.max,
            a.step,
            b.value,
            b.max,
            b.step
        );
    }
    page(
        "Leaf segment cache",
        &[
            "name", "init", "next", "pos", "value0", "max0", "step0", "value1", "max1", "step1",
        ],
        &rows,
    )
}

/// Leaf's `/db` page (`db.ftl`): the rows of `leaf_alloc`, columns tag, max, step, update.
pub fn db(rows: &[TagRow]) -> String {
    let mut body = String::new();
    for r in rows {
        let _ = writeln!(
            body,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&r.tag),
            r.max_id,
            r.step,
            escape(&r.update_time)
        );
    }
    page("Leaf segment db", &["tag", "max", "step", "update"], &body)
}

fn page(title: &str, columns: &[&str], rows: &str) -> String {
    let head: String = columns.iter().map(|c| format!("<th>{c}</th>")).collect();
    format!(
        "<!DOCTYPE html>\n<html>\n<head><meta charset=\"UTF-8\"><title>{title}</title></head>\n<body>\n\
         <table border=\"1\">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}</tbody>\n</table>\n</body>\n</html>\n"
    )
}

/// Escapes text for an HTML cell: tags come from users (any byte string of the table).
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Leaf's `/decodeSnowflakeId` answer: a JSON map of strings,
/// `{"timestamp":"1567733700834(2019-09-06 09:35:00.834)","sequenceId":"3448","workerId":"39"}`,
/// the date in the server's time zone; an id that is not a number gives Leaf's
/// `{"errorMsg":"snowflake Id反解析发生异常!"}`. Leaf's layout and epoch, as Leaf hard-codes.
///
/// As Java's `Long.parseLong`, a leading `+` is accepted and any space refused; as Java's
/// arithmetic, the shifts keep the sign: `-1` decodes to the epoch minus 1 ms, worker
/// 1023, sequence 4095.
pub fn decode(raw: &str) -> Value {
    let Ok(id) = raw.parse::<i64>() else {
        return json!({ "errorMsg": "snowflake Id反解析发生异常!" });
    };
    let layout = leafid::Layout::default();
    let seq_bits = layout.sequence_bits();
    let shift = seq_bits + layout.worker_bits();
    let timestamp_ms = (id >> shift).saturating_add(layout.epoch_ms());
    let worker_id = (id >> seq_bits) & ((1i64 << layout.worker_bits()) - 1);
    let sequence = id & ((1i64 << seq_bits) - 1);
    let date = chrono::DateTime::from_timestamp_millis(timestamp_ms)
        .map(|t| {
            t.with_timezone(&chrono::Local)
                .format("%Y-%m-%d %H:%M:%S%.3f")
                .to_string()
        })
        .unwrap_or_default();
    let mut map = Map::new();
    map.insert("timestamp".into(), format!("{timestamp_ms}({date})").into());
    map.insert("sequenceId".into(), sequence.to_string().into());
    map.insert("workerId".into(), worker_id.to_string().into());
    Value::Object(map)
}

/// Spring Boot 1.5's JSON error body, which Leaf's callers see on every failure.
pub fn spring_error(
    status: u16,
    error: &str,
    exception: Option<&str>,
    message: &str,
    path: &str,
) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut map = Map::new();
    map.insert("timestamp".into(), now.into());
    map.insert("status".into(), status.into());
    map.insert("error".into(), error.into());
    if let Some(e) = exception {
        map.insert("exception".into(), e.into());
    }
    map.insert("message".into(), message.into());
    map.insert("path".into(), path.into());
    Value::Object(map)
}

/// Spring Boot's Whitelabel error page, from the JSON error body of [`spring_error`].
pub fn whitelabel(error: &Value) -> String {
    let text = |k: &str| match &error[k] {
        Value::String(s) => escape(s),
        other => escape(&other.to_string()),
    };
    let when = chrono::Local::now().format("%a %b %d %H:%M:%S %Z %Y");
    format!(
        "<html><body><h1>Whitelabel Error Page</h1><p>This application has no explicit mapping for /error, \
         so you are seeing this as a fallback.</p><div id='created'>{when}</div>\
         <div>There was an unexpected error (type={}, status={}).</div><div>{}</div></body></html>",
        text("error"),
        text("status"),
        text("message")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_as_leaf() {
        // Leaf's spec example: 1567733700834 ms, worker 39, sequence 3448.
        let id = ((1_567_733_700_834i64 - 1_288_834_974_657) << 22) | (39 << 12) | 3448;
        let v = decode(&id.to_string());
        assert!(v["timestamp"]
            .as_str()
            .unwrap()
            .starts_with("1567733700834(2019-09-0"));
        assert_eq!(v["workerId"], "39");
        assert_eq!(v["sequenceId"], "3448");
        assert_eq!(decode("abc")["errorMsg"], "snowflake Id反解析发生异常!");
    }

    #[test]
    fn decodes_negative_ids_and_spaces_as_java() {
        // Recorded from Java Leaf: its `>>` keeps the sign.
        let v = decode("-1");
        assert!(v["timestamp"]
            .as_str()
            .unwrap()
            .starts_with("1288834974656("));
        assert_eq!(v["workerId"], "1023");
        assert_eq!(v["sequenceId"], "4095");
        // Long.parseLong: "+12" is 12, " 12" is refused.
        assert_eq!(decode("+12")["sequenceId"], "12");
        assert!(decode(" 12").get("errorMsg").is_some());
        assert!(decode("12 ").get("errorMsg").is_some());
    }

    #[test]
    fn cache_page_escapes_tags() {
        let html = db(&[TagRow {
            tag: "<b>".into(),
            max_id: 1,
            step: 2,
            description: None,
            update_time: "t".into(),
        }]);
        assert!(html.contains("<td>&lt;b&gt;</td><td>1</td><td>2</td><td>t</td>"));
    }

    #[test]
    fn monitor_pages_link_no_stylesheet() {
        // leafid serves no /css/…: a page linking Java's Bootstrap would fetch a 404.
        for html in [cache(&[]), db(&[])] {
            assert!(!html.contains("<link") && !html.contains(".css"), "{html}");
        }
    }
}
