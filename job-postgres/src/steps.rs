//! Durable steps: loading a job's recorded step outputs and recording one under its lease.

use std::collections::HashMap;

use job_core::{Finalized, JobId, Lease, StepLimit, StoreError};
use sqlx::PgExecutor;

use crate::error::Error;
use crate::sql;

/// Every recorded step output of job `id`, by name (see `sql/step_load.sql`).
pub(crate) async fn load<'e, E: PgExecutor<'e>>(
    executor: E,
    id: JobId,
) -> Result<HashMap<String, String>, Error> {
    let rows: Vec<(String, String)> = sqlx::query_as(sql::STEP_LOAD)
        .bind(id)
        .fetch_all(executor)
        .await
        .map_err(Error::query("step_load"))?;
    Ok(rows.into_iter().collect())
}

/// The recorded step outputs of job `id` in name order, up to `max_bytes` of names and
/// outputs, and whether that is all of them (see `sql/step_load_up_to.sql`).
pub(crate) async fn load_up_to<'e, E: PgExecutor<'e>>(
    executor: E,
    id: JobId,
    max_bytes: usize,
) -> Result<(HashMap<String, String>, bool), Error> {
    let rows: Vec<(String, Option<String>, i64)> = sqlx::query_as(sql::STEP_LOAD_UP_TO)
        .bind(id)
        .bind(i64::try_from(max_bytes).unwrap_or(i64::MAX))
        .fetch_all(executor)
        .await
        .map_err(Error::query("step_load_up_to"))?;
    let total = rows.first().map_or(0, |(_, _, total)| *total);
    let loaded: HashMap<String, String> = rows
        .into_iter()
        .filter_map(|(name, output, _)| Some((name, output?)))
        .collect();
    let complete = usize::try_from(total).is_ok_and(|total| total == loaded.len());
    Ok((loaded, complete))
}

/// The recorded output of step `name` of job `id` (see `sql/step_load_one.sql`).
pub(crate) async fn load_one<'e, E: PgExecutor<'e>>(
    executor: E,
    id: JobId,
    name: &str,
) -> Result<Option<String>, Error> {
    sqlx::query_scalar(sql::STEP_LOAD_ONE)
        .bind(id)
        .bind(name)
        .fetch_optional(executor)
        .await
        .map_err(Error::query("step_load_one"))
}

/// Records step `name`'s output, guarded by (id, lock_token) and running
/// (see `sql/step_save.sql`); [`Finalized::Busy`] when another transaction held the job's row.
/// A new step past the job's limits is refused: [`StepLimit`], inside a refused
/// [`StoreError`], nothing recorded.
pub(crate) async fn save<'e, E: PgExecutor<'e>>(
    executor: E,
    lease: &Lease,
    name: &str,
    output: &str,
) -> Result<Finalized, StoreError> {
    let limit = |max: usize| i64::try_from(max).unwrap_or(i64::MAX);
    let (held, running, steps, bytes): (i64, i64, Option<i64>, Option<i64>) =
        sqlx::query_as(sql::STEP_SAVE)
            .bind(lease.id)
            .bind(lease.token)
            .bind(name)
            .bind(output)
            .bind(limit(job_core::MAX_STEPS))
            .bind(limit(job_core::MAX_STEPS_TOTAL))
            .fetch_one(executor)
            .await
            .map_err(Error::query("step_save"))?;
    if let (Some(steps), Some(bytes)) = (steps, bytes) {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        let output = u64::try_from(output.len()).unwrap_or(u64::MAX);
        let refused = StepLimit::new(lease.id, name, count(steps), count(bytes), output);
        return Err(StoreError::refused(refused));
    }
    Ok(if held > 0 {
        Finalized::Applied
    } else if running > 0 {
        Finalized::Busy
    } else {
        Finalized::LeaseLost
    })
}
