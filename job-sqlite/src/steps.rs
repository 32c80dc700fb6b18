//! Durable steps and completing a job in the caller's transaction.
//!
//! Steps are read as every reader of the file reads text ([`Text`]): bytes that are not UTF-8
//! (only a raw write stores them) are replaced, so that one such row does not fail every step
//! load of its job, and with it every attempt, until the job is a dead letter.

use std::collections::HashMap;

use job_core::{Finalized, JobContext, JobId, Lease, StepLimit, StoreError};
use sqlx::{SqliteConnection, SqliteExecutor};

use crate::error::Error;
use crate::lease::held;
use crate::sql;
use crate::text::Text;
use crate::time::now;

/// Every recorded step output of job `id`, by name (see `sql/step_load.sql`).
pub(crate) async fn load<'e, E: SqliteExecutor<'e>>(
    executor: E,
    id: JobId,
) -> Result<HashMap<String, String>, Error> {
    let rows: Vec<(Text, Text)> = sqlx::query_as(sql::STEP_LOAD)
        .bind(id)
        .fetch_all(executor)
        .await
        .map_err(Error::query("step_load"))?;
    Ok(rows
        .into_iter()
        .map(|(name, output)| (name.0, output.0))
        .collect())
}

/// The recorded step outputs of job `id` in name order, up to `max_bytes` of names and
/// outputs, and whether that is all of them (see `sql/step_load_up_to.sql`).
pub(crate) async fn load_up_to<'e, E: SqliteExecutor<'e>>(
    executor: E,
    id: JobId,
    max_bytes: usize,
) -> Result<(HashMap<String, String>, bool), Error> {
    let rows: Vec<(Text, Option<Text>, i64)> = sqlx::query_as(sql::STEP_LOAD_UP_TO)
        .bind(id)
        .bind(i64::try_from(max_bytes).unwrap_or(i64::MAX))
        .fetch_all(executor)
        .await
        .map_err(Error::query("step_load_up_to"))?;
    let total = rows.first().map_or(0, |(_, _, total)| *total);
    let loaded: HashMap<String, String> = rows
        .into_iter()
        .filter_map(|(name, output, _)| Some((name.0, output?.0)))
        .collect();
    let complete = usize::try_from(total).is_ok_and(|total| total == loaded.len());
    Ok((loaded, complete))
}

/// The recorded output of step `name` of job `id` (see `sql/step_load_one.sql`).
pub(crate) async fn load_one<'e, E: SqliteExecutor<'e>>(
    executor: E,
    id: JobId,
    name: &str,
) -> Result<Option<String>, Error> {
    let output: Option<Text> = sqlx::query_scalar(sql::STEP_LOAD_ONE)
        .bind(id)
        .bind(name)
        .fetch_optional(executor)
        .await
        .map_err(Error::query("step_load_one"))?;
    Ok(output.map(|t| t.0))
}

/// Records step `name`'s output, guarded by (id, lock_token) and running, inside the store's
/// immediate transaction (see `sql/step_save.sql`). A new step past the job's limits is
/// refused (`sql/step_room.sql`): [`StepLimit`], inside a refused [`StoreError`], nothing
/// recorded.
pub(crate) async fn save(
    conn: &mut SqliteConnection,
    lease: &Lease,
    name: &str,
    output: &str,
) -> Result<Finalized, StoreError> {
    if held(&mut *conn, lease).await?.is_none() {
        return Ok(Finalized::LeaseLost);
    }
    let (steps, bytes, named): (i64, i64, bool) = sqlx::query_as(sql::STEP_ROOM)
        .bind(lease.id)
        .bind(name)
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::query("step_room"))?;
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let size = u64::try_from(output.len()).unwrap_or(u64::MAX);
    if !named && !StepLimit::allows(count(steps), count(bytes), size) {
        let refused = StepLimit::new(lease.id, name, count(steps), count(bytes), size);
        return Err(StoreError::refused(refused));
    }
    let now = now(&mut *conn).await?;
    sqlx::query(sql::STEP_SAVE)
        .bind(lease.id)
        .bind(lease.token)
        .bind(name)
        .bind(output)
        .bind(now)
        .execute(&mut *conn)
        .await
        .map_err(Error::query("step_save"))?;
    Ok(Finalized::Applied)
}

/// Completes the job of `ctx` inside the caller's transaction, guarded by its lease
/// (`WHERE id = ?1 AND lock_token = ?2 AND state = 'running'`). Commit the transaction and the
/// completion and the handler's own rows are durable together; drop it (a `?`, a panic, a
/// crash) and neither is.
///
/// Returns [`Error::LeaseLost`] when the lease is gone (the job was rescued, released or
/// finalized elsewhere): let the `?` drop the transaction so the handler's rows roll back too.
/// On success the context is told, so the worker does not count its own later finalize (which
/// then finds the job finished) as a lost lease.
///
/// The job's result is what the handler set with [`JobContext::set_result`] before this call.
pub async fn complete_in(conn: &mut SqliteConnection, ctx: &JobContext) -> Result<(), Error> {
    let lease = ctx.lease();
    let completed: Option<i64> = sqlx::query_scalar(sql::COMPLETE_IN)
        .bind(lease.id)
        .bind(lease.token)
        .bind(ctx.result())
        .fetch_optional(&mut *conn)
        .await
        .map_err(Error::query("complete_in"))?;
    match completed {
        Some(_) => {
            ctx.finalized_in_transaction();
            Ok(())
        }
        None => Err(Error::LeaseLost { id: lease.id }),
    }
}
