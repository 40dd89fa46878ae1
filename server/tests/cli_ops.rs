//! The operator's path (issue 21): from an empty database to a running server with the
//! CLI alone. `init` twice, `create-tag --exist-ok` twice, `next -n` reserving exactly
//! what it prints, bad `decode` input, `--json`, read-only commands on a missing SQLite
//! path, and `serve` configured from the environment only. Real MariaDB; SQLite files
//! in a temporary directory.

mod support;

use std::process::Command;

use support::{fresh, leafid, FreshDatabase, Server};

/// Runs `leafid ARGS` with `LEAFID_URL=url`: (success, stdout, stderr).
fn run(url: &str, args: &[&str]) -> (bool, String, String) {
    let out = leafid()
        .args(args)
        .env("LEAFID_URL", url)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ids(out: &str) -> Vec<i64> {
    out.lines().map(|l| l.parse().unwrap()).collect()
}

#[test]
fn init_creates_the_table_once_on_mysql_and_sqlite_and_says_so() {
    let db = FreshDatabase::create("srv_init");
    let (ok, _, err) = run(&db.url, &["tags"]);
    assert!(!ok);
    // The CLI's remedy, not the library's `create_table()`.
    assert!(err.contains("leafid init"), "{err}");
    assert!(!err.contains("create_table()"), "{err}");

    let (ok, out, err) = run(&db.url, &["init"]);
    assert!(ok, "{err}");
    assert!(out.contains("created table leaf_alloc"), "{out}");
    let (ok, out, err) = run(&db.url, &["init"]);
    assert!(ok, "{err}");
    assert!(out.contains("already exists"), "{out}");
    assert!(run(&db.url, &["tags"]).0);

    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let (ok, out, err) = run(&url, &["init"]);
    assert!(ok, "{err}");
    assert!(out.contains("created table leaf_alloc"), "{out}");
    let (ok, out, _) = run(&url, &["init"]);
    assert!(ok && out.contains("already exists"), "{out}");
}

#[test]
fn create_tag_exist_ok_twice_and_the_first_id_is_the_one_reported() {
    let db = FreshDatabase::create("srv_exist");
    assert!(run(&db.url, &["init"]).0);
    let tag = fresh("t");
    let (ok, out, err) = run(
        &db.url,
        &["create-tag", &tag, "--start", "100", "--exist-ok"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("first id 100"), "{out}");
    let (ok, out, err) = run(
        &db.url,
        &["create-tag", &tag, "--start", "100", "--exist-ok"],
    );
    assert!(ok, "{err}");
    assert!(out.contains("already exists"), "{out}");
    // Without --exist-ok: an error that names the flag.
    let (ok, _, err) = run(&db.url, &["create-tag", &tag]);
    assert!(!ok);
    assert!(err.contains("--exist-ok"), "{err}");
    // create-tag reserved nothing: the first id anyone gets is 100.
    let (ok, out, err) = run(&db.url, &["next", &tag]);
    assert!(ok, "{err}");
    assert_eq!(ids(&out), vec![100]);
}

#[test]
fn next_reserves_exactly_the_ids_it_prints() {
    let db = FreshDatabase::create("srv_next");
    assert!(run(&db.url, &["init"]).0);
    let tag = fresh("t");
    assert!(run(&db.url, &["create-tag", &tag, "--step", "1000"]).0);
    let (ok, out, err) = run(&db.url, &["next", &tag, "-n", "5"]);
    assert!(ok, "{err}");
    assert_eq!(ids(&out), vec![1, 2, 3, 4, 5]);
    let (ok, out, _) = run(&db.url, &["next", &tag, "-n", "2"]);
    assert!(ok);
    // Consecutive across runs: no segment of 1000 was thrown away.
    assert_eq!(ids(&out), vec![6, 7]);
    let (ok, out, err) = run(&db.url, &["stats", "--json"]);
    assert!(ok, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(rows[0]["tag"], tag.as_str());
    assert_eq!(rows[0]["max_id"], 8);
    assert_eq!(rows[0]["step"], 1000);
    // An unknown tag: the CLI command that makes it.
    let (ok, _, err) = run(&db.url, &["next", "nope"]);
    assert!(!ok);
    assert!(err.contains("leafid create-tag nope"), "{err}");
    assert!(
        !err.contains("create_tag(") && !err.contains("refresh()"),
        "{err}"
    );
    assert!(!run(&db.url, &["next", &tag, "-n", "0"]).0);
}

#[test]
fn decode_refuses_bad_input_with_a_failing_exit() {
    for bad in ["-5", "-1", " 12", "abc", "", "99999999999999999999"] {
        let out = leafid().args(["decode", "--", bad]).output().unwrap();
        assert!(!out.status.success(), "decode {bad:?} succeeded");
        assert!(out.stdout.is_empty(), "decode {bad:?} printed a map");
    }
    let out = leafid().args(["decode", "12"]).output().unwrap();
    assert!(out.status.success());
}

#[test]
fn tags_json_is_an_array_of_the_tags() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    assert!(run(&url, &["init"]).0);
    let (ok, out, _) = run(&url, &["tags", "--json"]);
    assert!(ok);
    assert_eq!(out.trim(), "[]");
    assert!(run(&url, &["create-tag", "b"]).0);
    assert!(run(&url, &["create-tag", "a"]).0);
    let (ok, out, _) = run(&url, &["tags", "--json"]);
    assert!(ok);
    let v: Vec<String> = serde_json::from_str(&out).unwrap();
    assert_eq!(v, ["a", "b"]);
}

#[test]
fn commands_other_than_init_never_create_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.db");
    let url = format!("sqlite://{}", path.display());
    for args in [
        &["tags"][..],
        &["stats"],
        &["tags", "--json"],
        &["next", "t"],
        &["create-tag", "t"],
    ] {
        let (ok, _, err) = run(&url, args);
        assert!(!ok, "{args:?} succeeded on a missing file");
        assert!(err.contains("no SQLite database"), "{args:?}: {err}");
        assert!(!path.exists(), "{args:?} created {}", path.display());
    }
}

#[test]
fn help_shows_examples() {
    for args in [&["--help"][..], &["serve", "--help"], &["next", "--help"]] {
        let out = leafid().args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("Example"), "{args:?}: {text}");
    }
    let out = leafid().args(["serve", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    for var in [
        "LEAFID_CONFIG",
        "LEAFID_LISTEN",
        "LEAFID_URL",
        "LEAFID_SNOWFLAKE",
        "LEAFID_CREATE_TABLE",
        "LEAFID_LOG_FORMAT",
    ] {
        assert!(text.contains(var), "{var} not in serve --help");
    }
    let out = leafid().args(["next", "--help"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("Reserves exactly"));
}

/// `serve` with no flag at all: listen address, store, registry, table creation and
/// log format from `LEAFID_*`, on a database with no table yet.
#[test]
fn serve_takes_every_flag_from_the_environment() {
    let db = FreshDatabase::create("srv_env");
    let cache = tempfile::tempdir().unwrap();
    let mut cmd: Command = leafid();
    cmd.arg("serve")
        .env_remove("RUST_LOG")
        .env("LEAFID_LISTEN", "127.0.0.1:0")
        .env("LEAFID_URL", &db.url)
        .env("LEAFID_SNOWFLAKE", "fixed:17")
        .env("XDG_CACHE_HOME", cache.path())
        .env("LEAFID_CREATE_TABLE", "true")
        .env("LEAFID_LOG_FORMAT", "json");
    let server = Server::spawn(cmd);
    let (status, _, health) = server.get("/health");
    assert_eq!(status, 200, "{health}");
    let h: serde_json::Value = serde_json::from_str(&health).unwrap();
    assert_eq!(h["snowflake"]["workerId"], 17);
    assert_eq!(h["segmentStore"], "connected");
    // The table was made at start: a tag created now serves ids.
    assert!(run(&db.url, &["create-tag", "envtag"]).0);
    let (status, _, body) = server.get("/api/segment/get/envtag");
    assert_eq!(status, 200, "{body}");
    let mut log = server.startup.clone();
    log.extend(server.log.try_iter());
    drop(server);
    // Every line is JSON; the version is there; no raw "no floor" sentinel at INFO.
    let mut saw_version = false;
    for line in &log {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        saw_version |= v["version"] == env!("CARGO_PKG_VERSION");
        if v["message"] == "snowflake worker id held" {
            assert!(v["floor"].is_null(), "{line}");
        }
        assert!(!line.contains("-9223372036854775808"), "{line}");
    }
    assert!(saw_version, "no version line in {log:?}");
}

/// Text logs: the version line, and a worker id with no floor shows `floor=none`.
#[test]
fn serve_logs_its_version_and_no_raw_floor_sentinel() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/ids.db", dir.path().display());
    let mut cmd = leafid();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--url", &url])
        .args(["--snowflake", "fixed:3"])
        // A cache of its own: no earlier run left a floor for worker 3.
        .env("XDG_CACHE_HOME", dir.path())
        .env_remove("RUST_LOG")
        .env_remove("LEAFID_LOG_FORMAT");
    let server = Server::spawn(cmd);
    let log = server.startup.join("\n");
    assert!(
        log.contains(&format!("leafid {} starting", env!("CARGO_PKG_VERSION"))),
        "{log}"
    );
    assert!(log.contains("floor=none"), "{log}");
    assert!(!log.contains("-9223372036854775808"), "{log}");
}

/// `leafid init` and every table command take Java Leaf's `leaf.properties` with
/// `--config`, reading its `leaf.jdbc.*` keys as `leafid serve --config` does (snowflake
/// keys, here without the `leaf.name` serve would need, are not read), so no JDBC URL is
/// translated by hand.
#[test]
fn init_and_table_commands_read_the_store_from_leaf_properties() {
    let db = FreshDatabase::create("srv_cfg");
    let url = url::Url::parse(&db.url).unwrap();
    let props = format!(
        "leaf.segment.enable=true\n\
         leaf.jdbc.url=jdbc:mysql://{}:{}{}?useUnicode=true&characterEncoding=utf8\n\
         leaf.jdbc.username={}\nleaf.jdbc.password={}\n\
         leaf.snowflake.enable=true\n",
        url.host_str().unwrap(),
        url.port().unwrap_or(3306),
        url.path(),
        url.username(),
        url.password().unwrap_or(""),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("leaf.properties");
    std::fs::write(&path, props).unwrap();
    let config = path.to_str().unwrap();
    let cli = |args: &[&str]| {
        let out = leafid()
            .args(args)
            .args(["--config", config])
            .env_remove("LEAFID_URL")
            .env_remove("RUST_LOG")
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    };
    let (ok, out, err) = cli(&["init"]);
    assert!(ok, "{err}");
    assert!(out.contains("created table leaf_alloc"), "{out}");
    let (ok, _, err) = cli(&["create-tag", "cfg", "--step", "10"]);
    assert!(ok, "{err}");
    let (ok, out, err) = cli(&["next", "cfg", "-n", "3"]);
    assert!(ok, "{err}");
    assert_eq!(ids(&out), [1, 2, 3]);
    for args in [&["tags"][..], &["stats"]] {
        let (ok, out, err) = cli(args);
        assert!(ok && out.contains("cfg"), "{args:?}: {out}{err}");
    }
    // The store is the file's: the table is in the fresh database.
    assert!(run(&db.url, &["tags"]).1.contains("cfg"));
}

/// `leafid serve` on a store without `leaf_alloc` stops naming the server's own ways to
/// create it (`leafid init`, `--create-table`), not the library's `create_table()`.
#[test]
fn serve_on_a_missing_table_names_leafid_init() {
    let db = FreshDatabase::create("srv_notable");
    let out = leafid()
        .args(["serve", "--url", &db.url, "--listen", "127.0.0.1:0"])
        .env_remove("LEAFID_CONFIG")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("table leaf_alloc does not exist"), "{err}");
    assert!(
        err.contains("`leafid init`") && err.contains("--create-table"),
        "{err}"
    );
    assert!(!err.contains("create_table"), "{err}");
}
