//! Durable steps: loading a job's recorded step outputs and recording one under its lease.

use std::collections::HashMap;

use job_core::{Finalized, JobId, Lease};
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

/// Records step `name`'s output, guarded by (id, lock_token) and running
/// (see `sql/step_save.sql`).
pub(crate) async fn save<'e, E: PgExecutor<'e>>(
    executor: E,
    lease: &Lease,
    name: &str,
    output: &str,
) -> Result<Finalized, Error> {
    let held: i64 = sqlx::query_scalar(sql::STEP_SAVE)
        .bind(lease.id)
        .bind(lease.token)
        .bind(name)
        .bind(output)
        .fetch_one(executor)
        .await
        .map_err(Error::query("step_save"))?;
    Ok(if held > 0 {
        Finalized::Applied
    } else {
        Finalized::LeaseLost
    })
}
