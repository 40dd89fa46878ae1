//! The id endpoints, `/api/segment/get/{key}` and `/api/snowflake/get/{key}`: Leaf's
//! single id as text, leafid's `?count=N` batch one id per line, and `0` for a mode that
//! is off (Leaf's ZeroIDGen).
//!
//! A batch larger than [`STREAM_CHUNK`] is streamed: its first chunk of ids is taken
//! before the answer starts (so a failure is still Leaf's answer), the next ones only
//! as the client reads. What a connection holds is then a chunk and hyper's write
//! buffer, never a whole 1 048 576-id answer (about 20 MB) for a client that does not
//! read; and ids are not taken for an answer nobody reads.
//!
//! Only over HTTP/1.1, whose chunked encoding ends with a last chunk: an answer cut
//! midway (a failed chunk, the response timeout, shutdown) lacks it, and the client
//! sees an error. HTTP/1.0 (nginx's default `proxy_http_version`) ends a streamed body
//! by closing the connection, so a cut answer would look whole, its last line maybe a
//! cut id that still parses. An HTTP/1.0 request is answered in full with a
//! `Content-Length` up to [`STREAM_CHUNK`] ids and refused (505) above.

use std::collections::HashMap;
use std::fmt::Write;
use std::future::Future;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{header, StatusCode, Version};
use axum::response::{IntoResponse, Response};

use super::request::{Browser, IdContentType, Params};
use super::response::{leaf_failure, mode_disabled, not_ready, segment_code, snowflake_code};
use super::AppState;
use crate::metrics::Metrics;

/// Ids per chunk of a streamed batch: about 80 KB of text, small enough that memory
/// stays bounded per connection, large enough that each chunk is one call to the core.
pub(super) const STREAM_CHUNK: usize = 4096;

pub(super) async fn segment_get(
    State(s): State<AppState>,
    Path(key): Path<String>,
    Query(params): Params,
    OriginalUri(uri): OriginalUri,
    browser: Browser,
    ctype: IdContentType,
    version: Version,
) -> Response {
    let count = match batch_size(&params) {
        Ok(count) => count,
        Err(resp) => return resp,
    };
    if let Some(refused) = not_streamable(count, version) {
        return refused;
    }
    let Some(slot) = &s.segment else {
        return zero_id(count, "segment", uri.path(), browser, &ctype);
    };
    let Some(gen) = slot.get() else {
        return not_ready(&s.metrics, "segment", slot, uri.path(), browser);
    };
    // The core takes at call time when the ids are at hand and otherwise waits (a first
    // load, a refill, a tag made by another process) without holding a thread.
    let result = match count {
        None => gen.next_id_async(&key).await.map(|id| vec![id]),
        Some(n) => gen.next_ids_async(&key, n.min(STREAM_CHUNK)).await,
    };
    match result {
        Ok(ids) => {
            // The later chunks from the tag's shared cursor: each chunk runs on whichever
            // worker thread polls the stream, and a call served from that thread's chunk
            // (`--thread-chunk`) may lie below the first chunk's ids.
            let gen = gen.clone();
            let rest = move |n| gen.next_ids_ordered_async(&key, n);
            batch(ids, count, &ctype, s.metrics.clone(), "segment", rest)
        }
        Err(e) => leaf_failure(
            &s.metrics,
            "segment",
            segment_code(&e),
            &e,
            uri.path(),
            browser,
        ),
    }
}

pub(super) async fn snowflake_get(
    State(s): State<AppState>,
    // Leaf requires the key but ignores it.
    Path(_key): Path<String>,
    Query(params): Params,
    OriginalUri(uri): OriginalUri,
    browser: Browser,
    ctype: IdContentType,
    version: Version,
) -> Response {
    let count = match batch_size(&params) {
        Ok(count) => count,
        Err(resp) => return resp,
    };
    if let Some(refused) = not_streamable(count, version) {
        return refused;
    }
    let Some(slot) = &s.snowflake else {
        return zero_id(count, "snowflake", uri.path(), browser, &ctype);
    };
    let Some(gen) = slot.get() else {
        return not_ready(&s.metrics, "snowflake", slot, uri.path(), browser);
    };
    // Never waiting on the registry, as Java Leaf: when the generator cannot issue, the
    // core starts what would let it (a persist, a re-acquire) in the background and this
    // request gets Leaf's error now, not after the core's 10 s async wait. Only CPU
    // waits remain: a 4096-id chunk spans two milliseconds of the sequence, spun out.
    let result = match count {
        None => gen.next_id_now().map(|id| vec![id]),
        Some(n) => gen.next_ids_now(n.min(STREAM_CHUNK)),
    };
    match result {
        Ok(ids) => {
            // The answer has begun: later chunks are taken as the client reads, awaiting
            // spent milliseconds on timers rather than spinning a thread (a 1 048 576-id
            // batch spans 340 ms). One generator's words only rise, so each chunk is above
            // the one before.
            let gen = gen.clone();
            let rest = move |n| gen.next_ids_async(n);
            batch(ids, count, &ctype, s.metrics.clone(), "snowflake", rest)
        }
        Err(e) => leaf_failure(
            &s.metrics,
            "snowflake",
            snowflake_code(&e),
            &e,
            uri.path(),
            browser,
        ),
    }
}

/// `?count=N`: `None` without it; 1..=`leafid::limits::MAX_BATCH`, else a 400.
#[allow(clippy::result_large_err)] // the error is the response itself
pub(super) fn batch_size(params: &HashMap<String, String>) -> Result<Option<usize>, Response> {
    let Some(raw) = params.get("count") else {
        return Ok(None);
    };
    let bad = |why: String| {
        let msg = format!(
            "count={raw:?}: {why}; ask for 1 to {} ids",
            leafid::limits::MAX_BATCH
        );
        (StatusCode::BAD_REQUEST, msg).into_response()
    };
    let n: u64 = raw
        .parse()
        .map_err(|_| bad("not a positive integer".into()))?;
    if n == 0 {
        return Err(bad("zero ids".into()));
    }
    leafid::limits::batch(n)
        .map(Some)
        .map_err(|e| bad(e.to_string()))
}

/// The refusal of a batch that would be streamed (over [`STREAM_CHUNK`] ids) to an
/// HTTP/1.0 client: a 505, before any id is taken.
fn not_streamable(count: Option<usize>, version: Version) -> Option<Response> {
    let n = count.filter(|&n| n > STREAM_CHUNK && version < Version::HTTP_11)?;
    let msg = format!(
        "count={n}: a batch over {STREAM_CHUNK} ids is streamed, which needs HTTP/1.1 \
         (over {version:?} a cut answer would look complete); ask over HTTP/1.1 \
         (nginx: proxy_http_version 1.1), or for at most {STREAM_CHUNK} ids a request"
    );
    Some((StatusCode::HTTP_VERSION_NOT_SUPPORTED, msg).into_response())
}

/// The answer to an id request whose first `first.len()` ids are taken: all of it, or
/// (for a batch larger than [`STREAM_CHUNK`]) a stream whose later chunks `take` takes
/// as the client reads. `take` must give each chunk above the one before (checked in
/// debug builds): the ids of one answer strictly increase. A failure midway ends the answer without its last chunk
/// (an incomplete chunked body the client sees as an error, never a short batch).
fn batch<F, Fut>(
    first: Vec<i64>,
    count: Option<usize>,
    ctype: &IdContentType,
    metrics: Arc<Metrics>,
    mode: &'static str,
    mut take: F,
) -> Response
where
    F: FnMut(usize) -> Fut + Send + 'static,
    Fut: Future<Output = leafid::Result<Vec<i64>>> + Send + 'static,
{
    let left = count.unwrap_or(1).saturating_sub(first.len());
    if left == 0 {
        return ids_body(&first, ctype);
    }
    use futures_util::StreamExt;
    let head = futures_util::stream::once(std::future::ready(Ok(lines(&first))));
    let last = first.last().copied().unwrap_or(i64::MIN);
    let rest = futures_util::stream::unfold((left, last), move |(left, last)| {
        let next = (left > 0).then(|| (left.min(STREAM_CHUNK), take(left.min(STREAM_CHUNK))));
        let metrics = metrics.clone();
        async move {
            let (n, ids) = next?;
            match ids.await {
                Ok(ids) => {
                    debug_assert!(
                        ids.first() > Some(&last) && ids.windows(2).all(|w| w[0] < w[1]),
                        "a streamed {mode} chunk not above the one before"
                    );
                    let last = *ids.last().unwrap_or(&last);
                    Some((Ok(lines(&ids)), (left - n, last)))
                }
                Err(e) => {
                    metrics.error(mode, -3, e.name());
                    tracing::warn!(mode, error = %e, "a streamed batch failed midway; its answer ends incomplete");
                    Some((Err(e), (0, last)))
                }
            }
        }
    });
    (
        [(header::CONTENT_TYPE, ctype.0.as_str())],
        Body::from_stream(head.chain(rest)),
    )
        .into_response()
}

/// Ids one per line.
fn lines(ids: &[i64]) -> String {
    let mut out = String::with_capacity(ids.len() * 20);
    for id in ids {
        // Infallible: writing to a String.
        let _ = writeln!(out, "{id}");
    }
    out
}

/// Ids as text: Leaf's single decimal id, or one id per line for a batch, under the
/// content type Spring would give (see [`IdContentType`]).
pub(super) fn ids_body(ids: &[i64], ctype: &IdContentType) -> Response {
    let body = match ids {
        [id] => id.to_string(),
        ids => lines(ids),
    };
    ([(header::CONTENT_TYPE, ctype.0.as_str())], body).into_response()
}

/// The id request of a disabled mode. A single id is Leaf's `0` (its ZeroIDGen, HTTP
/// 200, recorded from Java Leaf). A batch (`?count=N`, leafid's own form, with no Leaf
/// answer to keep) is an error, never N equal zeros in a successful answer: Leaf's own
/// answer for a disabled mode's other pages (see [`mode_disabled`]).
pub(super) fn zero_id(
    count: Option<usize>,
    mode: &str,
    path: &str,
    browser: Browser,
    ctype: &IdContentType,
) -> Response {
    match count {
        None => ids_body(&[0], ctype),
        Some(_) => mode_disabled(mode, path, browser),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    use super::super::{router, AppState};
    use crate::delay_proxy::DelayProxy;
    use crate::metrics::Metrics;

    /// Issue 30: a generator cut off from its registry past its bound cannot issue; the
    /// request gets Leaf's -4 at once, as Java Leaf answers, not after the 10 s a
    /// waiting call takes. The real ZooKeeper, refused by a loopback proxy.
    #[test]
    fn a_snowflake_request_the_generator_cannot_answer_gets_leafs_error_at_once() {
        let zk = std::env::var("LEAFID_ZK").expect("LEAFID_ZK: source .services/env");
        let proxy = DelayProxy::start(zk);
        let name = format!("srvnow_{}", std::process::id());
        let url = format!("zookeeper-recycle://{}/{name}", proxy.addr);
        // A short bound, so the generator stops within a second of the outage.
        let gen = leafid::SnowflakeGenerator::builder()
            .registry_url(&url)
            .unwrap()
            .heartbeat(Duration::from_millis(200))
            .lookahead(Duration::from_secs(1))
            .build_blocking()
            .unwrap();
        let app = router(AppState {
            segment: None,
            snowflake: Some(crate::snowflake::SnowflakeSlot::ready(gen.clone())),
            metrics: std::sync::Arc::new(Metrics::new()),
        });
        let get = |path: &str| {
            let req = Request::get(path).body(Body::empty()).unwrap();
            let resp = leafid::runtime::block_on(app.clone().oneshot(req)).unwrap();
            let status = resp.status().as_u16();
            let body =
                leafid::runtime::block_on(axum::body::to_bytes(resp.into_body(), 1 << 20)).unwrap();
            (status, String::from_utf8_lossy(&body).into_owned())
        };
        assert_eq!(get("/api/snowflake/get/x").0, 200);
        proxy.set_down(true);
        let start = Instant::now();
        let held = || gen.stats().lease == leafid::snowflake::LeaseStatus::Held;
        while held() && start.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!held(), "still issuing 30 s into the outage");
        let asked = Instant::now();
        let (status, body) = get("/api/snowflake/get/x");
        let took = asked.elapsed();
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("Result{id=-4, status=EXCEPTION}"), "{body}");
        // Catches the 10 s wait (MAX_ASYNC_WAIT), with room for a slow machine.
        assert!(took < Duration::from_secs(2), "Leaf's error after {took:?}");
        eprintln!("Leaf's -4 after {took:?}");
        let (status, health) = get("/health");
        assert_eq!(status, 503, "{health}");
        assert!(
            health.contains("waitingOn") && !health.contains("\"held\""),
            "{health}"
        );
        gen.close_within(Duration::ZERO);
    }
}
