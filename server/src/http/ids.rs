//! The id endpoints, `/api/segment/get/{key}` and `/api/snowflake/get/{key}`: Leaf's
//! single id as text, leafid's `?count=N` batch one id per line, and `0` for a mode that
//! is off (Leaf's ZeroIDGen).
//!
//! A batch larger than [`STREAM_CHUNK`] is streamed: its first chunk of ids is taken
//! before the answer starts (so a failure is still Leaf's answer), the next ones only
//! as the client reads. What a connection holds is then a chunk and hyper's write
//! buffer, never a whole 1 048 576-id answer (about 20 MB) for a client that does not
//! read; and ids are not taken for an answer nobody reads.

use std::collections::HashMap;
use std::fmt::Write;
use std::future::Future;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{header, StatusCode};
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
) -> Response {
    let count = match batch_size(&params) {
        Ok(count) => count,
        Err(resp) => return resp,
    };
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
            let gen = gen.clone();
            let rest = move |n| gen.next_ids_async(&key, n);
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
) -> Response {
    let count = match batch_size(&params) {
        Ok(count) => count,
        Err(resp) => return resp,
    };
    let Some(gen) = &s.snowflake else {
        return zero_id(count, "snowflake", uri.path(), browser, &ctype);
    };
    // As for segment ids: at call time when at hand, else waited for by the core.
    let result = gen
        .next_ids_async(count.unwrap_or(1).min(STREAM_CHUNK))
        .await;
    match result {
        Ok(ids) => {
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

/// The answer to an id request whose first `first.len()` ids are taken: all of it, or
/// (for a batch larger than [`STREAM_CHUNK`]) a stream whose later chunks `take` takes
/// as the client reads. Each chunk follows the one before from the same generator, so
/// the ids still increase; a failure midway ends the answer without its last chunk
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
    let rest = futures_util::stream::unfold(left, move |left| {
        let next = (left > 0).then(|| (left.min(STREAM_CHUNK), take(left.min(STREAM_CHUNK))));
        let metrics = metrics.clone();
        async move {
            let (n, ids) = next?;
            match ids.await {
                Ok(ids) => Some((Ok(lines(&ids)), left - n)),
                Err(e) => {
                    metrics.error(mode, -3, e.name());
                    tracing::warn!(mode, error = %e, "a streamed batch failed midway; its answer ends incomplete");
                    Some((Err(e), 0))
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
