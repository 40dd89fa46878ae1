//! What a handler writes back: Spring's JSON and HTML answers, Spring Boot's error body
//! (or its Whitelabel page for a browser), and Leaf's failures with their result codes
//! (leaf-spec §1.9, §2.3), counted in the metrics.

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use leafid::Error;

use super::request::Browser;
use crate::metrics::Metrics;
use crate::pages;
use crate::pending::Pending;

/// Spring's JSON answers: `application/json;charset=UTF-8`.
pub(super) fn json_response(status: StatusCode, body: &serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json;charset=UTF-8")],
        body.to_string(),
    )
        .into_response()
}

/// Spring Boot's error answer: its JSON body, or the Whitelabel page for a browser.
pub(super) fn spring_failure(
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

/// Leaf's segment result codes (leaf-spec §1.9).
pub(super) fn segment_code(e: &Error) -> i64 {
    match e {
        Error::Closed => -1,
        Error::TagNotFound { .. } | Error::InvalidTag { .. } => -2,
        _ => -3,
    }
}

/// Leaf's snowflake result codes (leaf-spec §2.3), and -4 when the worker id's
/// registry stops issuing (leafid's lease; leaf-spec §8).
pub(super) fn snowflake_code(e: &Error) -> i64 {
    match e {
        Error::Closed => -1,
        Error::ClockMovedBackwards { .. } | Error::TimestampOverflow { .. } => -3,
        _ => -4,
    }
}

/// Leaf's failure: HTTP 500 with Spring Boot's error body whose message is
/// `Result{id=-N, status=EXCEPTION}`.
pub(super) fn leaf_failure(
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

/// Leaf's answer while a mode's generator is still being made (`pending.rs`): segment
/// -1 ("not initialised") while the store is retried, snowflake -4 (the registry's
/// code) while the worker id is.
pub(super) fn not_ready<G>(
    metrics: &Metrics,
    mode: &'static str,
    slot: &Pending<G>,
    path: &str,
    browser: Browser,
) -> Response {
    let cause = slot.waiting_on().unwrap_or_default();
    let (code, e) = if mode == "segment" {
        let e = Error::StoreUnavailable {
            cause,
            source: None,
        };
        (-1, e)
    } else {
        let e = Error::RegistryUnavailable {
            cause,
            source: None,
        };
        (snowflake_code(&e), e)
    };
    leaf_failure(metrics, mode, code, &e, path, browser)
}

/// Leaf's answer on a monitor page when segment mode is off: a 500 from
/// `IllegalArgumentException`.
pub(super) fn segment_disabled(path: &str, browser: Browser) -> Response {
    mode_disabled("segment", path, browser)
}

/// Leaf's answer for a page of a mode that is off (`leaf.{mode}.enable=false`): a 500
/// from `IllegalArgumentException` naming the property to set.
pub(super) fn mode_disabled(mode: &str, path: &str, browser: Browser) -> Response {
    spring_failure(
        StatusCode::INTERNAL_SERVER_ERROR,
        Some("java.lang.IllegalArgumentException"),
        &format!("You should config leaf.{mode}.enable=true first"),
        path,
        browser,
    )
}

pub(super) fn html(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html;charset=UTF-8")], body).into_response()
}
