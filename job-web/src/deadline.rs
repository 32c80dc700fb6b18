//! The bound on every request's wait ([`DashboardConfig::answer_within`]): a page or an action
//! that has not answered by then (the database holds a lock it waits for, or gives no
//! connection) is answered 503 rather than left hanging. The database gives up on the
//! request's statements a little before that bound (see `connections.rs`), so the 503 usually
//! comes from its error, after the statement was stopped; this timeout is the last resort
//! (a database that does not even answer that), and says it does not know what was done.
//!
//! An action's form is read before that bound starts, within a bound of its own of the same
//! length: a body that does not arrive in time is answered 408, nothing done, and is not taken
//! for the database's silence (the database was never asked).
//!
//! [`DashboardConfig::answer_within`]: crate::DashboardConfig::answer_within

use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::connections;
use crate::error::{GaveUp, WebError};

pub(crate) async fn bound(
    State(within): State<Duration>,
    request: Request,
    next: Next,
) -> Response {
    let acts = request.method() == Method::POST;
    let request = if acts {
        match read_body(within, request).await {
            Ok(request) => request,
            Err(response) => return response,
        }
    } else {
        request
    };
    let deadline = Instant::now() + within;
    let run = connections::until(deadline, next.run(request));
    match tokio::time::timeout(within, run).await {
        Ok(response) if response.extensions().get::<GaveUp>().is_some() => {
            tracing::warn!(within = ?within, "job-web: the database gave up on a request's statement at its bound");
            let then = if acts {
                ": the action was not done (the database stopped it), try again"
            } else {
                ": try again"
            };
            unanswered(within, then)
        }
        Ok(response) => response,
        Err(_) => {
            tracing::warn!(within = ?within, "job-web: a request timed out waiting for the database");
            let then = if acts {
                ": the action may or may not have been done, reload the page to see"
            } else {
                ": try again"
            };
            unanswered(within, then)
        }
    }
}

/// `request` with its body read, within `within` (and as large as axum's body limit lets, as
/// the form's extractor would); answered 408 when it does not arrive in time, or as axum
/// refuses it (413 past the limit).
async fn read_body(within: Duration, request: Request) -> Result<Request, Response> {
    let (parts, body) = request.into_parts();
    let read = Bytes::from_request(Request::from_parts(parts.clone(), body), &());
    match tokio::time::timeout(within, read).await {
        Ok(Ok(bytes)) => Ok(Request::from_parts(parts, Body::from(bytes))),
        Ok(Err(refused)) => {
            Err(WebError::new(refused.status(), refused.body_text()).into_response())
        }
        Err(_) => {
            tracing::warn!(within = ?within, "job-web: a form's body did not arrive in time");
            let mut response = WebError::new(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the form did not arrive within {}: nothing was done",
                    seconds(within)
                ),
            )
            .into_response();
            // As RFC 9110 asks of a 408: what comes late of the body is no next request.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            Err(response)
        }
    }
}

/// The 503 of a request the database did not answer within `within`.
fn unanswered(within: Duration, then: &str) -> Response {
    WebError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "the database did not answer within {}{then}",
            seconds(within)
        ),
    )
    .into_response()
}

/// `5 s`, `1.5 s`, `0.2 s`.
fn seconds(d: Duration) -> String {
    let s = format!("{:.3}", d.as_secs_f64());
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s} s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_read_as_seconds() {
        assert_eq!(seconds(Duration::from_secs(5)), "5 s");
        assert_eq!(seconds(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(seconds(Duration::from_millis(200)), "0.2 s");
    }
}
