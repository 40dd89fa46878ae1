//! Leaf's HTTP API on axum: the same paths, status codes and bodies as Java Leaf's
//! `LeafController` and `LeafMonitorController` (leaf-spec §5), plus a batch form,
//! `/health` and `/metrics`.
//!
//! Handlers await the core's `_async` calls, which take the ids at call time when they
//! are at hand and otherwise wait (a tag's first use, both segments spent, a registry
//! stall) without holding a thread: no runtime worker ever blocks on the database or
//! ZooKeeper.

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;

use axum::extract::{FromRequestParts, OriginalUri, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use leafid::{Error, SnowflakeGenerator};

use crate::metrics::Metrics;
use crate::pages;
use crate::store::SegmentSlot;

/// What the handlers share: the generators of the enabled modes and the metrics.
#[derive(Clone)]
pub struct AppState {
    /// The segment generator, when segment mode is on (off: ids are `0`, as Leaf's
    /// ZeroIDGen); empty until the store has answered.
    pub segment: Option<SegmentSlot>,
    /// The snowflake generator, when snowflake mode is on.
    pub snowflake: Option<SnowflakeGenerator>,
    /// The metrics `/metrics` serves.
    pub metrics: Arc<Metrics>,
}

/// Every route. Leaf maps its controllers with `@RequestMapping` (any method), so do we;
/// as Spring MVC, each path also matches with a trailing slash (`/cache/`,
/// `/api/segment/get/tagA/`), and `OPTIONS` on a mapped path is answered by the
/// framework (see [`options`]), never by a handler that would consume an id.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/api/segment/get/{key}", any(segment_get))
        .route("/api/segment/get/{key}/", any(segment_get))
        .route("/api/snowflake/get/{key}", any(snowflake_get))
        .route("/api/snowflake/get/{key}/", any(snowflake_get))
        .route("/cache", any(cache))
        .route("/cache/", any(cache))
        .route("/db", any(db))
        .route("/db/", any(db))
        .route("/decodeSnowflakeId", any(decode))
        .route("/decodeSnowflakeId/", any(decode))
        .route_layer(axum::middleware::from_fn(options))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .fallback(not_found)
        .with_state(state)
}

/// Spring MVC's answer to `OPTIONS` on a path any method maps: an empty 200 with
/// `Allow`, before the handler (a CORS preflight must not burn an id). Only on matched
/// routes (a `route_layer`): an unmapped path stays a 404.
async fn options(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    if req.method() == axum::http::Method::OPTIONS {
        return (
            StatusCode::OK,
            [(header::ALLOW, "GET,HEAD,POST,PUT,PATCH,DELETE,OPTIONS")],
        )
            .into_response();
    }
    next.run(req).await
}

/// Spring's JSON answers: `application/json;charset=UTF-8`.
fn json_response(status: StatusCode, body: &serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json;charset=UTF-8")],
        body.to_string(),
    )
        .into_response()
}

/// The `Accept` header's media types, most preferred first (by `q`, then concrete
/// before wildcard, then order), as Spring's content negotiation sorts them.
fn accepted(parts: &Parts) -> Vec<String> {
    let Some(accept) = parts
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
    else {
        return Vec::new();
    };
    let mut types: Vec<(String, u32, bool)> = accept
        .split(',')
        .filter_map(|item| {
            let mut it = item.split(';');
            let media = it.next()?.trim().to_ascii_lowercase();
            if media.is_empty() {
                return None;
            }
            let q = it
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            Some((media.clone(), (q * 1000.0) as u32, media.contains('*')))
        })
        .collect();
    types.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)));
    types.into_iter().map(|(m, _, _)| m).collect()
}

/// The content type Spring gives a `String` answer (the id endpoints): the caller's
/// most preferred concrete type, `text/plain` for `*/*` or none, with `charset=UTF-8`.
struct IdContentType(String);

impl<S: Send + Sync> FromRequestParts<S> for IdContentType {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let media = accepted(parts)
            .into_iter()
            .find(|m| !m.contains('*'))
            .filter(|m| m.split('/').count() == 2 && m.is_ascii())
            .unwrap_or_else(|| "text/plain".into());
        Ok(IdContentType(format!("{media};charset=UTF-8")))
    }
}

/// Whether a JSON answer (a `Map`, `/decodeSnowflakeId`) is acceptable: Spring's
/// converters produce `application/json` and `application/*+json`; anything else
/// the caller names alone is a 406.
struct JsonAcceptable(bool);

impl<S: Send + Sync> FromRequestParts<S> for JsonAcceptable {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let types = accepted(parts);
        let ok = types.is_empty()
            || types.iter().any(|m| {
                m == "*/*"
                    || m == "application/*"
                    || m == "application/json"
                    || (m.starts_with("application/") && m.ends_with("+json"))
            });
        Ok(JsonAcceptable(ok))
    }
}

/// Whether the caller is a browser (`Accept: text/html`): Spring Boot answers those
/// with its Whitelabel HTML page instead of the JSON error body. Reads one header, so
/// the success path pays nothing more.
struct Browser(bool);

impl<S: Send + Sync> FromRequestParts<S> for Browser {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let html = parts
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html"));
        Ok(Browser(html))
    }
}

/// Spring Boot's error answer: its JSON body, or the Whitelabel page for a browser.
fn spring_failure(
    status: StatusCode,
    exception: Option<&str>,
    message: &str,
    path: &str,
    browser: Browser,
) -> Response {
    let error = status.canonical_reason().unwrap_or("Error");
    let body = pages::spring_error(status.as_u16(), error, exception, message, path);
    if browser.0 {
        (
            status,
            [(header::CONTENT_LANGUAGE, "en")],
            html(pages::whitelabel(&body)),
        )
            .into_response()
    } else {
        json_response(status, &body)
    }
}

/// The query of the id endpoints: `?count=N` asks for N ids, one per line.
type Params = Query<HashMap<String, String>>;

async fn segment_get(
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
        Some(n) => gen.next_ids_async(&key, n).await,
    };
    match result {
        Ok(ids) => ids_body(&ids, &ctype),
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

async fn snowflake_get(
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
    let result = gen.next_ids_async(count.unwrap_or(1)).await;
    match result {
        Ok(ids) => ids_body(&ids, &ctype),
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
fn batch_size(params: &HashMap<String, String>) -> Result<Option<usize>, Response> {
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

/// Ids as text: Leaf's single decimal id, or one id per line for a batch, under the
/// content type Spring would give (see [`IdContentType`]).
fn ids_body(ids: &[i64], ctype: &IdContentType) -> Response {
    let body = match ids {
        [id] => id.to_string(),
        ids => {
            let mut out = String::with_capacity(ids.len() * 20);
            for id in ids {
                // Infallible: writing to a String.
                let _ = writeln!(out, "{id}");
            }
            out
        }
    };
    ([(header::CONTENT_TYPE, ctype.0.as_str())], body).into_response()
}

/// Leaf's segment result codes (leaf-spec §1.9).
fn segment_code(e: &Error) -> i64 {
    match e {
        Error::Closed => -1,
        Error::TagNotFound { .. } | Error::InvalidTag { .. } => -2,
        _ => -3,
    }
}

/// Leaf's snowflake result codes (leaf-spec §2.3), and -4 when the worker id's
/// registry stops issuing (leafid's lease; leaf-spec §8).
fn snowflake_code(e: &Error) -> i64 {
    match e {
        Error::Closed => -1,
        Error::ClockMovedBackwards { .. } | Error::TimestampOverflow { .. } => -3,
        _ => -4,
    }
}

/// Leaf's failure: HTTP 500 with Spring Boot's error body whose message is
/// `Result{id=-N, status=EXCEPTION}`.
fn leaf_failure(
    metrics: &Metrics,
    mode: &'static str,
    code: i64,
    e: &Error,
    path: &str,
    browser: Browser,
) -> Response {
    metrics.error(mode, code, e.name());
    tracing::debug!(mode, code, error = %e, path, "id request failed");
    spring_failure(
        StatusCode::INTERNAL_SERVER_ERROR,
        Some("com.sankuai.inf.leaf.server.exception.LeafServerException"),
        &format!("Result{{id={code}, status=EXCEPTION}}"),
        path,
        browser,
    )
}

/// Leaf's -1 ("not initialised") while the store that was down at start is retried.
fn not_connected(metrics: &Metrics, slot: &SegmentSlot, path: &str, browser: Browser) -> Response {
    let cause = slot.waiting_on().unwrap_or_default();
    let e = Error::StoreUnavailable {
        cause,
        source: None,
    };
    leaf_failure(metrics, "segment", -1, &e, path, browser)
}

/// The id request of a disabled mode. A single id is Leaf's `0` (its ZeroIDGen, HTTP
/// 200, recorded from Java Leaf). A batch (`?count=N`, leafid's own form, with no Leaf
/// answer to keep) is an error, never N equal zeros in a successful answer: Leaf's own
/// answer for a disabled mode's other pages (see [`mode_disabled`]).
fn zero_id(
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

/// Leaf's answer on a monitor page when segment mode is off: a 500 from
/// `IllegalArgumentException`.
fn segment_disabled(path: &str, browser: Browser) -> Response {
    mode_disabled("segment", path, browser)
}

/// Leaf's answer for a page of a mode that is off (`leaf.{mode}.enable=false`): a 500
/// from `IllegalArgumentException` naming the property to set.
fn mode_disabled(mode: &str, path: &str, browser: Browser) -> Response {
    spring_failure(
        StatusCode::INTERNAL_SERVER_ERROR,
        Some("java.lang.IllegalArgumentException"),
        &format!("You should config leaf.{mode}.enable=true first"),
        path,
        browser,
    )
}

fn html(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html;charset=UTF-8")], body).into_response()
}

async fn cache(
    State(s): State<AppState>,
    OriginalUri(uri): OriginalUri,
    browser: Browser,
) -> Response {
    match &s.segment {
        // Not connected yet: no tag is loaded, as on Leaf's page before init.
        Some(slot) => html(pages::cache(
            &slot.get().map(|g| g.stats()).unwrap_or_default(),
        )),
        None => segment_disabled(uri.path(), browser),
    }
}

async fn db(
    State(s): State<AppState>,
    OriginalUri(uri): OriginalUri,
    browser: Browser,
) -> Response {
    let Some(slot) = &s.segment else {
        return segment_disabled(uri.path(), browser);
    };
    let Some(gen) = slot.get() else {
        // As a failed read of the table: a monitor page, not a failed id request.
        let why = slot.waiting_on().unwrap_or_default();
        return spring_failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            &why,
            uri.path(),
            browser,
        );
    };
    match gen.rows().await {
        Ok(rows) => html(pages::db(&rows)),
        Err(e) => spring_failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            None,
            &e.to_string(),
            uri.path(),
            browser,
        ),
    }
}

async fn decode(
    Query(params): Params,
    OriginalUri(uri): OriginalUri,
    browser: Browser,
    json_ok: JsonAcceptable,
) -> Response {
    match params.get("snowflakeId") {
        // Spring's answer when the caller accepts no JSON (`Accept: text/html` alone).
        Some(_) if !json_ok.0 => spring_failure(
            StatusCode::NOT_ACCEPTABLE,
            Some("org.springframework.web.HttpMediaTypeNotAcceptableException"),
            "Could not find acceptable representation",
            uri.path(),
            browser,
        ),
        Some(raw) => json_response(StatusCode::OK, &pages::decode(raw)),
        // Spring's answer to a missing required @RequestParam.
        None => spring_failure(
            StatusCode::BAD_REQUEST,
            Some("org.springframework.web.bind.MissingServletRequestParameterException"),
            "Required String parameter 'snowflakeId' is not present",
            uri.path(),
            browser,
        ),
    }
}

/// 200 `UP` when every enabled mode can issue; 503 `DOWN` with the reason while the
/// segment store that was down at start is still being retried (so a load balancer
/// sends callers elsewhere meanwhile).
async fn health(State(s): State<AppState>) -> Response {
    let waiting_on = s.segment.as_ref().and_then(|slot| slot.waiting_on());
    let status = if waiting_on.is_some() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let body = serde_json::json!({
        "status": if waiting_on.is_some() { "DOWN" } else { "UP" },
        "segment": s.segment.is_some(),
        // Only with segment mode on: "connected", or the store error being retried.
        "segmentStore": s.segment.as_ref().map(|_| match &waiting_on {
            None => serde_json::json!("connected"),
            Some(why) => serde_json::json!({ "waitingOn": why }),
        }),
        "snowflake": s.snowflake.as_ref().map(|g| serde_json::json!({ "workerId": g.worker_id() })),
    });
    json_response(status, &body)
}

async fn metrics(State(s): State<AppState>) -> Response {
    match s.metrics.render() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// Spring Boot's 404 for paths it does not map (an empty key, `/api/segment/get/`, lands
/// here, as in Leaf).
async fn not_found(OriginalUri(uri): OriginalUri, browser: Browser) -> Response {
    spring_failure(
        StatusCode::NOT_FOUND,
        None,
        "No message available",
        uri.path(),
        browser,
    )
}
