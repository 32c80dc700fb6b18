//! What a page or an action answers when it cannot do its work.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::html;

/// A failed request: its status and a message for the operator (escaped when shown).
#[derive(Debug)]
pub(crate) struct WebError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl WebError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> WebError {
        WebError {
            status,
            message: message.into(),
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
        tracing::error!(error = %e, "job-web: store error");
        WebError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

impl IntoResponse for WebError {
    fn into_response(self) -> Response {
        let page = html! {
            (maud::DOCTYPE)
            html lang="en" {
                head { meta charset="utf-8"; title { "job: " (self.status) } }
                body { h1 { (self.status) } p.error { (self.message) } }
            }
        };
        (self.status, Html(page.into_string())).into_response()
    }
}
