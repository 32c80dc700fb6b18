//! The login page: the operator gives the token.

use axum::http::HeaderMap;
use axum::response::Html;
use maud::html;
use serde::de::IgnoredAny;

use super::layout::{self, Nav};
use crate::base::Base;
use crate::dashboard::AppState;
use crate::extract::Query;

pub(crate) async fn page(
    axum::extract::State(app): AppState,
    base: Base,
    headers: HeaderMap,
    // No field is read; one that is no UTF-8 is still refused (see `extract.rs`).
    Query(_): Query<IgnoredAny>,
) -> Html<String> {
    let ctx = app.ctx(base, &headers);
    let body = html! {
        h1 { "Log in" }
        @if !ctx.has_operator {
            p { "No operator token is configured: this dashboard is read-only." }
        } @else {
            form.login method="post" action=(ctx.base.at("/login")) {
                label { "Operator token " input type="password" name="token" autocomplete="current-password" required; }
                " "
                button type="submit" { "Log in" }
            }
        }
    };
    Html(layout::page(&ctx, Nav::None, "Log in", body).into_string())
}
