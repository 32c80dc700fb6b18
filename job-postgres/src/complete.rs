//! Completing a job inside the handler's own transaction.

use job_core::JobContext;
use sqlx::PgConnection;

use crate::error::Error;
use crate::sql;

/// Completes the job of `ctx` inside the caller's transaction, guarded by its lease
/// (`WHERE id = $1 AND lock_token = $2 AND state = 'running'`). Commit the transaction and the
/// completion and the handler's own rows are durable together; drop it (a `?`, a panic, a
/// crash) and neither is.
///
/// Returns [`Error::LeaseLost`] when the lease is gone (the job was rescued, released or
/// finalized elsewhere): let the `?` drop the transaction so the handler's rows roll back too.
/// On success the context is told, so the worker does not count its own later finalize (which
/// then finds the job finished) as a lost lease; if the transaction rolls back after all, the
/// worker's finalize of what the handler returns still applies.
///
/// The job's result is what the handler set with [`JobContext::set_result`] before this call
/// (a `#[job]` function's return value is set only after it returns: set it here first).
///
/// ```no_run
/// # use job_core::{JobContext, JobError};
/// async fn perform(ctx: JobContext, order: i64) -> Result<(), JobError> {
///     let pool = ctx.state::<sqlx::PgPool>()?;
///     let mut tx = pool.begin().await?;
///     sqlx::query("UPDATE orders SET shipped = true WHERE id = $1")
///         .bind(order)
///         .execute(&mut *tx)
///         .await?;
///     job_postgres::complete_in(&mut tx, &ctx).await?;
///     tx.commit().await?;
///     Ok(())
/// }
/// ```
pub async fn complete_in(conn: &mut PgConnection, ctx: &JobContext) -> Result<(), Error> {
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
