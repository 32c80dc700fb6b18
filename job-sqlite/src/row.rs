//! Reading a job row back into [`JobRow`].

use job_core::{AttemptError, JobId, JobRow, JobState};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteExecutor};
use uuid::Uuid;

use crate::error::Error;
use crate::sql;
use crate::text;
use crate::time::to_time;

/// Reads one job by id; with `tenant`, only a job of that tenant.
pub(crate) async fn get<'e, E: SqliteExecutor<'e>>(
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

/// A row of the columns of `sql/get.sql` as a [`JobRow`].
pub(crate) fn decode(id: JobId, row: &SqliteRow) -> Result<JobRow, Error> {
    let column = |column: &'static str| {
        move |e: sqlx::Error| Error::Decode {
            id,
            column,
            reason: e.to_string(),
        }
    };
    // Leniently, as job-postgres reads them: a value serde_json does not read back (nested
    // deeper than its limit of 128 levels) reads as its text, in a JSON string, rather than
    // making its row, and every listing that holds it, unreadable.
    let lenient =
        |text: String| serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    let json = |name: &'static str| -> Result<serde_json::Value, Error> {
        Ok(lenient(text::get(row, name).map_err(column(name))?))
    };
    let time = |name: &'static str| -> Result<Option<chrono::DateTime<chrono::Utc>>, Error> {
        let us: Option<i64> = row.try_get(name).map_err(column(name))?;
        Ok(us.map(to_time))
    };
    let state: String = row.try_get("state").map_err(column("state"))?;
    let state: JobState = state
        .parse()
        .map_err(|e: job_core::UnknownState| Error::Decode {
            id,
            column: "state",
            reason: e.to_string(),
        })?;
    let created_at = time("created_at")?.unwrap_or_default();
    // Leniently, as job-postgres reads it: an entry that is not an `AttemptError` is shown as
    // such rather than making the whole row unreadable.
    let errors = match json("errors")? {
        serde_json::Value::Array(entries) => entries
            .into_iter()
            .map(|entry| {
                serde_json::from_value(entry).unwrap_or_else(|_| AttemptError {
                    attempt: 0,
                    at: created_at,
                    class: "unreadable".into(),
                    message: "this entry of the error history is not {attempt, at, class, message}"
                        .into(),
                })
            })
            .collect(),
        serde_json::Value::String(text) => vec![AttemptError {
            attempt: 0,
            at: created_at,
            class: "unreadable".into(),
            message: format!("the error history does not read as JSON: {text}"),
        }],
        _ => Vec::new(),
    };
    let tags = match json("tags")? {
        serde_json::Value::Array(tags) => tags
            .into_iter()
            .filter_map(|t| t.as_str().map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    let lock_token: Option<Uuid> = row.try_get("lock_token").map_err(column("lock_token"))?;
    Ok(JobRow {
        id: row.try_get("id").map_err(column("id"))?,
        kind: text::get(row, "kind").map_err(column("kind"))?,
        queue: text::get(row, "queue").map_err(column("queue"))?,
        priority: row.try_get("priority").map_err(column("priority"))?,
        state,
        payload: json("payload")?,
        payload_version: row
            .try_get("payload_version")
            .map_err(column("payload_version"))?,
        attempt: row.try_get("attempt").map_err(column("attempt"))?,
        max_attempts: row
            .try_get("max_attempts")
            .map_err(column("max_attempts"))?,
        run_at: time("run_at")?.unwrap_or_default(),
        lock_token,
        locked_until: time("locked_until")?,
        locked_by: text::get_opt(row, "locked_by").map_err(column("locked_by"))?,
        cancel_requested: row
            .try_get("cancel_requested")
            .map_err(column("cancel_requested"))?,
        errors,
        created_at,
        finalized_at: time("finalized_at")?,
        deadline: time("deadline")?,
        unique_key: text::get_opt(row, "unique_key").map_err(column("unique_key"))?,
        tags,
        tenant: text::get_opt(row, "tenant").map_err(column("tenant"))?,
        stuck_since: time("stuck_since")?,
        // Not stored by this backend yet (README, Backends).
        progress: None,
        progress_at: None,
        traceparent: None,
        owner: None,
        result: text::get_opt(row, "result")
            .map_err(column("result"))?
            .map(lenient),
        // Refused at the door by this backend (README, Backends).
        ordering_key: None,
        rate_key: None,
    })
}
