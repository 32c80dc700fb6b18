//! The outcome of the last action, shown once on the page its redirect leads to. The action's
//! own answer carries it in a cookie ([`COOKIE`]: `HttpOnly`, `SameSite=Strict`, a minute),
//! which that page shows and [`clear`] removes: a link cannot make a page say anything was
//! done (before 2026-12-07 the redirect's query said it, and `/?done=purged&n=1000` said
//! "Purged 1000 dead letter(s)." to anyone). The value is one of fixed codes, with a count or
//! a state for some, so a visitor who writes the cookie itself makes its own page say no more
//! than those; and "logged in" is said only to a session that is.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::Response;
use job::JobState;

use crate::auth::cookie;
use crate::base::Base;
use crate::dashboard::App;

/// The notice cookie's name.
pub(crate) const COOKIE: &str = "job_notice";

/// How long a notice waits for its page, in seconds: the redirect is followed at once.
pub(crate) const NOTICE_SECS: u64 = 60;

/// A notice: its code, and the count or the state some codes say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Notice {
    code: String,
    detail: Option<String>,
}

impl Notice {
    /// The notice `code` (one of those [`Notice::text`] says), with a count or a state.
    pub(crate) fn new(code: &str, detail: Option<String>) -> Notice {
        Notice {
            code: code.to_owned(),
            detail,
        }
    }

    /// The notice of the request's cookie, if it has one.
    pub(crate) fn of(headers: &HeaderMap) -> Option<Notice> {
        let value = cookie(headers, COOKIE)?;
        let (code, detail) = match value.split_once('.') {
            Some((code, detail)) => (code, Some(detail.to_owned())),
            None => (value, None),
        };
        Some(Notice::new(code, detail))
    }

    /// The cookie's value: the code, and after a dot its detail (letters, digits, `_`).
    pub(crate) fn value(&self) -> String {
        match &self.detail {
            Some(detail) => format!("{}.{detail}", self.code),
            None => self.code.clone(),
        }
    }

    /// What the page says, if the code is one it knows; "logged in" only when `logged_in`.
    pub(crate) fn text(&self, logged_in: bool) -> Option<String> {
        let n = || -> u64 {
            self.detail
                .as_deref()
                .and_then(|n| n.parse().ok())
                .unwrap_or(0)
        };
        let state = || {
            self.detail
                .as_deref()
                .and_then(|s| s.parse::<JobState>().ok())
        };
        Some(match self.code.as_str() {
            "cancelled" => "Cancelled.".to_owned(),
            "cancel_requested" => {
                "Cancellation requested: the job stops at its worker's next heartbeat.".to_owned()
            }
            "already_finished" => "The job had already finished: nothing changed.".to_owned(),
            "not_found" => "No such job.".to_owned(),
            "redriven" if n() == 0 => "Nothing was redriven: no dead letter matched.".to_owned(),
            "redriven" => format!("Redriven: {} job(s) available again.", n()),
            "redrive_skipped" => format!(
                "Redriven: {} job(s); others were skipped because an active job holds their unique key.",
                n()
            ),
            "redrive_held" => "Nothing was redriven: an active job holds its unique key, so it \
                               stays a dead letter."
                .to_owned(),
            "not_redriven" => format!(
                "Nothing was redriven: this job is not a dead letter (it is {}).",
                state()?.as_str()
            ),
            "purged" if n() == 0 => "Nothing was purged: no dead letter matched.".to_owned(),
            "purged" => format!("Purged {} dead letter(s).", n()),
            "not_purged" => format!(
                "Nothing was purged: this job is not a dead letter (it is {}).",
                state()?.as_str()
            ),
            "paused" => "Paused: workers take no more of its jobs.".to_owned(),
            "already_paused" => "It was paused already.".to_owned(),
            "resumed" => "Resumed.".to_owned(),
            "not_paused" => "It was not paused.".to_owned(),
            "logged_in" if logged_in => "Logged in as operator.".to_owned(),
            "logged_out" => "Logged out: read-only.".to_owned(),
            _ => return None,
        })
    }
}

/// Removes the notice cookie once a page was answered to a request that sent it (the page
/// showed it), unless the answer sets a new one (an action's).
pub(crate) async fn clear(State(app): State<Arc<App>>, request: Request, next: Next) -> Response {
    let sent = cookie(request.headers(), COOKIE).is_some();
    let (mut parts, body) = request.into_parts();
    let base = match Base::from_request_parts(&mut parts, &()).await {
        Ok(base) => base,
        Err(never) => match never {},
    };
    let mut response = next.run(Request::from_parts(parts, body)).await;
    let prefix = format!("{COOKIE}=");
    let sets = response
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .any(|v| v.as_bytes().starts_with(prefix.as_bytes()));
    if sent && !sets {
        response
            .headers_mut()
            .append(header::SET_COOKIE, app.cookie(&base, COOKIE, "", 0));
    }
    response
}
