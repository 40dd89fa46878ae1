//! leafid's own endpoints for operators: `/health` for load balancers and `/metrics`
//! for Prometheus. Not in Leaf; apart from its pages so that those stay Leaf's.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use leafid::LeaseStatus;

use super::response::json_response;
use super::AppState;
use crate::snowflake::SnowflakeSlot;

/// 200 `UP` when every enabled mode can issue; 503 `DOWN` otherwise, with the reason,
/// so a load balancer or a readiness probe sends callers elsewhere meanwhile: while the
/// segment store that was down at start is retried, while the snowflake worker id is
/// being acquired (its registry down at start, the identity still held), and while a
/// snowflake generator cannot issue (out of touch with its registry past its bound, its
/// lease lost and being re-acquired). Never waits: it reads what the generators know.
pub(super) async fn health(State(s): State<AppState>) -> Response {
    let store_waiting_on = s.segment.as_ref().and_then(|slot| slot.waiting_on());
    let snowflake = s.snowflake.as_ref().map(snowflake_health);
    let down = store_waiting_on.is_some() || snowflake.as_ref().is_some_and(|(up, _)| !up);
    let status = if down {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    let body = serde_json::json!({
        "status": if down { "DOWN" } else { "UP" },
        "segment": s.segment.is_some(),
        // Only with segment mode on: "connected", or the store error being retried.
        "segmentStore": s.segment.as_ref().map(|_| match &store_waiting_on {
            None => serde_json::json!("connected"),
            Some(why) => serde_json::json!({ "waitingOn": why }),
        }),
        "snowflake": snowflake.map(|(_, v)| v),
    });
    json_response(status, &body)
}

/// Whether snowflake mode can issue now, and what `/health` shows of it: `workerId` and
/// `lease` (`held` when issuing) once a worker id is held, `waitingOn` whenever it
/// cannot issue.
fn snowflake_health(slot: &SnowflakeSlot) -> (bool, serde_json::Value) {
    let Some(gen) = slot.get() else {
        let why = slot.waiting_on().unwrap_or_default();
        return (
            false,
            serde_json::json!({ "lease": "acquiring", "waitingOn": why }),
        );
    };
    let stats = gen.stats();
    let mut v = serde_json::json!({
        "workerId": stats.worker_id,
        "lease": stats.lease.as_str(),
    });
    let why = match stats.lease {
        LeaseStatus::Held => return (true, v),
        LeaseStatus::Late => {
            "out of touch with the worker registry past the time bound it holds; issuing \
             resumes once a bound is persisted"
        }
        LeaseStatus::Lost => {
            "the lease on the worker id was lost; a worker id is being acquired again"
        }
        LeaseStatus::Acquiring | LeaseStatus::Forked => "a worker id is being acquired",
        LeaseStatus::Closed => "the generator is closed (shutting down)",
    };
    v["waitingOn"] = serde_json::json!(why);
    (false, v)
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
