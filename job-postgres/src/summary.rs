//! What a listing page shows of a job ([`JobSummary`]): the columns of `inspect_page.sql`,
//! which reads no payload, result, progress or error history.

use chrono::{DateTime, Utc};
use job_core::{JobId, JobState};
use sqlx::postgres::PgRow;
use sqlx::Row;

use crate::error::Error;
use crate::row as job_row;

/// Characters of the last error's class a [`JobSummary`] holds at most.
pub const SUMMARY_CLASS_CHARS: usize = 100;
/// Characters of the last error's message a [`JobSummary`] holds at most.
pub const SUMMARY_MESSAGE_CHARS: usize = 500;

/// One job of a listing page ([`Page`](crate::Page)): what a list shows, without the payload,
/// result, progress or error history, which [`Store::get`](job_core::Store::get) reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSummary {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// Its priority.
    pub priority: i16,
    /// Its state.
    pub state: JobState,
    /// Attempts started.
    pub attempt: i32,
    /// Attempts allowed.
    pub max_attempts: i32,
    /// When it is (or was) due.
    pub run_at: DateTime<Utc>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it finished, if it did.
    pub finalized_at: Option<DateTime<Utc>>,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its tenant.
    pub tenant: Option<String>,
    /// Since when it is reported stuck, if it is.
    pub stuck_since: Option<DateTime<Utc>>,
    /// Whether a cancel was requested.
    pub cancel_requested: bool,
    /// The last entry of its error history, cut short.
    pub last_error: Option<LastError>,
}

/// The last error of a [`JobSummary`]: its class and message, cut to
/// [`SUMMARY_CLASS_CHARS`] and [`SUMMARY_MESSAGE_CHARS`] characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastError {
    /// How it was classified; `unreadable` for an entry that is not `{class, message}`.
    pub class: String,
    /// The start of its message.
    pub message: String,
}

pub(crate) fn decode(row: &PgRow) -> Result<JobSummary, Error> {
    let id: JobId = row.try_get("id").map_err(Error::query("inspect_page"))?;
    let column = |column: &'static str| job_row::column_error(id, column);
    let state = job_row::state(id, row)?;
    let has_error: bool = row.try_get("has_error").map_err(column("has_error"))?;
    let class: Option<String> = row.try_get("error_class").map_err(column("error_class"))?;
    let message: Option<String> = row
        .try_get("error_message")
        .map_err(column("error_message"))?;
    let last_error = match (has_error, class, message) {
        (false, _, _) => None,
        (true, Some(class), Some(message)) => Some(LastError { class, message }),
        (true, _, _) => Some(LastError {
            class: "unreadable".into(),
            message: job_row::UNREADABLE_ERROR.into(),
        }),
    };
    Ok(JobSummary {
        id,
        kind: row.try_get("kind").map_err(column("kind"))?,
        queue: row.try_get("queue").map_err(column("queue"))?,
        priority: row.try_get("priority").map_err(column("priority"))?,
        state,
        attempt: row.try_get("attempt").map_err(column("attempt"))?,
        max_attempts: row
            .try_get("max_attempts")
            .map_err(column("max_attempts"))?,
        run_at: row.try_get("run_at").map_err(column("run_at"))?,
        created_at: row.try_get("created_at").map_err(column("created_at"))?,
        finalized_at: row
            .try_get("finalized_at")
            .map_err(column("finalized_at"))?,
        tags: job_row::tags(id, row)?,
        tenant: row.try_get("tenant").map_err(column("tenant"))?,
        stuck_since: row.try_get("stuck_since").map_err(column("stuck_since"))?,
        cancel_requested: row
            .try_get("cancel_requested")
            .map_err(column("cancel_requested"))?,
        last_error,
    })
}
