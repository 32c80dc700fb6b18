//! The queues page: per queue, the jobs waiting (by state, with the oldest due one's age),
//! running, stuck, dead, and finished within the recent window; what is paused; pause and
//! resume. One statement for the counts (`inspect_overview.sql`, each part capped and read
//! through its partial index) and one for the pauses. The page shows at most [`SHOWN`] queues
//! and [`SHOWN`] pauses, and says how many more there are.

use axum::http::HeaderMap;
use axum::response::Html;
use job::Pause;
use maud::html;
use serde::de::IgnoredAny;

use super::layout::{self, age, count, form, href, Nav};
use crate::base::Base;
use crate::dashboard::{AppState, Ctx};
use crate::error::WebError;
use crate::extract::Query;

/// The queues (the first by name) and the pauses (kinds, then queues, by name) the page shows
/// at most: each paused queue got a row and the list of pauses was whole, so that 50,000 pauses
/// made a page of 46 MB. `job stats` and `job paused` list them all.
const SHOWN: usize = job_postgres::OVERVIEW_QUEUES as usize;

pub(crate) async fn page(
    axum::extract::State(app): AppState,
    base: Base,
    headers: HeaderMap,
    // No field is read; one that is no UTF-8 is still refused (see `extract.rs`).
    Query(_): Query<IgnoredAny>,
) -> Result<Html<String>, WebError> {
    let ctx = app.ctx(base, &headers);
    let overview = app
        .scope()
        .overview(app.config.count_cap, app.config.recent_window)
        .await?;
    let pauses = app.scope().pauses().await?;
    let paused: Vec<&Pause> = pauses.iter().map(|p| &p.what).collect();
    let paused_queues: std::collections::HashSet<&str> = paused
        .iter()
        .filter_map(|p| match p {
            Pause::Queue(q) => Some(q.as_str()),
            Pause::Kind(_) => None,
        })
        .collect();
    let queue_paused = |name: &str| paused_queues.contains(name);
    // Paused queues with no job to count still get a row, so they can be resumed.
    let mut names: Vec<&str> = overview.queues.iter().map(|q| q.queue.as_str()).collect();
    names.extend(paused_queues.iter().copied());
    names.sort_unstable();
    names.dedup();
    let more_queues = names.len().saturating_sub(SHOWN);
    names.truncate(SHOWN);
    let more_pauses = pauses.len().saturating_sub(SHOWN);
    // By name, once: a `find` per row was quadratic in the queues.
    let by_name: std::collections::HashMap<&str, &job_postgres::QueueOverview> = overview
        .queues
        .iter()
        .map(|q| (q.queue.as_str(), q))
        .collect();
    let minutes = app.config.recent_window.as_secs_f64() / 60.0;
    let can_pause = ctx.can_act() && ctx.tenant.is_none();
    let running = overview.is_capped("running");
    let dead = overview.is_capped("discarded");
    let recent = overview.is_capped("recent");
    let body = html! {
        h1 { "Queues" }
        @if names.is_empty() {
            p.empty { "No jobs waiting, running or dead, and none finished in the last " (age(app.config.recent_window)) "." }
        } @else {
            table.queues {
                thead {
                    tr {
                        th { "queue" }
                        th.num { "available" }
                        th.num { "scheduled" }
                        th.num { "retryable" }
                        th.num { "running" }
                        th.num { "stuck" }
                        th.num { "dead letters" }
                        th.num { "oldest due" }
                        th.num title={ "jobs finished in the last " (age(app.config.recent_window)) } {
                            "completed / " (age(app.config.recent_window))
                        }
                        th.num { "per min" }
                        th.num { "discarded / " (age(app.config.recent_window)) }
                        th.num { "cancelled / " (age(app.config.recent_window)) }
                        th { "" }
                    }
                }
                tbody {
                    @for name in &names {
                        @let q = by_name.get(name).map(|q| (*q).clone()).unwrap_or_default();
                        @let is_paused = queue_paused(name);
                        tr data-queue=(name) {
                            td {
                                a href=(ctx.base.at(&href("/jobs", &[("queue", name)]))) { (name) }
                                @if is_paused { " " span.state.paused { "paused" } }
                            }
                            td.num { a href=(ctx.base.at(&href("/jobs", &[("state", "available"), ("queue", name)]))) { (count(q.available, q.waiting_capped)) } }
                            td.num { a href=(ctx.base.at(&href("/jobs", &[("state", "scheduled"), ("queue", name)]))) { (count(q.scheduled, q.waiting_capped)) } }
                            td.num { a href=(ctx.base.at(&href("/jobs", &[("state", "retryable"), ("queue", name)]))) { (count(q.retryable, q.waiting_capped)) } }
                            td.num { a href=(ctx.base.at(&href("/jobs", &[("state", "running"), ("queue", name)]))) { (count(q.running, running)) } }
                            td class=(num_class(q.stuck)) { (count(q.stuck, running)) }
                            td class=(num_class(q.discarded)) { a href=(ctx.base.at(&href("/dead", &[("queue", name)]))) { (count(q.discarded, dead)) } }
                            // From a capped sample, the oldest due job read is not always the
                            // oldest there is: the age is at least this.
                            td.num { @match q.oldest_due { Some(d) => { @if q.waiting_capped { "≥ " } (age(d)) }, None => span.muted { "—" } } }
                            td.num { (count(q.recent_completed, recent)) }
                            td.num { (format!("{:.1}", q.recent_completed as f64 / minutes)) @if recent { "+" } }
                            td.num { (count(q.recent_discarded, recent)) }
                            td.num { (count(q.recent_cancelled, recent)) }
                            td {
                                @if can_pause {
                                    @if is_paused {
                                        (form(&ctx, "/actions/resume", &[("scope", "queue".into()), ("name", name.to_string())], "Resume", "resume"))
                                    } @else {
                                        (form(&ctx, "/actions/pause", &[("scope", "queue".into()), ("name", name.to_string())], "Pause", "pause"))
                                    }
                                }
                            }
                        }
                    }
                }
            }
            @if more_queues > 0 {
                p.muted { (more_queues) " more queues are not shown: this page lists the first " (SHOWN) " by name. `job stats` counts every queue, `job paused` lists every pause." }
            }
            @if overview.queues_capped {
                p.muted { "More than " (job_postgres::OVERVIEW_QUEUES) " queues have waiting jobs: the first " (job_postgres::OVERVIEW_QUEUES) " by name are counted, with those that have running, dead or recently finished jobs." }
            }
            @if overview.waiting_unseen {
                p.muted { "A queue whose first " (overview.queue_cap) " waiting jobs are other tenants' is not listed: this tenant's jobs may wait behind them. `job stats --tenant` counts them all." }
            }
            @if !overview.capped.is_empty() || overview.queues.iter().any(|q| q.waiting_capped) {
                p.muted { "Counts with + and ages with ≥ are lower bounds: this page reads at most " (overview.queue_cap) " waiting jobs per queue (of those available, and of those due later), and " (overview.cap) " running, dead and recently finished ones in all (the oldest of those), so a queue whose only jobs are finished ones past that may be missing here. `job stats` counts them all." }
            }
        }
        h2 { "Paused" }
        @if ctx.tenant.is_some() {
            p.muted { "The pauses of the queues and kinds this tenant's waiting and running jobs are in. A pause stops every tenant's jobs of its queue or kind; only an operator of every tenant pauses and resumes." }
        }
        @if paused.is_empty() {
            p.muted { "Nothing is paused." }
        } @else {
            ul.paused {
                @for entry in pauses.iter().take(SHOWN) {
                    @let p = &entry.what;
                    li {
                        (p.scope()) " " code { (p.name()) }
                        " by " (entry.paused_by.as_str())
                        @if let Some(until) = entry.resume_at {
                            " until " (until.format("%Y-%m-%d %H:%M:%S UTC"))
                        }
                        @if let Some(reason) = &entry.reason {
                            ": " span.reason { (reason) }
                        }
                        " "
                        @if can_pause {
                            (form(&ctx, "/actions/resume", &[("scope", p.scope().into()), ("name", p.name().to_owned())], "Resume", "resume"))
                        }
                    }
                }
            }
        }
        @if more_pauses > 0 {
            p.muted { "… and " (more_pauses) " more pauses: `job paused` lists them all." }
        }
        @if can_pause {
            (pause_form(&ctx))
        }
    };
    Ok(Html(
        layout::page(&ctx, Nav::Queues, "Queues", body).into_string(),
    ))
}

/// A number cell, marked when it counts trouble.
fn num_class(n: u64) -> &'static str {
    if n > 0 {
        "num alert"
    } else {
        "num"
    }
}

/// Pause a queue or a kind by name (one that has no job yet, too).
fn pause_form(ctx: &Ctx) -> maud::Markup {
    html! {
        form.pause method="post" action=(ctx.base.at("/actions/pause")) {
            input type="hidden" name="csrf" value=(ctx.csrf.clone().unwrap_or_default());
            label { "Pause " select name="scope" { option value="queue" { "queue" } option value="kind" { "kind" } } }
            " "
            input type="text" name="name" placeholder="name" required;
            " "
            button type="submit" class="pause" { "Pause" }
        }
    }
}
