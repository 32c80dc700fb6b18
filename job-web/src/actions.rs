//! The actions: every one a POST from a logged-in operator carrying the session's CSRF token,
//! answered with a redirect to a page that shows the outcome (post/redirect/get), which the
//! answer carries in a cookie of its own (see `notice.rs`).

use std::net::SocketAddr;
use std::time::Instant;

use axum::extract::ConnectInfo;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use chrono::{DateTime, Datelike, Utc};
use job::{Cancelled, JobFilter, Pause};
use serde::Deserialize;

use crate::auth::COOKIE;
use crate::base::Base;
use crate::dashboard::{App, AppState};
use crate::error::WebError;
use crate::extract::Form;
use crate::fields::{self, text};
use crate::notice::{self, Notice};
use crate::throttle::{forwarded_client, Client};

/// Every field any action form sends; each action reads its own.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ActionForm {
    #[serde(default)]
    csrf: String,
    /// A job id, read by [`ActionForm::id`]: as text, so that one that does not parse is
    /// refused naming the field, and an empty one is unset.
    id: Option<String>,
    scope: Option<String>,
    name: Option<String>,
    /// Set by the bulk forms: act on every dead letter matching the filter fields (empty:
    /// unset, as every field).
    all: Option<String>,
    /// A purge's confirmation box.
    confirm: Option<String>,
    /// Set by the bulk forms: when the page they were on was read (RFC 3339, the database's
    /// clock). Dead letters finished since were never shown, and are left alone.
    seen_at: Option<String>,
    kind: Option<String>,
    queue: Option<String>,
    tenant: Option<String>,
    tag: Option<String>,
    token: Option<String>,
}

impl ActionForm {
    /// The job the action is about, if the form names one.
    fn id(&self) -> Result<Option<i64>, WebError> {
        fields::id("id", &self.id)
    }
}

/// Refuses the request unless it comes from a logged-in operator with the session's CSRF token.
fn authorize(app: &App, headers: &HeaderMap, form: &ActionForm) -> Result<(), WebError> {
    let Some(operator) = &app.operator else {
        return Err(WebError::forbidden(
            "this dashboard is read-only: no operator token is configured",
        ));
    };
    let Some(session) = operator.session(headers) else {
        return Err(WebError::forbidden("log in as operator to act"));
    };
    if !operator.csrf_matches(&session, &form.csrf) {
        return Err(WebError::forbidden(
            "the form's CSRF token does not match this session: reload the page and try again",
        ));
    }
    Ok(())
}

/// The bulk form's `seen_at`, required: without it the action would reach dead letters its
/// operator never saw. A time no job carries (outside 0001-01-01 to 9999-12-31 UTC, which the
/// store refuses in a filter) is refused here, naming the field.
fn seen_at(form: &ActionForm) -> Result<DateTime<Utc>, WebError> {
    let value = text("seen_at", &form.seen_at)?.ok_or_else(|| {
        WebError::bad_request(
            "`seen_at` is required with `all`: reload the dead letters page and try again",
        )
    })?;
    let at = DateTime::parse_from_rfc3339(&value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| WebError::bad_request("`seen_at` is not an RFC 3339 time"))?;
    if !(1..=9999).contains(&at.year()) {
        return Err(WebError::bad_request(format!(
            "`seen_at` must be between 0001-01-01 and 9999-12-31 UTC, got {}",
            fields::echo(&value)
        )));
    }
    Ok(at)
}

/// A redirect to `path`, whose page says `notice` (code, and a count or a state for some).
fn redirect(app: &App, base: &Base, path: &str, notice: (&str, Option<String>)) -> Response {
    let mut response = Redirect::to(&base.at(path)).into_response();
    response
        .headers_mut()
        .append(header::SET_COOKIE, notice_cookie(app, base, notice));
    response
}

/// The cookie that carries `notice` to the page the action's redirect leads to.
fn notice_cookie(app: &App, base: &Base, notice: (&str, Option<String>)) -> HeaderValue {
    let notice = Notice::new(notice.0, notice.1);
    app.cookie(base, notice::COOKIE, &notice.value(), notice::NOTICE_SECS)
}

/// Why an action on job `id` reached no dead letter: answered 404 when there is no such job
/// (or it is another tenant's), else the notice `code` with the job's state.
async fn not_dead(
    app: &App,
    id: i64,
    code: &'static str,
    verb: &str,
) -> Result<(&'static str, Option<String>), WebError> {
    match app.scope().get(id).await? {
        Some(job) => Ok((code, Some(job.state.as_str().to_owned()))),
        None => Err(WebError::new(
            StatusCode::NOT_FOUND,
            format!("no job {id}: nothing was {verb}"),
        )),
    }
}

/// The dead letters an action is about: one job (`id`), or with `all`, every dead letter
/// matching the filter fields that had finished when the operator's page was read (`seen_at`),
/// up to 1,000: a dead letter arriving after the page was shown is not acted on unseen.
fn target(form: &ActionForm) -> Result<JobFilter, WebError> {
    match (form.id()?, text("all", &form.all)?.is_some()) {
        (Some(id), _) => Ok(JobFilter::ids([id])),
        (None, true) => Ok(JobFilter {
            kind: text("kind", &form.kind)?,
            queue: text("queue", &form.queue)?,
            tenant: text("tenant", &form.tenant)?,
            tag: text("tag", &form.tag)?,
            finalized_to: Some(seen_at(form)?),
            limit: Some(1000),
            ..JobFilter::dead_letters()
        }),
        (None, false) => Err(WebError::bad_request("name a job (`id`) or `all`")),
    }
}

pub(crate) async fn cancel(
    axum::extract::State(app): AppState,
    base: Base,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, WebError> {
    authorize(&app, &headers, &form)?;
    let id = form
        .id()?
        .ok_or_else(|| WebError::bad_request("`id` is required"))?;
    let done = match app.scope().cancel(id).await? {
        Cancelled::Now => "cancelled",
        Cancelled::Requested => "cancel_requested",
        Cancelled::AlreadyFinished(_) => "already_finished",
        Cancelled::NotFound => "not_found",
    };
    Ok(redirect(&app, &base, &format!("/jobs/{id}"), (done, None)))
}

pub(crate) async fn redrive(
    axum::extract::State(app): AppState,
    base: Base,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, WebError> {
    authorize(&app, &headers, &form)?;
    let filter = target(&form)?;
    let out = app.scope().redrive(&filter).await?;
    let n = Some(out.redriven.len().to_string());
    Ok(match form.id()? {
        // One job, not redriven: it is held by an active job's unique key, or no dead letter.
        Some(id) if out.redriven.is_empty() => {
            let notice = if out.skipped.is_empty() {
                not_dead(&app, id, "not_redriven", "redriven").await?
            } else {
                ("redrive_held", None)
            };
            redirect(&app, &base, &format!("/jobs/{id}"), notice)
        }
        Some(id) => redirect(&app, &base, &format!("/jobs/{id}"), ("redriven", n)),
        None if out.skipped.is_empty() => redirect(&app, &base, "/dead", ("redriven", n)),
        None => redirect(&app, &base, "/dead", ("redrive_skipped", n)),
    })
}

pub(crate) async fn purge(
    axum::extract::State(app): AppState,
    base: Base,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, WebError> {
    authorize(&app, &headers, &form)?;
    let filter = target(&form)?;
    if form.confirm.as_deref() != Some("yes") {
        return Err(WebError::bad_request(
            "a purge deletes for good: it needs the confirmation box ticked",
        ));
    }
    let n = app.scope().purge(&filter).await?;
    if let (Some(id), 0) = (form.id()?, n) {
        let notice = not_dead(&app, id, "not_purged", "purged").await?;
        return Ok(redirect(&app, &base, &format!("/jobs/{id}"), notice));
    }
    Ok(redirect(
        &app,
        &base,
        "/dead",
        ("purged", Some(n.to_string())),
    ))
}

/// What to pause or resume. A pause's name is trimmed, and refused when no queue or kind can
/// have it. A resume's is taken as sent (the page's resume buttons send the stored name): the
/// store resumes a pause written by hand under a name no queue or kind can have, and refuses
/// the name when no pause holds it.
fn pause_target(form: &ActionForm, pause: bool) -> Result<Pause, WebError> {
    let name = match pause {
        true => text("name", &form.name)?,
        false => form.name.clone().filter(|n| !n.is_empty()),
    };
    let name = name.ok_or_else(|| WebError::bad_request("`name` is required"))?;
    if let Some(problem) = job::name_problem(&name).filter(|_| pause) {
        return Err(WebError::bad_request(format!("`name` {problem}")));
    }
    match form.scope.as_deref() {
        Some("queue") => Ok(Pause::Queue(name)),
        Some("kind") => Ok(Pause::Kind(name)),
        _ => Err(WebError::bad_request("`scope` is `queue` or `kind`")),
    }
}

async fn set_paused(app: &App, form: &ActionForm, pause: bool) -> Result<&'static str, WebError> {
    if app.scope().tenant().is_some() {
        return Err(WebError::forbidden(
            "pausing and resuming act on every tenant's jobs: not from a tenant's dashboard",
        ));
    }
    let what = pause_target(form, pause)?;
    let changed = app
        .scope()
        .set_paused(&what, pause)
        .await
        .map_err(|e| match e.is_refused() {
            // The store's word on the name (a resume's, see `pause_target`).
            true => WebError::bad_request(e.to_string()),
            false => e.into(),
        })?;
    Ok(match (pause, changed) {
        (true, true) => "paused",
        (true, false) => "already_paused",
        (false, true) => "resumed",
        (false, false) => "not_paused",
    })
}

pub(crate) async fn pause(
    axum::extract::State(app): AppState,
    base: Base,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, WebError> {
    authorize(&app, &headers, &form)?;
    let done = set_paused(&app, &form, true).await?;
    Ok(redirect(&app, &base, "/", (done, None)))
}

pub(crate) async fn resume(
    axum::extract::State(app): AppState,
    base: Base,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, WebError> {
    authorize(&app, &headers, &form)?;
    let done = set_paused(&app, &form, false).await?;
    Ok(redirect(&app, &base, "/", (done, None)))
}

pub(crate) async fn login(
    axum::extract::State(app): AppState,
    base: Base,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, WebError> {
    let Some(operator) = &app.operator else {
        return Err(WebError::forbidden(
            "this dashboard is read-only: no operator token is configured",
        ));
    };
    let now = Instant::now();
    let client = Client::of(
        forwarded_client(&headers, app.config.forwarded_hops)
            .or(peer.map(|Extension(ConnectInfo(a))| a.ip())),
    );
    if let Err(wait) = app.logins.admit(client, now) {
        tracing::warn!("job-web: a login refused after too many wrong operator tokens");
        let mut response = WebError::new(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "too many wrong operator tokens within a minute (from this address, or from \
                 all together): logging in is refused for {} s more",
                wait.as_secs().max(1)
            ),
        )
        .into_response();
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(wait.as_secs().max(1)),
        );
        return Ok(response);
    }
    if !operator.accepts(form.token.as_deref().unwrap_or_default()) {
        tracing::warn!("job-web: a login with a wrong operator token");
        app.logins.failed(client, now);
        return Err(WebError::forbidden("wrong operator token"));
    }
    let session = app.cookie(&base, COOKIE, &operator.new_session(), 12 * 3600);
    let mut response = Redirect::to(&base.at("/")).into_response();
    let headers = response.headers_mut();
    headers.append(header::SET_COOKIE, session);
    headers.append(
        header::SET_COOKIE,
        notice_cookie(&app, &base, ("logged_in", None)),
    );
    Ok(response)
}

pub(crate) async fn logout(
    axum::extract::State(app): AppState,
    base: Base,
    headers: HeaderMap,
    Form(form): Form<ActionForm>,
) -> Result<Response, WebError> {
    authorize(&app, &headers, &form)?;
    let mut response = Redirect::to(&base.at("/")).into_response();
    let headers = response.headers_mut();
    headers.append(header::SET_COOKIE, app.cookie(&base, COOKIE, "", 0));
    headers.append(
        header::SET_COOKIE,
        notice_cookie(&app, &base, ("logged_out", None)),
    );
    Ok(response)
}
