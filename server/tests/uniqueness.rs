//! Ids from concurrent HTTP callers of `leafid serve` and from an in-process core
//! generator on the same `leaf_alloc` row never collide.

mod support;

use std::collections::HashSet;

use support::{create_tag, fresh, mysql_url, Server};

#[test]
fn http_callers_and_an_in_process_generator_share_a_tag_without_duplicates() {
    let tag = fresh("srv_uniq");
    // A small step: many refills on both sides, so their segments interleave.
    create_tag(&tag, 20);
    let server = Server::start(&["--url", &mysql_url()]);
    let url = format!("{}/api/segment/get/{tag}", server.base);

    let local =
        leafid::SegmentGenerator::connect_blocking(&mysql_url(), Default::default()).unwrap();
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let url = url.clone();
            std::thread::spawn(move || {
                let mut ids = Vec::new();
                for i in 0..150 {
                    // Single ids and batches, as Leaf's callers and batch users ask.
                    let suffix = if i % 10 == 0 { "?count=7" } else { "" };
                    let (status, _, body) = support::get(&format!("{url}{suffix}"));
                    assert_eq!(status, 200, "{body}");
                    ids.extend(body.lines().map(|l| l.parse::<i64>().unwrap()));
                }
                ids
            })
        })
        .collect();
    let mut all: Vec<i64> = Vec::new();
    for _ in 0..600 {
        all.push(local.next_id(&tag).unwrap());
    }
    for t in threads {
        all.extend(t.join().unwrap());
    }
    local.close();
    let expected = 600 + 4 * (135 + 15 * 7);
    assert_eq!(all.len(), expected);
    let distinct: HashSet<i64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "duplicate ids");
}
