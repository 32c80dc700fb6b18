//! The jobs page and the dead letters page: a filter form and one keyset page of jobs, newest
//! first (`inspect_window.sql` then `inspect_page.sql`: at most `page_scan` rows read, never a
//! count; of each job its summary, never its payload or whole error history). The dead letters page adds redrive and purge, per job and for the whole filter.

use axum::http::HeaderMap;
use axum::response::Html;
use job::{JobFilter, JobState};
use job_postgres::{JobSummary, Page, PageRequest};
use maud::{html, Markup};
use serde::Deserialize;

use super::layout::{self, clip, form, href, opt_time, purge_form, state_badge, Nav};
use crate::base::Base;
use crate::dashboard::{AppState, Ctx};
use crate::error::WebError;
use crate::extract::Query;
use crate::fields::{echo, id, text};

/// The filter in the page's query string; empty fields are unset.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    state: Option<String>,
    kind: Option<String>,
    queue: Option<String>,
    tenant: Option<String>,
    tag: Option<String>,
    /// A job id, read by [`ListQuery::before`]: as text, so that one that does not parse is
    /// refused naming the field, and an empty one is unset.
    before: Option<String>,
}

/// A field as the page shows it again (once [`ListQuery::filter`] took it).
fn shown(value: &Option<String>) -> Option<String> {
    text("", value).ok().flatten()
}

impl ListQuery {
    pub(crate) fn filter(&self, state: Option<JobState>) -> Result<JobFilter, WebError> {
        let states = match (state, text("state", &self.state)?) {
            (Some(s), _) => vec![s],
            (None, Some(s)) => vec![s.parse::<JobState>().map_err(|_| {
                WebError::bad_request(format!(
                    "`state` must be one of {}, got {}",
                    JobState::ALL.map(JobState::as_str).join(", "),
                    echo(&s)
                ))
            })?],
            (None, None) => Vec::new(),
        };
        Ok(JobFilter {
            states,
            kind: text("kind", &self.kind)?,
            queue: text("queue", &self.queue)?,
            tenant: text("tenant", &self.tenant)?,
            tag: text("tag", &self.tag)?,
            ..JobFilter::default()
        })
    }

    /// The page's cursor: only jobs with a lower id.
    fn before(&self) -> Result<Option<i64>, WebError> {
        id("before", &self.before)
    }

    /// The filter as query pairs, for links to the next page (once [`Self::filter`] took it).
    fn pairs(&self) -> Vec<(&'static str, String)> {
        [
            ("state", &self.state),
            ("kind", &self.kind),
            ("queue", &self.queue),
            ("tenant", &self.tenant),
            ("tag", &self.tag),
        ]
        .into_iter()
        .filter_map(|(k, v)| shown(v).map(|v| (k, v)))
        .collect()
    }
}

pub(crate) async fn page(
    axum::extract::State(app): AppState,
    base: Base,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Result<Html<String>, WebError> {
    let ctx = app.ctx(base, &headers);
    let filter = query.filter(None)?;
    let before = query.before()?;
    let page = app
        .scope()
        .page(&request(&app.config, filter, before))
        .await?;
    let body = html! {
        h1 { "Jobs" }
        (filter_form(&ctx, "/jobs", &query, true))
        (table(&ctx, &page, false))
        (pager(&ctx, "/jobs", &query, before, &page))
    };
    Ok(Html(
        layout::page(&ctx, Nav::Jobs, "Jobs", body).into_string(),
    ))
}

pub(crate) async fn dead_letters(
    axum::extract::State(app): AppState,
    base: Base,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Result<Html<String>, WebError> {
    let ctx = app.ctx(base, &headers);
    let filter = query.filter(Some(JobState::Discarded))?;
    let before = query.before()?;
    let page = app
        .scope()
        .page(&request(&app.config, filter, before))
        .await?;
    let mut filter_fields = query.pairs();
    filter_fields.retain(|(k, _)| *k != "state");
    // The bulk actions reach only what had finished when this page was read.
    filter_fields.push((
        "seen_at",
        page.read_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
    ));
    let body = html! {
        h1 { "Dead letters" }
        (filter_form(&ctx, "/dead", &query, false))
        @if ctx.can_act() && !page.jobs.is_empty() {
            div.bulk {
                (form(&ctx, "/actions/redrive", &with(&filter_fields, ("all", "1")), "Redrive all matching (up to 1,000)", "redrive"))
                (purge_form(&ctx, &with(&filter_fields, ("all", "1")), "Purge all matching (up to 1,000)"))
            }
        }
        (table(&ctx, &page, true))
        (pager(&ctx, "/dead", &query, before, &page))
    };
    Ok(Html(
        layout::page(&ctx, Nav::Dead, "Dead letters", body).into_string(),
    ))
}

fn with(
    fields: &[(&'static str, String)],
    extra: (&'static str, &str),
) -> Vec<(&'static str, String)> {
    let mut out = fields.to_vec();
    out.push((extra.0, extra.1.to_owned()));
    out
}

fn request(config: &crate::DashboardConfig, filter: JobFilter, before: Option<i64>) -> PageRequest {
    PageRequest {
        filter,
        before,
        size: config.page_size,
        scan: config.page_scan,
    }
}

fn filter_form(ctx: &Ctx, path: &str, query: &ListQuery, with_state: bool) -> Markup {
    let current = shown(&query.state);
    html! {
        form.filter method="get" action=(ctx.base.at(path)) {
            @if with_state {
                label { "state "
                    select name="state" {
                        option value="" { "any" }
                        @for s in JobState::ALL {
                            option value=(s.as_str()) selected[current.as_deref() == Some(s.as_str())] { (s.as_str()) }
                        }
                    }
                }
            }
            label { "kind " input type="text" name="kind" value=(shown(&query.kind).unwrap_or_default()); }
            label { "queue " input type="text" name="queue" value=(shown(&query.queue).unwrap_or_default()); }
            @if ctx.tenant.is_none() {
                label { "tenant " input type="text" name="tenant" value=(shown(&query.tenant).unwrap_or_default()); }
            }
            label { "tag " input type="text" name="tag" value=(shown(&query.tag).unwrap_or_default()); }
            button type="submit" { "Filter" }
        }
    }
}

fn table(ctx: &Ctx, page: &Page, dead: bool) -> Markup {
    html! {
        @if page.jobs.is_empty() {
            p.empty { "No matching jobs"
                @if page.next.is_some() { " among the ids looked at; older ones may match" }
                "." }
        } @else {
            table.jobs {
                thead { tr {
                    th.num { "id" } th { "state" } th { "kind" } th { "queue" }
                    th { "tenant" } th { "tags" } th.num { "attempt" }
                    th { @if dead { "discarded" } @else { "run at / finished" } }
                    th { "last error" }
                    @if dead && ctx.can_act() { th { "" } }
                } }
                tbody {
                    @for job in &page.jobs { (row(ctx, job, dead)) }
                }
            }
        }
    }
}

fn row(ctx: &Ctx, job: &JobSummary, dead: bool) -> Markup {
    let last = job.last_error.as_ref();
    html! {
        tr data-id=(job.id) {
            td.num { a href=(ctx.base.at(&format!("/jobs/{}", job.id))) { (job.id) } }
            td { (state_badge(job.state, job.stuck_since.is_some())) }
            td { code { (job.kind) } }
            td { (job.queue) }
            td { @if let Some(t) = &job.tenant { (t) } }
            td { @for tag in &job.tags { span.tag { (tag) } " " } }
            td.num { (job.attempt) "/" (job.max_attempts) }
            td { (opt_time(job.finalized_at.or(Some(job.run_at)))) }
            td.error { @if let Some(e) = last { span.class { (e.class) } " " (clip(&e.message, 120)) } }
            @if dead && ctx.can_act() {
                td.actions {
                    (form(ctx, "/actions/redrive", &[("id", job.id.to_string())], "Redrive", "redrive"))
                    (purge_form(ctx, &[("id", job.id.to_string())], "Purge"))
                }
            }
        }
    }
}

fn pager(ctx: &Ctx, path: &str, query: &ListQuery, before: Option<i64>, page: &Page) -> Markup {
    let pairs = query.pairs();
    let base: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    html! {
        nav.pager {
            @if before.is_some() {
                a href=(ctx.base.at(&href(path, &base))) { "« Newest" }
            }
            @if let Some(next) = page.next {
                @let next = next.to_string();
                @let older: Vec<(&str, &str)> = base.iter().copied().chain([("before", next.as_str())]).collect();
                a.older href=(ctx.base.at(&href(path, &older))) { "Older »" }
            }
            @if let Some(low) = page.scanned_down_to {
                span.muted { "looked at ids " (low) " to " @if let Some(b) = before { (b - 1) } @else { "the newest" } }
            }
        }
    }
}
