//! Leaf's monitor pages (`LeafMonitorController`): `/cache` (the tags loaded), `/db`
//! (the `leaf_alloc` rows) and `/decodeSnowflakeId`.

use axum::extract::{OriginalUri, Query, State};
use axum::http::StatusCode;
use axum::response::Response;

use super::request::{Browser, JsonAcceptable, Params};
use super::response::{html, json_response, segment_disabled, spring_failure};
use super::AppState;
use crate::pages;

pub(super) async fn cache(
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

pub(super) async fn db(
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

pub(super) async fn decode(
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
