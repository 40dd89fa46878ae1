//! The routes: every path Leaf maps, the `OPTIONS` answer Spring MVC gives on them, and
//! Spring Boot's 404 for the rest.

use axum::extract::OriginalUri;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;

use super::ids::{segment_get, snowflake_get};
use super::monitor::{cache, db, decode};
use super::ops::{health, metrics};
use super::request::Browser;
use super::response::spring_failure;
use super::AppState;

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
