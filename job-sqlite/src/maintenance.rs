//! The statements behind the pruner: [`Store::prune`](job_core::Store::prune) and
//! [`Store::expire`](job_core::Store::expire).

use job_core::{Expired, JobId, PruneRequest};
use sqlx::SqliteConnection;

use crate::error::Error;
use crate::history;
use crate::lease;
use crate::sql;
use crate::text::Text;
use crate::time::{micros, now, to_time};

/// Deletes one bounded batch of finished jobs past their retention.
pub(crate) async fn prune(
    conn: &mut SqliteConnection,
    request: &PruneRequest,
) -> Result<u64, Error> {
    let now = now(&mut *conn).await?;
    let done = sqlx::query(sql::PRUNE)
        .bind(now.saturating_sub(micros(request.completed_retention)))
        .bind(now.saturating_sub(micros(request.cancelled_retention)))
        .bind(i64::from(request.batch))
        .execute(&mut *conn)
        .await
        .map_err(Error::query("prune"))?;
    Ok(done.rows_affected())
}

/// Ends one bounded batch of waiting jobs past their deadline or with cancellation requested,
/// each in a savepoint: a row the database refuses is skipped ([`lease::settle_row`]).
pub(crate) async fn expire(
    conn: &mut SqliteConnection,
    limit: u32,
    skip: &str,
) -> Result<(Expired, Vec<JobId>), Error> {
    let now = now(&mut *conn).await?;
    let ending: Vec<(JobId, i32, Text, bool, Option<i64>)> = sqlx::query_as(sql::EXPIRE_PICK)
        .bind(now)
        .bind(i64::from(limit))
        .bind(skip)
        .fetch_all(&mut *conn)
        .await
        .map_err(Error::query("expire_pick"))?;
    let mut expired = Expired::default();
    let mut refused = Vec::new();
    let before = lease::last_id(&mut *conn).await?;
    let mut discarded = Vec::new();
    for (id, attempt, errors, cancel, deadline) in ending {
        let (class, message) = if cancel {
            (
                "cancelled",
                "cancellation was requested while it ran".to_owned(),
            )
        } else {
            let deadline = to_time(deadline.unwrap_or(now));
            (
                "expired",
                format!(
                    "deadline {} passed before the job started",
                    deadline.format("%Y-%m-%dT%H:%M:%S%.3fZ")
                ),
            )
        };
        let errors = history::push(&errors.0, attempt, now, class, &message);
        let mut savepoint = lease::row_savepoint(conn).await?;
        let written: Result<Option<String>, Error> = sqlx::query_scalar(sql::EXPIRE)
            .bind(id)
            .bind(now)
            .bind(errors)
            .fetch_optional(&mut *savepoint)
            .await
            .map_err(Error::query("expire"));
        let Some(state) = lease::settle_row(savepoint, written, id, "the expirer").await? else {
            refused.push(id);
            continue;
        };
        match state.as_deref() {
            Some("cancelled") => expired.cancelled += 1,
            Some(_) => {
                expired.discarded += 1;
                discarded.push(id);
            }
            None => {}
        }
    }
    lease::omit_unreadable_payloads(&mut *conn, &discarded, before).await?;
    Ok((expired, refused))
}
