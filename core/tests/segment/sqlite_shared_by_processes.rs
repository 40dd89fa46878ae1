//! Several processes on one host share one SQLite file (the embedded default) and
//! never issue the same id. The test binary re-runs itself as the worker processes.

use crate::support::self_exec::test_name;
use std::collections::HashSet;
use std::process::Command;

const IDS_PER_PROCESS: usize = 50_000;

/// The worker: runs only when the parent test starts this binary with the variables set.
#[test]
fn child_worker() {
    let (Ok(db), Ok(out)) = (
        std::env::var("LEAFID_CHILD_DB"),
        std::env::var("LEAFID_CHILD_OUT"),
    ) else {
        return;
    };
    let gen =
        leafid::SegmentGenerator::connect_blocking(&format!("sqlite://{db}"), Default::default())
            .unwrap();
    let h = gen.tag("shared").unwrap();
    let mut ids = Vec::with_capacity(IDS_PER_PROCESS);
    while ids.len() < IDS_PER_PROCESS {
        if ids.len() % 1000 == 0 {
            ids.extend(h.next_ids(10).unwrap());
        } else {
            ids.push(h.next_id().unwrap());
        }
    }
    let text: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    std::fs::write(out, text.join("\n")).unwrap();
}

#[test]
fn processes_sharing_a_sqlite_file_never_share_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ids.db");
    let url = format!("sqlite://{}", db.display());
    let gen = leafid::SegmentGenerator::connect_blocking(&url, Default::default()).unwrap();
    let g = gen.clone();
    // A small step forces hundreds of concurrent allocations on the file.
    leafid::runtime::block_on(async move { g.create_tag("shared", 1, 100, "").await }).unwrap();
    gen.close();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..4)
        .map(|i| {
            let out = dir.path().join(format!("out-{i}.txt"));
            let child = Command::new(&exe)
                .args([
                    "--exact",
                    test_name(module_path!(), "child_worker").as_str(),
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("LEAFID_CHILD_DB", &db)
                .env("LEAFID_CHILD_OUT", &out)
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            (child, out)
        })
        .collect();
    let mut all = HashSet::new();
    for (mut child, out) in children {
        assert!(child.wait().unwrap().success(), "a worker process failed");
        let text = std::fs::read_to_string(out).unwrap();
        let ids: Vec<i64> = text.lines().map(|l| l.parse().unwrap()).collect();
        assert_eq!(ids.len(), IDS_PER_PROCESS);
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "increasing per process"
        );
        for id in ids {
            assert!(all.insert(id), "id {id} issued by two processes");
        }
    }
}
