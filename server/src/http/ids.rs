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
use super::response::{leaf_failure, mode_disabled, not_connected, segment_code, snowflake_code};
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
        return not_connected(&s.metrics, slot, uri.path(), browser);
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
    let Some(gen) = &s.snowflake else {
        return zero_id(count, "snowflake", uri.path(), browser, &ctype);
    };
    // As for segment ids: at call time when at hand, else waited for by the core.
    let result = gen
        .next_ids_async(count.unwrap_or(1).min(STREAM_CHUNK))
        .await;
    match result {
        Ok(ids) => {
            // One generator's words only rise, so each chunk is above the one before.
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
