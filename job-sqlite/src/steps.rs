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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::tests::plan_store;

    /// What `step_room.sql` answers for job `id` and step `item-7`.
    async fn room(conn: &mut SqliteConnection, id: JobId) -> (i64, i64, bool) {
        sqlx::query_as(sql::STEP_ROOM)
            .bind(id)
            .bind("item-7")
            .fetch_one(conn)
            .await
            .unwrap()
    }

    /// Job `id`'s steps and their bytes, counted.
    async fn counted(conn: &mut SqliteConnection, id: JobId) -> (i64, i64) {
        sqlx::query_as(
            "SELECT count(*), coalesce(sum(octet_length(output)), 0) FROM job_steps
             WHERE job_id = ?1",
        )
        .bind(id)
        .fetch_one(conn)
        .await
        .unwrap()
    }

    /// `step_room.sql` reads the job's row of `job_step_totals` and probes `job_steps` for the
    /// name, never the job's range of steps (which it counted and summed on every save, under
    /// the write lock), with or without statistics; and the totals follow the steps through
    /// every writer: inserts, an update, a delete, and the job's deletion (the cascade).
    #[tokio::test]
    async fn a_saves_room_reads_the_totals_not_the_jobs_steps() {
        let (dir, store) = plan_store("steps").await;
        let mut conn = store.pool().acquire().await.unwrap();
        let now = now(&mut conn).await.unwrap();
        let id: JobId = sqlx::query_scalar(
            "INSERT INTO job_jobs (kind, queue, priority, payload, run_at, state, created_at)
             VALUES ('k', 'q', 0, '{}', ?1, 'available', ?1) RETURNING id",
        )
        .bind(now)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        sqlx::query(
            "WITH RECURSIVE s(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM s WHERE i < 2999)
             INSERT INTO job_steps (job_id, name, output, attempt, recorded_at)
             SELECT ?1, 'item-' || i, CAST(i AS TEXT), 1, 0 FROM s",
        )
        .bind(id)
        .execute(&mut *conn)
        .await
        .unwrap();
        for analyzed in [false, true] {
            if analyzed {
                sqlx::query("ANALYZE").execute(&mut *conn).await.unwrap();
            }
            let rows: Vec<(i64, i64, i64, String)> =
                sqlx::query_as(&format!("EXPLAIN QUERY PLAN {}", sql::STEP_ROOM))
                    .bind(id)
                    .bind("item-7")
                    .fetch_all(&mut *conn)
                    .await
                    .unwrap();
            let plan: Vec<String> = rows.into_iter().map(|r| r.3).collect();
            let steps: Vec<&String> = plan.iter().filter(|p| p.contains("job_steps")).collect();
            assert!(
                !steps.is_empty()
                    && steps.iter().all(|p| p.contains("(job_id=? AND name=?)"))
                    && plan.iter().all(|p| !p.contains("(job_id=?)")),
                "analyzed: {analyzed}: {plan:#?}"
            );
        }
        let (steps, bytes, named) = room(&mut conn, id).await;
        assert_eq!((steps, bytes), counted(&mut conn, id).await);
        assert_eq!(steps, 3000);
        assert!(named);
        sqlx::raw_sql(&format!(
            "DELETE FROM job_steps WHERE job_id = {id} AND name LIKE 'item-1%';
             UPDATE job_steps SET output = '\"longer\"' WHERE job_id = {id} AND name = 'item-2'"
        ))
        .execute(&mut *conn)
        .await
        .unwrap();
        let (steps, bytes, _) = room(&mut conn, id).await;
        assert_eq!(steps, 3000 - 1111);
        assert_eq!((steps, bytes), counted(&mut conn, id).await);
        sqlx::query("DELETE FROM job_jobs WHERE id = ?1")
            .bind(id)
            .execute(&mut *conn)
            .await
            .unwrap();
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM job_step_totals")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(left, 0, "gone with the job's steps");
        drop(conn);
        store.pool().close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
