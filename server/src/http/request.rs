//! What a handler reads from a request beyond its path: the `Accept` header as Spring's
//! content negotiation sorts it (the content type of an id answer, whether JSON is
//! acceptable, whether the caller is a browser) and the query. Extractors, so a handler
//! names what it needs in its arguments.

use std::collections::HashMap;

use axum::extract::{FromRequestParts, Query};
use axum::http::header;
use axum::http::request::Parts;

/// The `Accept` header's media types, most preferred first (by `q`, then concrete
/// before wildcard, then order), as Spring's content negotiation sorts them.
pub(super) fn accepted(parts: &Parts) -> Vec<String> {
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
pub(super) struct IdContentType(pub(super) String);

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
pub(super) struct JsonAcceptable(pub(super) bool);

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
pub(super) struct Browser(pub(super) bool);

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

/// The query of the id endpoints: `?count=N` asks for N ids, one per line.
pub(super) type Params = Query<HashMap<String, String>>;
