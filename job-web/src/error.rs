//! What a page or an action answers when it cannot do its work.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::html;

/// A failed request: its status and a message for the operator (escaped when shown).
#[derive(Debug)]
pub(crate) struct WebError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    /// The database gave up on a statement at the request's bound (see `connections.rs`):
    /// `deadline::bound` words the answer.
    gave_up: bool,
}

/// What a failed answer says, kept on it (as an extension) for `pages::failure::dress`, which
/// shows it in the dashboard's frame.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

/// Marks an answer whose statement the database gave up on at the request's bound, or that
/// found no connection within it: nothing of it was done.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GaveUp;

impl WebError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> WebError {
        WebError {
            status,
            message: message.into(),
            gave_up: false,
        }
    }

    pub(crate) fn forbidden(message: impl Into<String>) -> WebError {
        WebError::new(StatusCode::FORBIDDEN, message)
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> WebError {
        WebError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl From<job::StoreError> for WebError {
    fn from(e: job::StoreError) -> WebError {
        if gave_up(&e) {
            return WebError {
                gave_up: true,
                ..WebError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
            };
        }
        tracing::error!(error = %e, "job-web: store error");
        WebError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

impl IntoResponse for WebError {
    /// A bare page saying the status and the message; `pages::failure::dress` frames it.
    fn into_response(self) -> Response {
        let page = html! {
            (maud::DOCTYPE)
            html lang="en" {
                head { meta charset="utf-8"; title { "job: " (self.status) } }
                body { h1 { (self.status) } p.error { (self.message) } }
            }
        };
        let page = crate::pages::visible::page(page.into_string());
        let mut response = (self.status, Html(page)).into_response();
        response.extensions_mut().insert(Failure {
            status: self.status,
            message: self.message,
        });
        if self.gave_up {
            response.extensions_mut().insert(GaveUp);
        }
        response
    }
}

/// Whether the database ended the statement at its `statement_timeout` (or `lock_timeout`),
/// or the pool gave no connection in time: the statement did nothing (it was rolled back, or
/// never sent).
fn gave_up(e: &job::StoreError) -> bool {
    let Some(job_postgres::Error::Query { source, .. }) =
        e.inner().downcast_ref::<job_postgres::Error>()
    else {
        return false;
    };
    match source {
        sqlx::Error::PoolTimedOut => true,
        // query_canceled (57014: statement_timeout), lock_not_available (55P03: lock_timeout).
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("57014" | "55P03")),
        _ => false,
    }
}
