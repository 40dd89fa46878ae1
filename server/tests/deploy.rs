//! deploy/: the systemd unit passes `systemd-analyze verify` (with ExecStart pointed at
//! the binary just built) and has the lines an operator relies on; the Dockerfile is
//! checked line by line (hadolint is not in Debian and no Docker engine runs in the
//! test environment, so the image is not built here).

use std::path::PathBuf;
use std::process::Command;

fn deploy(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The directive lines (`Key=value`, `INSTR args`), comments and blanks dropped.
fn directives(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

#[test]
fn systemd_unit_verifies_and_runs_unprivileged_with_its_state_and_env_file() {
    let unit = deploy("leafid.service");
    let lines = directives(&unit);
    for want in [
        "DynamicUser=yes",
        "StateDirectory=leafid",
        "Restart=on-failure",
        "EnvironmentFile=/etc/leafid/leafid.env",
        "ExecStart=/usr/local/bin/leafid serve",
        // Above the 1 024 a service starts with, which ~1 000 idle clients exhaust.
        "LimitNOFILE=65536",
    ] {
        assert!(lines.iter().any(|l| l == want), "{want} missing");
    }
    assert!(!lines.iter().any(|l| l == "User=root"));
    // The stop timeout covers a stop's three waits: requests finishing
    // (--shutdown-timeout, 10 s), the release, and on Leaf's layouts the clock passing
    // the last id, which a new worker id's ids lead by up to the reach.
    let stop: u64 = lines
        .iter()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .and_then(|v| v.strip_suffix('s'))
        .expect("TimeoutStopSec=Ns")
        .parse()
        .unwrap();
    use leafid::snowflake::{DEFAULT_CLOSE_WAIT, DEFAULT_LOOKAHEAD, DEFAULT_MAX_SKEW};
    let needed = std::time::Duration::from_secs(10 + 1)
        + DEFAULT_CLOSE_WAIT
        + DEFAULT_LOOKAHEAD
        + DEFAULT_MAX_SKEW;
    assert!(
        stop >= needed.as_secs(),
        "TimeoutStopSec={stop}s < {needed:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("leafid.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/bin/leafid", env!("CARGO_BIN_EXE_leafid")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .expect("systemd-analyze (Debian's systemd package: apt-get install -y systemd)");
    let err = String::from_utf8_lossy(&out.stderr);
    // The only complaint allowed is about this machine, not the unit: the env file
    // an operator writes is not here.
    let complaints: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.contains("leafid.env"))
        .collect();
    assert!(out.status.success() && complaints.is_empty(), "{err}");
}

/// Issue 31: the README installs the binary where the unit runs it, both ways: the
/// release's prebuilt binary (`install -m 755 … /usr/local/bin/leafid`, of this
/// version's tarball) and `cargo install`. A plain `cargo install` puts it in
/// `~/.cargo/bin`, which `ProtectHome=yes` hides from the service even when ExecStart
/// is pointed there.
#[test]
fn the_readme_installs_the_binary_where_the_unit_runs_it() {
    let unit = deploy("leafid.service");
    let exec = directives(&unit)
        .into_iter()
        .find_map(|l| l.strip_prefix("ExecStart=").map(str::to_string))
        .expect("ExecStart");
    let binary = exec.split_whitespace().next().unwrap().to_string();
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let lines: Vec<&str> = readme.lines().map(str::trim_start).collect();

    let cargo: Vec<&&str> = lines
        .iter()
        .filter(|l| l.starts_with("cargo install"))
        .collect();
    assert!(
        !cargo.is_empty(),
        "no cargo install line in server/README.md"
    );
    for line in cargo {
        let root = line
            .split_whitespace()
            .skip_while(|w| *w != "--root")
            .nth(1)
            .unwrap_or_else(|| {
                panic!("{line:?} installs into ~/.cargo/bin, the unit runs {binary}")
            });
        assert_eq!(format!("{root}/bin/leafid"), binary, "{line}");
    }

    // The prebuilt binary: the version set is this one (scripts/build-binary.sh names
    // the tarball after it), and the install line puts it where the unit runs it.
    let version = lines
        .iter()
        .find_map(|l| l.strip_prefix("v="))
        .and_then(|v| v.split_whitespace().next())
        .expect("a v=VERSION line before the prebuilt binary's install");
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    let install = lines
        .iter()
        .find(|l| l.contains("install -m 755") && l.contains("x86_64-linux-gnu/leafid"))
        .expect("an install line for the prebuilt binary");
    assert_eq!(
        install.split_whitespace().last(),
        Some(binary.as_str()),
        "{install}"
    );
}

#[test]
fn dockerfile_is_multi_stage_non_root_and_listens_on_every_interface() {
    let lines = directives(&deploy("Dockerfile"));
    let from: Vec<&String> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(from.len(), 2, "a build stage and a run stage: {from:?}");
    assert!(from[0].ends_with(" AS build"), "{}", from[0]);
    // The build image carries the crate's MSRV at least.
    let msrv =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"))
            .unwrap()
            .lines()
            .find_map(|l| {
                l.strip_prefix("rust-version = ")
                    .map(|v| v.trim_matches('"').to_string())
            })
            .unwrap();
    assert!(
        from[0].contains(&format!("rust:{msrv}")),
        "{} vs MSRV {msrv}",
        from[0]
    );
    assert!(lines.iter().any(|l| l.starts_with("COPY --from=build ")));
    let user = lines
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert!(user != "root" && user != "0", "USER {user}");
    let expose = lines
        .iter()
        .find_map(|l| l.strip_prefix("EXPOSE "))
        .expect("an EXPOSE line");
    // LEAFID_LISTEN on every interface, on the exposed port.
    let joined = lines.join("\n");
    assert!(
        joined.contains(&format!("LEAFID_LISTEN=0.0.0.0:{expose}")),
        "LEAFID_LISTEN=0.0.0.0:{expose} missing"
    );
    let entry = lines
        .iter()
        .find_map(|l| l.strip_prefix("ENTRYPOINT "))
        .expect("an ENTRYPOINT");
    assert!(
        entry.starts_with('['),
        "exec form, so SIGTERM reaches leafid: {entry}"
    );
    // The last stage runs after the USER line (nothing re-enables root).
    let user_at = lines.iter().rposition(|l| l.starts_with("USER ")).unwrap();
    let from_at = lines.iter().rposition(|l| l.starts_with("FROM ")).unwrap();
    assert!(user_at > from_at);
}
