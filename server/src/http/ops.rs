//! leafid's own endpoints for operators: `/health` for load balancers and `/metrics`
//! for Prometheus. Not in Leaf; apart from its pages so that those stay Leaf's.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::response::json_response;
use super::AppState;

/// 200 `UP` when every enabled mode can issue; 503 `DOWN` with the reason while the
/// segment store that was down at start is still being retried (so a load balancer
/// sends callers elsewhere meanwhile).
pub(super) async fn health(State(s): State<AppState>) -> Response {
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

pub(super) async fn metrics(State(s): State<AppState>) -> Response {
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
