//! The page of a request the dashboard cannot answer as asked: an address with no page (404),
//! a job that does not exist or is another tenant's (404), a refused form (400, 403), a
//! database that did not answer (503). A [`WebError`] renders itself bare, since it knows
//! neither where the dashboard is mounted nor who is logged in; [`dress`], a layer of the
//! router, puts it in the dashboard's frame with a link back to the queues.
//!
//! An address with no page reaches axum's default fallback, whose empty 404 [`dress`] turns
//! into the page too; so does axum's empty 405 for a method a route does not take (`DELETE /`,
//! `GET` on an action), which keeps the `Allow` header axum adds to it. axum answers that 405
//! without calling the route's handler, so a wrong method never acts.
//!
//! The router sets no fallback of its own: axum allows one, and an application that merges
//! the dashboard into a router with a fallback would panic at startup (its own fallback then
//! answers such addresses). Under `Router::nest`, axum sends addresses under the mount point
//! that have no page to the application's fallback; under `Router::nest_service` the
//! dashboard answers them.
//!
//! [`WebError`]: crate::error::WebError

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, OriginalUri, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use maud::html;

use super::layout::{self, clip, Nav};
use crate::base::Base;
use crate::dashboard::App;
use crate::error::Failure;

/// The most of an unknown address's path the 404 and 405 pages repeat, in characters.
const SHOWN_PATH: usize = 120;
/// The most of a request's method the 405 page repeats, in characters: a method is any token.
const SHOWN_METHOD: usize = 20;

/// Puts the answer of a failed request (a [`Failure`], or axum's empty 404 for an address
/// with no page and 405 for a method a route does not take) in the dashboard's frame; any
/// other answer passes as it is.
pub(crate) async fn dress(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let base = match Base::from_request_parts(&mut parts, &()).await {
        Ok(base) => base,
        Err(never) => match never {},
    };
    let path = match OriginalUri::from_request_parts(&mut parts, &()).await {
        Ok(OriginalUri(uri)) => uri.path().to_owned(),
        Err(never) => match never {},
    };
    let method = parts.method.clone();
    let cookies = parts.headers.clone();
    let response = next.run(Request::from_parts(parts, body)).await;
    let failure = match response.extensions().get::<Failure>() {
        Some(failure) => failure.clone(),
        // Only axum's fallback answers 404 without a `Failure`: every page's own is a WebError.
        None if response.status() == StatusCode::NOT_FOUND => Failure {
            status: StatusCode::NOT_FOUND,
            message: format!("no page at {}", clip(&path, SHOWN_PATH)),
        },
        // Likewise 405: only axum's method router answers it, without calling a handler.
        None if response.status() == StatusCode::METHOD_NOT_ALLOWED => Failure {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: format!(
                "{} is not allowed at {}",
                clip(method.as_str(), SHOWN_METHOD),
                clip(&path, SHOWN_PATH)
            ),
        },
        None => return response,
    };
    let ctx = app.ctx(base, &cookies);
    let title = failure
        .status
        .canonical_reason()
        .unwrap_or("Error")
        .to_owned();
    let body = html! {
        h1 { (title) }
        p.error { (failure.message) }
        p { a href=(ctx.base.at("/")) { "Back to the queues" } }
    };
    let page = layout::page(&ctx, Nav::None, &title, body).into_string();
    let (mut parts, _) = response.into_parts();
    parts.status = failure.status;
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("text/html; charset=utf-8"),
    );
    Response::from_parts(parts, Body::from(page))
}
