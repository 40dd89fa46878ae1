//! Leaf's `leaf.properties`, read into the two URLs leafid's core takes.
//!
//! An operator replaces Java Leaf by pointing `leafid serve` at the file the Java server
//! used. The keys and their defaults are Leaf's (leaf-spec §4): `leaf.segment.enable` and
//! `leaf.snowflake.enable` default to `true` when absent, as in Leaf's code; the fork's
//! `leaf.snowflake.mode` picks the worker-id registry.
//!
//! ```text
//! leaf.name=com.sankuai.leaf.opensource.test
//! leaf.segment.enable=true
//! leaf.jdbc.url=jdbc:mysql://127.0.0.1:3306/leaf?useUnicode=true&characterEncoding=utf8
//! leaf.jdbc.username=root
//! leaf.jdbc.password=secret
//! leaf.snowflake.enable=true
//! leaf.snowflake.zk.address=127.0.0.1:2181
//! leaf.snowflake.port=8080
//! ```

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

/// What `leafid serve` runs: a segment store URL and a snowflake registry URL, each
/// present only when that mode is enabled.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ServeConfig {
    /// The segment store (`mysql://user:pass@host:port/db`), when segment mode is on.
    pub segment_url: Option<String>,
    /// The snowflake worker-id registry (`zookeeper://…`, `fixed:7`, …), when snowflake
    /// mode is on.
    pub snowflake_url: Option<String>,
}

impl fmt::Debug for ServeConfig {
    // By hand: both URLs may carry a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |u: &Option<String>| u.as_deref().map(leafid::redact::url);
        f.debug_struct("ServeConfig")
            .field("segment_url", &shown(&self.segment_url))
            .field("snowflake_url", &shown(&self.snowflake_url))
            .finish()
    }
}

/// A `leaf.properties` that cannot be used: names the key and the form it expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key at fault.
    pub key: String,
    /// What is wrong and what a correct value looks like.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "leaf.properties: {}: {}", self.key, self.reason)
    }
}

impl std::error::Error for ConfigError {}

fn err(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// Parses the text of a Java properties file: `key=value`, `key: value` or
/// `key value`, `#` and `!` comments, a trailing `\` continuing a line, and the escapes
/// `\t \n \r \\ \= \: \uXXXX`. Later keys win, as in `java.util.Properties`.
pub fn parse_properties(text: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut lines = text.lines();
    while let Some(first) = lines.next() {
        let mut line = first.trim_start().to_string();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        // An odd number of trailing backslashes continues the logical line.
        while line.chars().rev().take_while(|&c| c == '\\').count() % 2 == 1 {
            line.pop();
            match lines.next() {
                Some(next) => line.push_str(next.trim_start()),
                None => break,
            }
        }
        let (key, value) = split_key(&line);
        out.insert(unescape(key), unescape(value));
    }
    out
}

/// Splits a logical line at the first unescaped `=`, `:` or whitespace.
fn split_key(line: &str) -> (&str, &str) {
    let mut escaped = false;
    for (i, c) in line.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '=' | ':' => return (&line[..i], line[i + 1..].trim_start()),
            c if c.is_whitespace() => {
                let rest = line[i..].trim_start();
                let rest = rest
                    .strip_prefix(['=', ':'])
                    .map(str::trim_start)
                    .unwrap_or(rest);
                return (&line[..i], rest);
            }
            _ => {}
        }
    }
    (line, "")
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('f') => out.push('\u{c}'),
            Some('u') => {
                let hex: String = chars.by_ref().take(4).collect();
                match u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32) {
                    Some(u) => out.push(u),
                    None => out.push_str(&hex),
                }
            }
            Some(other) => out.push(other),
            None => {}
        }
    }
    out
}

/// Reads the `leaf.properties` file at `path` into the URLs `leafid serve` runs on.
pub fn read(path: &Path) -> Result<ServeConfig, String> {
    from_properties(&read_text(path)?).map_err(|e| e.to_string())
}

/// The segment store's URL in the `leaf.properties` file at `path`, from its
/// `leaf.jdbc.*` keys as `leafid serve` reads them: the store `leafid init` and the
/// table commands work on with `--config`. Snowflake keys are not read (these commands
/// never need them), and a file with `leaf.segment.enable=false` names no store.
pub fn read_segment_url(path: &Path) -> Result<String, String> {
    let props = parse_properties(&read_text(path)?);
    if !flag(&props, "leaf.segment.enable").map_err(|e| e.to_string())? {
        return Err(format!(
            "{}: leaf.segment.enable=false, so it names no segment store; give --url",
            path.display()
        ));
    }
    jdbc_to_url(&props).map_err(|e| e.to_string())
}

fn read_text(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// Reads a `leaf.properties` text into the URLs `leafid serve` runs on.
pub fn from_properties(text: &str) -> Result<ServeConfig, ConfigError> {
    let props = parse_properties(text);
    let get = |k: &str| props.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
    let mut config = ServeConfig::default();

    if flag(&props, "leaf.segment.enable")? {
        config.segment_url = Some(jdbc_to_url(&props)?);
    }
    if flag(&props, "leaf.snowflake.enable")? {
        let name = get("leaf.name").ok_or_else(|| {
            err(
                "leaf.name",
                "missing; snowflake mode needs it (the ZooKeeper path /snowflake/{leaf.name}), e.g. leaf.name=com.sankuai.leaf.opensource.test",
            )
        })?;
        let port = port(&props)?;
        let mode = get("leaf.snowflake.mode").unwrap_or("zk_normal");
        let zk = || {
            get("leaf.snowflake.zk.address").ok_or_else(|| {
                err(
                    "leaf.snowflake.zk.address",
                    format!("missing; mode {mode} needs a ZooKeeper connect string host:port[,host:port…], e.g. 127.0.0.1:2181"),
                )
            })
        };
        config.snowflake_url = Some(match mode {
            "zk_normal" => format!("zookeeper://{}/{name}?port={port}", zk()?),
            "zk_recycle" => format!("zookeeper-recycle://{}/{name}?port={port}", zk()?),
            // The fork's table on MySQL; on PostgreSQL, leafid's identity lease.
            "mysql" => {
                let url = jdbc_to_url(&props)?;
                let sep = if url.contains('?') { '&' } else { '?' };
                format!("{url}{sep}port={port}")
            }
            "local" => format!("fixed:{}", local_worker_id(&props, port)?),
            other => {
                return Err(err(
                    "leaf.snowflake.mode",
                    format!("unknown mode {other:?}; expected zk_normal (default), zk_recycle, mysql or local"),
                ))
            }
        });
    }
    Ok(config)
}

/// A `true`/`false` key; absent means `true`, Leaf's code default.
fn flag(props: &HashMap<String, String>, key: &str) -> Result<bool, ConfigError> {
    match props
        .get(key)
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("true") => Ok(true),
        Some("false") => Ok(false),
        Some(other) => Err(err(
            key,
            format!("{other:?} is not a boolean; expected true or false"),
        )),
    }
}

/// `leaf.snowflake.port`, parsed as Leaf does (`Integer.parseInt`).
fn port(props: &HashMap<String, String>) -> Result<u16, ConfigError> {
    let key = "leaf.snowflake.port";
    let raw = props.get(key).map(|v| v.trim()).unwrap_or("");
    if raw.is_empty() {
        return Err(err(
            key,
            "missing; snowflake mode needs this server's identity port, e.g. leaf.snowflake.port=8080",
        ));
    }
    raw.parse().map_err(|_| {
        err(
            key,
            format!("{raw:?} is not a port; expected an integer 0-65535, e.g. 8080"),
        )
    })
}

/// `leaf.jdbc.url` (`jdbc:mysql://host:port/db?…` or `jdbc:postgresql://host:port/db?…`)
/// with `leaf.jdbc.username` and `leaf.jdbc.password` as leafid's
/// `mysql://user:pass@host:port/db` or `postgres://…`. The JDBC parameters
/// (`useUnicode`, `characterEncoding`, …) are the drivers' own and are dropped, except
/// PostgreSQL's `sslmode`, which means the same to leafid and must not be lost (a
/// `sslmode=require` dropped would connect in clear text).
fn jdbc_to_url(props: &HashMap<String, String>) -> Result<String, ConfigError> {
    let key = "leaf.jdbc.url";
    let form = "expected jdbc:mysql://host:port/database[?params] or jdbc:postgresql://host:port/database[?params], e.g. jdbc:mysql://127.0.0.1:3306/leaf?useUnicode=true";
    let raw = props.get(key).map(|v| v.trim()).unwrap_or("");
    if raw.is_empty() {
        return Err(err(key, format!("missing; {form}")));
    }
    let (scheme, rest) = if let Some(rest) = raw.strip_prefix("jdbc:postgresql://") {
        ("postgres", rest)
    } else {
        let rest = raw
            .strip_prefix("jdbc:mysql://")
            .or_else(|| raw.strip_prefix("jdbc:mariadb://"))
            .ok_or_else(|| {
                err(
                    key,
                    format!(
                        "{} is not a MySQL or PostgreSQL JDBC URL; {form}",
                        leafid::redact::url(raw)
                    ),
                )
            })?;
        ("mysql", rest)
    };
    let tls = if scheme == "postgres" {
        pg_tls_params(rest).map_err(|reason| err(key, reason))?
    } else {
        Vec::new()
    };
    let rest = rest.split(['?', ';']).next().unwrap_or("");
    let (host, db) = rest
        .split_once('/')
        .filter(|(h, d)| !h.is_empty() && !d.is_empty() && !h.contains('@'))
        .ok_or_else(|| {
            err(
                key,
                format!(
                    "{} names no host or database; {form}",
                    leafid::redact::url(raw)
                ),
            )
        })?;
    let user = props
        .get("leaf.jdbc.username")
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            err(
                "leaf.jdbc.username",
                "missing; the database user for leaf.jdbc.url, e.g. leaf.jdbc.username=root",
            )
        })?;
    // The password is taken as written (spaces included); an empty one means none.
    let password = props
        .get("leaf.jdbc.password")
        .map(String::as_str)
        .unwrap_or("");
    let creds = if password.is_empty() {
        encode(user)
    } else {
        format!("{}:{}", encode(user), encode(password))
    };
    let query = if tls.is_empty() {
        String::new()
    } else {
        format!("?{}", tls.join("&"))
    };
    Ok(format!("{scheme}://{creds}@{host}/{db}{query}"))
}

/// The TLS settings of a pgjdbc URL's query, as leafid's (libpq's) parameters: `sslmode`
/// as written; `ssl` / `ssl=true` without `sslmode` as `verify-full` (what pgjdbc does
/// with it); `sslrootcert`, `sslcert`, `sslkey` carried over. Dropping any of them would
/// weaken the connection (`prefer` connects in clear text to a server without TLS), so
/// a value leafid cannot carry is refused instead.
fn pg_tls_params(rest: &str) -> Result<Vec<String>, String> {
    let query = rest.split_once('?').map(|(_, q)| q).unwrap_or("");
    let mut out = Vec::new();
    let mut mode = None;
    let mut ssl = None;
    // pgjdbc's factory that encrypts without checking the certificate: `require`.
    let mut unverified = false;
    for kv in query.split('&').filter(|kv| !kv.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "sslmode" => {
                const MODES: [&str; 6] = [
                    "disable",
                    "allow",
                    "prefer",
                    "require",
                    "verify-ca",
                    "verify-full",
                ];
                if !MODES.contains(&v) {
                    return Err(format!(
                        "sslmode={v:?} is not one of {}; leafid will not guess a weaker one",
                        MODES.join(", ")
                    ));
                }
                mode = Some(v.to_string());
            }
            "ssl" => ssl = Some(v),
            "sslfactory" => unverified = v.ends_with(".NonValidatingFactory"),
            "sslrootcert" | "sslcert" | "sslkey" => {
                let ok = !v.is_empty()
                    && v.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "/._-%".contains(c));
                if !ok {
                    return Err(format!(
                        "{k} must be a file path (letters, digits, / . _ - and %-escapes)"
                    ));
                }
                out.push(format!("{k}={v}"));
            }
            _ => {}
        }
    }
    match (mode, ssl) {
        (Some(m), Some("false")) if m != "disable" => {
            return Err(format!("ssl=false contradicts sslmode={m}; keep one"))
        }
        (Some(m), _) => out.insert(0, format!("sslmode={m}")),
        (None, Some("" | "true")) if unverified => out.insert(0, "sslmode=require".into()),
        (None, Some("" | "true")) => out.insert(0, "sslmode=verify-full".into()),
        (None, Some("false")) | (None, None) => {}
        (None, Some(v)) => return Err(format!("ssl={v:?}: expected true or false")),
    }
    Ok(out)
}

/// Percent-encodes everything but unreserved characters, for the user info of a URL.
fn encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The fork's `local` mode: `leaf.snowflake.local.workIdMap` (`{"ip:port": workId}`)
/// gives this server's id. leafid takes the one entry whose port is ours.
fn local_worker_id(props: &HashMap<String, String>, port: u16) -> Result<u32, ConfigError> {
    let key = "leaf.snowflake.local.workIdMap";
    let form = "expected a JSON map {\"ip:port\": workId} with one entry for this host's ip and leaf.snowflake.port";
    let raw = props.get(key).map(|v| v.trim()).unwrap_or("");
    let map: HashMap<String, serde_json::Value> =
        serde_json::from_str(raw).map_err(|e| err(key, format!("not a JSON map ({e}); {form}")))?;
    // The fork's key is this host's ip and the port (`Utils.getIp()` + ":" + port). A
    // port alone would let a config copied to another host take this host's id.
    let ip = leafid::snowflake::registry::first_non_loopback_ipv4().ok_or_else(|| {
        err(
            key,
            "this host has no non-loopback IPv4 address to find its entry by",
        )
    })?;
    let own = format!("{ip}:{port}");
    let mine: Vec<_> = map.iter().filter(|(k, _)| k.trim() == own).collect();
    match mine.as_slice() {
        [(_, id)] => id
            .as_u64()
            .and_then(|id| u32::try_from(id).ok())
            .ok_or_else(|| {
                err(
                    key,
                    format!("workId {id} is not a non-negative integer; {form}"),
                )
            }),
        [] => Err(err(
            key,
            format!("no entry for {own} (this host's ip and leaf.snowflake.port); {form}"),
        )),
        _ => Err(err(key, format!("several entries for {own}; {form}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEAF: &str = "leaf.name=com.sankuai.leaf.opensource.test\n\
        leaf.segment.enable=true\n\
        leaf.jdbc.url=jdbc:mysql://127.0.0.1:3306/leaf?useUnicode=true&characterEncoding=utf8\n\
        leaf.jdbc.username=root\n\
        leaf.jdbc.password=p@ss:w/rd\n\
        leaf.snowflake.enable=true\n\
        leaf.snowflake.zk.address=127.0.0.1:2181\n\
        leaf.snowflake.port=8080\n";

    #[test]
    fn leaf_shipped_keys_become_core_urls() {
        let c = from_properties(LEAF).unwrap();
        assert_eq!(
            c.segment_url.as_deref(),
            Some("mysql://root:p%40ss%3Aw%2Frd@127.0.0.1:3306/leaf")
        );
        assert_eq!(
            c.snowflake_url.as_deref(),
            Some("zookeeper://127.0.0.1:2181/com.sankuai.leaf.opensource.test?port=8080")
        );
        assert!(!format!("{c:?}").contains("p%40ss"));
    }

    /// Issue 28: IPv6 literal hosts in the JDBC URL and the ZooKeeper address keep their
    /// brackets, and the core reads the URLs made of them.
    #[test]
    fn ipv6_literal_hosts_become_core_urls_the_core_reads() {
        for (jdbc, url) in [
            (
                "jdbc:mysql://[::1]:3306/leaf?useUnicode=true",
                "mysql://root:pw@[::1]:3306/leaf",
            ),
            (
                "jdbc:postgresql://[fd00::2]:5432/leaf?sslmode=disable",
                "postgres://root:pw@[fd00::2]:5432/leaf?sslmode=disable",
            ),
        ] {
            let c = from_properties(&format!(
                "leaf.jdbc.url={jdbc}\nleaf.jdbc.username=root\nleaf.jdbc.password=pw\n\
                 leaf.snowflake.zk.address=[::1]:2181,[::1]:2182\nleaf.snowflake.port=8080\n\
                 leaf.name=leaf\n"
            ))
            .unwrap();
            assert_eq!(c.segment_url.as_deref(), Some(url));
            leafid::segment::store::open(url).unwrap();
            let zk = c.snowflake_url.unwrap();
            assert_eq!(zk, "zookeeper://[::1]:2181,[::1]:2182/leaf?port=8080");
            leafid::snowflake::registry::RegistryConfig::parse(&zk).unwrap();
        }
    }

    #[test]
    fn modes_default_to_enabled_and_can_be_switched_off() {
        let c = from_properties("leaf.segment.enable=false\nleaf.snowflake.enable=false").unwrap();
        assert_eq!(c, ServeConfig::default());
        let e = from_properties("leaf.snowflake.enable=false").unwrap_err();
        assert_eq!(e.key, "leaf.jdbc.url");
    }

    /// Issue 20: Java Leaf runs with a `leaf.name` holding a `-`; `leafid serve` refused
    /// the same `leaf.properties` (the core's URL check), with the wrong reason.
    #[test]
    fn a_leaf_name_with_a_dash_is_served() {
        for mode in ["zk_normal", "zk_recycle"] {
            let text = format!(
                "leaf.segment.enable=false\nleaf.name=com-sankuai-leaf\nleaf.snowflake.port=8080\n\
                 leaf.snowflake.zk.address=127.0.0.1:2181\nleaf.snowflake.mode={mode}\n"
            );
            let url = from_properties(&text).unwrap().snowflake_url.unwrap();
            assert!(url.contains("/com-sankuai-leaf"), "{url}");
            let url = format!("{url}&ip=10.0.0.1");
            leafid::RegistryConfig::parse(&url).unwrap_or_else(|e| panic!("{mode}: {e}"));
        }
    }

    #[test]
    fn fork_modes_pick_the_registry() {
        let base = "leaf.segment.enable=false\nleaf.name=n\nleaf.snowflake.port=7000\n";
        let c = |extra: &str| from_properties(&format!("{base}{extra}"));
        let recycle = c("leaf.snowflake.mode=zk_recycle\nleaf.snowflake.zk.address=h:1").unwrap();
        assert_eq!(
            recycle.snowflake_url.unwrap(),
            "zookeeper-recycle://h:1/n?port=7000"
        );
        // The entry of this host's ip and port; another host's entry on the same port (a
        // config copied between hosts) is not ours (final review).
        let ip = leafid::snowflake::registry::first_non_loopback_ipv4().unwrap();
        let local = c(&format!("leaf.snowflake.mode=local\nleaf.snowflake.local.workIdMap={{\"{ip}:7000\":5,\"{ip}:7001\":6,\"192.0.2.1:7000\":7}}")).unwrap();
        assert_eq!(local.snowflake_url.unwrap(), "fixed:5");
        let copied =
            c("leaf.snowflake.mode=local\nleaf.snowflake.local.workIdMap={\"192.0.2.1:7000\":5}");
        assert_eq!(copied.unwrap_err().key, "leaf.snowflake.local.workIdMap");
        let mysql = c("leaf.snowflake.mode=mysql\nleaf.jdbc.url=jdbc:mysql://db:3306/leaf\nleaf.jdbc.username=u").unwrap();
        assert_eq!(
            mysql.snowflake_url.unwrap(),
            "mysql://u@db:3306/leaf?port=7000"
        );
        assert_eq!(
            c("leaf.snowflake.mode=etcd").unwrap_err().key,
            "leaf.snowflake.mode"
        );
    }

    #[test]
    fn bad_values_name_the_key_and_the_form() {
        let e =
            from_properties("leaf.segment.enable=false\nleaf.name=n\nleaf.snowflake.port=eighty")
                .unwrap_err();
        assert_eq!(e.key, "leaf.snowflake.port");
        assert!(e.to_string().contains("expected an integer"), "{e}");
        let e = from_properties("leaf.snowflake.enable=false\nleaf.jdbc.url=mysql://db/leaf\nleaf.jdbc.password=hunter22").unwrap_err();
        assert_eq!(e.key, "leaf.jdbc.url");
        assert!(
            e.to_string().contains("jdbc:mysql://host:port/database"),
            "{e}"
        );
        let e = from_properties("leaf.segment.enable=yes").unwrap_err();
        assert_eq!(e.key, "leaf.segment.enable");
    }

    #[test]
    fn java_properties_syntax() {
        let p = parse_properties("# c\n! c\n a = 1\nb:2\nc 3\nd=x\\\n   y\ne=\\u0041\\=");
        assert_eq!(p["a"], "1");
        assert_eq!(p["b"], "2");
        assert_eq!(p["c"], "3");
        assert_eq!(p["d"], "xy");
        assert_eq!(p["e"], "A=");
    }

    #[test]
    fn a_postgresql_jdbc_url_names_the_postgres_store_and_keeps_its_sslmode() {
        let c = from_properties(
            "leaf.name=t\nleaf.segment.enable=true\nleaf.snowflake.enable=false\n\
             leaf.jdbc.url=jdbc:postgresql://db:5432/leaf?sslmode=require&currentSchema=x\n\
             leaf.jdbc.username=u\nleaf.jdbc.password=p@ss",
        )
        .unwrap();
        assert_eq!(
            c.segment_url.as_deref(),
            Some("postgres://u:p%40ss@db:5432/leaf?sslmode=require")
        );
        let c = from_properties(
            "leaf.segment.enable=false\nleaf.name=n\nleaf.snowflake.port=7000\n\
             leaf.snowflake.mode=mysql\nleaf.jdbc.url=jdbc:postgresql://db/leaf?sslmode=verify-full\nleaf.jdbc.username=u",
        )
        .unwrap();
        assert_eq!(
            c.snowflake_url.unwrap(),
            "postgres://u@db/leaf?sslmode=verify-full&port=7000"
        );
        let c = from_properties(
            "leaf.segment.enable=false\nleaf.name=n\nleaf.snowflake.port=7000\n\
             leaf.snowflake.mode=mysql\nleaf.jdbc.url=jdbc:postgresql://db/leaf\nleaf.jdbc.username=u",
        )
        .unwrap();
        assert_eq!(c.snowflake_url.unwrap(), "postgres://u@db/leaf?port=7000");
    }

    /// Review 2: pgjdbc's `ssl=true` (and a bare `ssl`) means TLS required (sslmode
    /// verify-full when no sslmode is given); dropping it leaves sqlx's default
    /// `prefer`, which connects in clear text to a server (or a man in the middle) that
    /// offers no TLS.
    #[test]
    fn rev2_pgjdbc_ssl_true_is_not_downgraded_to_prefer() {
        for q in [
            "ssl=true",
            "ssl",
            "ssl=true&sslfactory=org.postgresql.ssl.NonValidatingFactory",
        ] {
            let c = from_properties(&format!(
                "leaf.name=t\nleaf.segment.enable=true\nleaf.snowflake.enable=false\n\
                 leaf.jdbc.url=jdbc:postgresql://db:5432/leaf?{q}\n\
                 leaf.jdbc.username=u\nleaf.jdbc.password=p"
            ));
            match c {
                Err(_) => {} // refusing is fine too
                Ok(c) => {
                    let url = c.segment_url.unwrap();
                    assert!(
                        url.contains("sslmode=require") || url.contains("sslmode=verify"),
                        "jdbc ?{q} became {url}: TLS no longer required"
                    );
                }
            }
        }
    }
}
