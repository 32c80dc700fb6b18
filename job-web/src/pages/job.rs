//! A job's page: what it is, its payload, its latest progress, its result, its error history,
//! its recorded steps, and the actions its state allows. Three statements by primary key
//! (`get.sql`, `inspect_steps_shown.sql`, and the payload, progress and result as the
//! database writes them, numbers as stored; the steps' outputs come with their text too).
//! The page is a list of sections: one more is one more function in that list.

use axum::http::{HeaderMap, StatusCode};
use axum::response::Html;
use job::{JobRow, JobState};
use job_postgres::{ShowSteps, ShownSteps};
use maud::{html, Markup};
use serde::de::IgnoredAny;

use super::layout::{self, exact, form, opt_time, purge_form, state_badge, time, Nav};
use crate::base::Base;
use crate::dashboard::{AppState, Ctx};
use crate::error::WebError;
use crate::extract::{JobIdPath, Query};
use crate::scope::ExactTexts;

/// The most of the payload, the progress and the result a page shows, in bytes of pretty JSON.
const SHOWN_VALUE: usize = 2 << 20;
/// The most of each step's output a page shows, in bytes of pretty JSON.
const SHOWN_STEP: usize = 64 << 10;
/// The steps a page shows, and the largest output it reads (a larger one shows its size).
const SHOW_STEPS: ShowSteps = ShowSteps {
    max_steps: 100,
    max_output_bytes: 64 << 10,
};

pub(crate) async fn page(
    axum::extract::State(app): AppState,
    base: Base,
    headers: HeaderMap,
    JobIdPath(id): JobIdPath,
    // No field is read; one that is no UTF-8 is still refused (see `extract.rs`).
    Query(_): Query<IgnoredAny>,
) -> Result<Html<String>, WebError> {
    let ctx = app.ctx(base, &headers);
    let Some(job) = app.scope().get(id).await? else {
        return Err(WebError::new(StatusCode::NOT_FOUND, format!("no job {id}")));
    };
    let steps = app.scope().steps_shown(id, SHOW_STEPS).await?;
    // A job deleted between the reads shows its row's values.
    let texts = app.scope().exact_texts(id).await?.unwrap_or_default();
    let body = html! {
        h1 { "Job " (job.id) " " (state_badge(job.state, job.stuck_since.is_some())) }
        (actions(&ctx, &job))
        (summary(&job))
        (payload(&job, &texts))
        (progress(&job, &texts))
        (result(&job, &texts))
        (errors(&job))
        (steps_section(&steps, job.id))
    };
    let title = format!("Job {id}");
    Ok(Html(
        layout::page(&ctx, Nav::None, &title, body).into_string(),
    ))
}

fn actions(ctx: &Ctx, job: &JobRow) -> Markup {
    let id = [("id", job.id.to_string())];
    html! {
        @if ctx.can_act() {
            div.actions {
                @if !job.state.is_terminal() && !job.cancel_requested {
                    (form(ctx, "/actions/cancel", &id, "Cancel", "cancel"))
                }
                @if job.state == JobState::Discarded {
                    (form(ctx, "/actions/redrive", &id, "Redrive", "redrive"))
                    (purge_form(ctx, &id, "Purge"))
                }
            }
        }
    }
}

fn summary(job: &JobRow) -> Markup {
    html! {
        dl.summary {
            dt { "kind" } dd { code { (job.kind) } " v" (job.payload_version) }
            dt { "queue" } dd { (job.queue) " · priority " (job.priority) }
            @if let Some(t) = &job.tenant { dt { "tenant" } dd { (t) } }
            @if !job.tags.is_empty() { dt { "tags" } dd { @for t in &job.tags { span.tag { (t) } " " } } }
            dt { "attempt" } dd { (job.attempt) " of " (job.max_attempts) }
            dt { "enqueued" } dd { (time(job.created_at)) }
            dt { "run at" } dd { (time(job.run_at)) }
            @if job.deadline.is_some() { dt { "deadline" } dd { (opt_time(job.deadline)) } }
            @if job.finalized_at.is_some() { dt { "finished" } dd { (opt_time(job.finalized_at)) } }
            @if let Some(key) = &job.unique_key { dt { "unique key" } dd { code { (key) } } }
            @if let Some(by) = &job.locked_by {
                dt { "lease" } dd { "held by " code { (by) } " until " (opt_time(job.locked_until)) }
            }
            @if job.stuck_since.is_some() { dt { "stuck since" } dd.alert { (opt_time(job.stuck_since)) } }
            @if job.cancel_requested { dt { "cancel" } dd { "requested" } }
        }
    }
}

fn payload(job: &JobRow, texts: &ExactTexts) -> Markup {
    html! {
        section.payload {
            h2 { "Payload" }
            pre { (exact(&job.payload, texts.payload.as_deref(), SHOWN_VALUE)) }
        }
    }
}

/// The latest progress the handler reported, when it reported any.
fn progress(job: &JobRow, texts: &ExactTexts) -> Markup {
    html! {
        @if let Some(progress) = &job.progress {
            section.progress {
                h2 { "Progress" }
                p.muted { "reported " (opt_time(job.progress_at)) }
                pre { (exact(progress, texts.progress.as_deref(), SHOWN_VALUE)) }
            }
        }
    }
}

/// What the completing attempt returned, when it returned something.
fn result(job: &JobRow, texts: &ExactTexts) -> Markup {
    html! {
        @if let Some(result) = &job.result {
            section.result {
                h2 { "Result" }
                pre { (exact(result, texts.result.as_deref(), SHOWN_VALUE)) }
            }
        }
    }
}

fn errors(job: &JobRow) -> Markup {
    html! {
        section.errors {
            h2 { "Error history" }
            @if job.errors.is_empty() {
                p.muted { "No error recorded." }
            } @else {
                table.history {
                    thead { tr { th.num { "attempt" } th { "at" } th { "class" } th { "message" } } }
                    tbody {
                        @for e in &job.errors {
                            tr {
                                td.num { (e.attempt) }
                                td { (time(e.at)) }
                                td { span.class { (e.class) } }
                                td { pre { (e.message) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn steps_section(shown: &ShownSteps, job_id: i64) -> Markup {
    let steps = &shown.steps;
    html! {
        section.steps {
            h2 { "Steps" }
            @if steps.is_empty() {
                p.muted { "No step recorded." }
            } @else {
                table.steps {
                    thead { tr { th { "step" } th.num { "attempt" } th { "recorded" } th { "output" } } }
                    tbody {
                        @for s in steps {
                            tr {
                                td { code { (s.name) } }
                                td.num { (s.attempt) }
                                td { (time(s.recorded_at)) }
                                td {
                                    @match &s.output {
                                        Some(output) => pre { (exact(output, s.output_text.as_deref(), SHOWN_STEP)) },
                                        None => span.muted { (s.output_bytes) " bytes of JSON, more than a page shows: `job show " (job_id) "` prints it" },
                                    }
                                }
                            }
                        }
                    }
                }
                @if shown.more {
                    p.muted { "Only the first " (SHOW_STEPS.max_steps) " steps are shown: `job show " (job_id) "` prints them all." }
                }
            }
        }
    }
}
