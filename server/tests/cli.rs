//! The operator subcommands against the real MariaDB, through `--url` and `LEAFID_URL`.

mod support;

use support::{fresh, leafid, mysql_url};

fn run(args: &[&str]) -> (bool, String, String) {
    let out = leafid()
        .args(args)
        .env("LEAFID_URL", mysql_url())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn create_tag_then_tags_next_and_stats_see_it() {
    let tag = fresh("srv_cli");
    let (ok, _, err) = run(&[
        "create-tag",
        &tag,
        "--start",
        "5000",
        "--step",
        "10",
        "--description",
        "cli test",
    ]);
    assert!(ok, "{err}");

    let (ok, out, err) = run(&["tags"]);
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l == tag), "tags lists the new tag");

    // --url instead of the environment.
    let out = leafid()
        .args(["next", &tag, "-n", "25", "--url", &mysql_url()])
        .env_remove("LEAFID_URL")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ids: Vec<i64> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(ids.len(), 25);
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    // create-tag reserved nothing and next reserved exactly 25: 5000..=5024.
    assert_eq!(ids[0], 5000, "{ids:?}");

    let (ok, out, err) = run(&["stats"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("tag\tmax_id\tstep\tupdate_time\tdescription\n"));
    let row = out
        .lines()
        .find(|l| l.starts_with(&format!("{tag}\t")))
        .expect("row");
    let cols: Vec<&str> = row.split('\t').collect();
    assert!(
        cols[1].parse::<i64>().unwrap() > ids[24],
        "max_id past every id issued: {row}"
    );
    assert_eq!(cols[2], "10");
    assert_eq!(cols[4], "cli test");
}

#[test]
fn create_tag_twice_fails_and_unknown_tag_fails() {
    let tag = fresh("srv_cli_dup");
    assert!(run(&["create-tag", &tag]).0);
    let (ok, _, err) = run(&["create-tag", &tag]);
    assert!(!ok);
    assert!(err.contains("already exists"), "{err}");
    let (ok, _, err) = run(&["next", &fresh("srv_cli_none")]);
    assert!(!ok);
    assert!(err.contains("not found"), "{err}");
}

#[test]
fn decode_splits_leafs_layout() {
    let id = ((1_567_733_700_834i64 - 1_288_834_974_657) << 22) | (39 << 12) | 3448;
    let (ok, out, err) = run(&["decode", &id.to_string()]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["workerId"], "39");
    assert_eq!(v["sequenceId"], "3448");
    assert!(!run(&["decode", "twelve"]).0);
}

#[test]
fn a_bad_url_is_reported_without_its_password() {
    let out = leafid()
        .args(["tags", "--url", "mysql://root:sekrit99@127.0.0.1:1/leaf"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("sekrit99"), "{err}");
    assert!(err.contains("127.0.0.1:1"), "{err}");
}

/// `leafid serve` refuses limits out of range, on the command line and from the
/// environment alike, before it starts: an hour's timeout at most (a larger one
/// overflowed adding it to an instant: every connection's task panicked, or SIGTERM
/// did before the worker id was released), at least one connection, a write timeout
/// of at least a second. Before, each started (and ran until killed here).
#[test]
fn serve_refuses_limits_out_of_range_from_flags_and_environment() {
    let huge = u64::MAX.to_string();
    // (flags, environment, the flag the refusal names)
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (vec!["--header-timeout", &huge], vec![], "--header-timeout"),
        (
            vec!["--shutdown-timeout", &huge],
            vec![],
            "--shutdown-timeout",
        ),
        (vec!["--max-connections", "0"], vec![], "--max-connections"),
        (vec!["--write-timeout", "0"], vec![], "--write-timeout"),
        (
            vec!["--response-timeout", "3601"],
            vec![],
            "--response-timeout",
        ),
        (
            vec![],
            vec![("LEAFID_HEADER_TIMEOUT", &huge)],
            "--header-timeout",
        ),
        (
            vec![],
            vec![("LEAFID_MAX_CONNECTIONS", "0")],
            "--max-connections",
        ),
    ];
    for (args, env, flag) in cases {
        let mut child = leafid()
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--snowflake",
                "fixed:905",
            ])
            .args(&args)
            .envs(env.iter().copied())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Generous: a refusal is at once; this only stops a server that started.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                break None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(
            matches!(status, Some(s) if !s.success()),
            "{args:?} {env:?}: started ({status:?}): {err}"
        );
        assert!(err.contains(flag), "{args:?} {env:?}: {err}");
    }
}
