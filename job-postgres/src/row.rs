//! Reading a job row back into [`JobRow`].

use job_core::{AttemptError, JobId, JobRow, JobState};
use sqlx::postgres::{PgRow, PgValueFormat};
use sqlx::{PgExecutor, Row};

use crate::error::Error;
use crate::sql;

/// Reads one job by id; with `tenant`, only a job of that tenant.
pub(crate) async fn get<'e, E: PgExecutor<'e>>(
    executor: E,
    id: JobId,
    tenant: Option<&str>,
) -> Result<Option<JobRow>, Error> {
    let row = sqlx::query(sql::GET)
        .bind(id)
        .bind(tenant)
        .fetch_optional(executor)
        .await
        .map_err(Error::query("get"))?;
    row.map(|row| decode(id, &row)).transpose()
}

/// Maps a decoding failure of `column` of job `id` to an error naming both.
pub(crate) fn column_error(id: JobId, column: &'static str) -> impl Fn(sqlx::Error) -> Error {
    move |e: sqlx::Error| Error::Decode {
        id,
        column,
        reason: e.to_string(),
    }
}

/// The row's `state`, as read by [`decode`] and by the listing's summaries.
pub(crate) fn state(id: JobId, row: &PgRow) -> Result<JobState, Error> {
    let state: String = row.try_get("state").map_err(column_error(id, "state"))?;
    parse_state(id, &state)
}

/// Job `id`'s state, as a statement returned it in text.
pub(crate) fn parse_state(id: JobId, state: &str) -> Result<JobState, Error> {
    state
        .parse()
        .map_err(|e: job_core::UnknownState| Error::Decode {
            id,
            column: "state",
            reason: e.to_string(),
        })
}

/// The row's tags. Leniently: a NULL among them, which no door lets in any more, is skipped.
pub(crate) fn tags(id: JobId, row: &PgRow) -> Result<Vec<String>, Error> {
    let tags: Vec<Option<String>> = row.try_get("tags").map_err(column_error(id, "tags"))?;
    Ok(tags.into_iter().flatten().collect())
}

/// What an entry of the error history that does not read as one says instead.
pub(crate) const UNREADABLE_ERROR: &str =
    "this entry of the error history is not {attempt, at, class, message}";

pub(crate) fn decode(id: JobId, row: &PgRow) -> Result<JobRow, Error> {
    let column = |column: &'static str| column_error(id, column);
    let state = state(id, row)?;
    // Leniently: an entry that does not read as an `AttemptError` (a raw INSERT may write any
    // JSON array there) is shown as such rather than making the whole row, or a listing,
    // unreadable.
    let created_at = row.try_get("created_at").map_err(column("created_at"))?;
    let errors = match json(row, "errors").map_err(column("errors"))? {
        Some(serde_json::Value::Array(entries)) => entries,
        Some(other) => vec![other],
        None => Vec::new(),
    };
    let errors = errors
        .into_iter()
        .map(|entry| {
            serde_json::from_value(entry).unwrap_or_else(|_| AttemptError {
                attempt: 0,
                at: created_at,
                class: "unreadable".into(),
                message: UNREADABLE_ERROR.into(),
            })
        })
        .collect();
    Ok(JobRow {
        id: row.try_get("id").map_err(column("id"))?,
        kind: row.try_get("kind").map_err(column("kind"))?,
        queue: row.try_get("queue").map_err(column("queue"))?,
        priority: row.try_get("priority").map_err(column("priority"))?,
        state,
        payload: json(row, "payload")
            .map_err(column("payload"))?
            .unwrap_or_default(),
        payload_version: row
            .try_get("payload_version")
            .map_err(column("payload_version"))?,
        attempt: row.try_get("attempt").map_err(column("attempt"))?,
        max_attempts: row
            .try_get("max_attempts")
            .map_err(column("max_attempts"))?,
        run_at: row.try_get("run_at").map_err(column("run_at"))?,
        lock_token: row.try_get("lock_token").map_err(column("lock_token"))?,
        locked_until: row
            .try_get("locked_until")
            .map_err(column("locked_until"))?,
        locked_by: row.try_get("locked_by").map_err(column("locked_by"))?,
        cancel_requested: row
            .try_get("cancel_requested")
            .map_err(column("cancel_requested"))?,
        errors,
        created_at,
        finalized_at: row
            .try_get("finalized_at")
            .map_err(column("finalized_at"))?,
        deadline: row.try_get("deadline").map_err(column("deadline"))?,
        unique_key: row.try_get("unique_key").map_err(column("unique_key"))?,
        tags: tags(id, row)?,
        tenant: row.try_get("tenant").map_err(column("tenant"))?,
        stuck_since: row.try_get("stuck_since").map_err(column("stuck_since"))?,
        progress: json(row, "progress").map_err(column("progress"))?,
        progress_at: row.try_get("progress_at").map_err(column("progress_at"))?,
        traceparent: row
            .try_get("trace_context")
            .map_err(column("trace_context"))?,
        owner: row.try_get("owner").map_err(column("owner"))?,
        result: json(row, "result").map_err(column("result"))?,
        ordering_key: row
            .try_get("ordering_key")
            .map_err(column("ordering_key"))?,
        rate_key: row.try_get("rate_key").map_err(column("rate_key"))?,
    })
}

/// A `jsonb` column, read leniently: a value that serde_json does not read back (nested deeper
/// than its limit of 128 levels, which PostgreSQL stores from any door) reads as its text, in a
/// JSON string, rather than making its row, and every listing that holds it, unreadable.
pub(crate) fn json(row: &PgRow, column: &str) -> Result<Option<serde_json::Value>, sqlx::Error> {
    match row.try_get::<Option<serde_json::Value>, _>(column) {
        Err(sqlx::Error::ColumnDecode { .. }) => {
            let raw = row.try_get_raw(column)?;
            let bytes = raw.as_bytes().map_err(|source| sqlx::Error::ColumnDecode {
                index: column.to_owned(),
                source,
            })?;
            // The binary form of jsonb is a version byte (1), then the text.
            let text = match (raw.format(), bytes.split_first()) {
                (PgValueFormat::Binary, Some((1, text))) => text,
                _ => bytes,
            };
            Ok(Some(serde_json::Value::String(
                String::from_utf8_lossy(text).into_owned(),
            )))
        }
        read => read,
    }
}
