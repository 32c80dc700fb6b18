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

/// The most bytes of payloads, results, error histories and step outputs one prune
/// transaction deletes (beyond a first job over it alone). SQLite walks every overflow page it
/// frees, with the file's write lock held: 1,000 completed jobs of 1 MiB took 0.5-1.1 s in one
/// batch, and every write of every process sharing the file waited behind it. In
/// transactions of 16 MiB, an enqueue every 2 ms meanwhile waited at most 21-34 ms (612-984 ms
/// before), and the whole prune took 655-794 ms (613-989 ms).
pub(crate) const PRUNE_BYTES: i64 = 16 * 1024 * 1024;

/// What one prune transaction did: how many jobs it deleted, and whether more may be due (it
/// stopped at its bytes before the jobs it picked ran out, or it picked as many as it could).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PruneBatch {
    pub(crate) deleted: u64,
    pub(crate) more: bool,
}

/// Deletes one batch of finished jobs past their retention, oldest first: at most `rows` of
/// them, and no more than `bytes` of their payloads, results, error histories and step outputs
/// (a first job over it alone is deleted all the same).
pub(crate) async fn prune(
    conn: &mut SqliteConnection,
    request: &PruneRequest,
    rows: u32,
    bytes: i64,
) -> Result<PruneBatch, Error> {
    let now = now(&mut *conn).await?;
    let due: Vec<(JobId, i64)> = sqlx::query_as(sql::PRUNE)
        .bind(now.saturating_sub(micros(request.completed_retention)))
        .bind(now.saturating_sub(micros(request.cancelled_retention)))
        .bind(i64::from(rows))
        .fetch_all(&mut *conn)
        .await
        .map_err(Error::query("prune"))?;
    let mut ids = Vec::with_capacity(due.len());
    let mut sum: i64 = 0;
    for &(id, size) in &due {
        let after = sum.saturating_add(size.max(0));
        if !ids.is_empty() && after > bytes {
            break;
        }
        ids.push(id);
        sum = after;
    }
    if ids.is_empty() {
        return Ok(PruneBatch {
            deleted: 0,
            more: false,
        });
    }
    let done = sqlx::query(sql::PRUNE_IDS)
        .bind(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()))
        .execute(&mut *conn)
        .await
        .map_err(Error::query("prune_ids"))?;
    Ok(PruneBatch {
        deleted: done.rows_affected(),
        more: ids.len() < due.len()
            || u64::try_from(due.len()).unwrap_or(u64::MAX) >= u64::from(rows),
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::tests::plan_store;

    /// Inserts `n` completed jobs finished long ago, each with a payload of about 1 MiB, or an
    /// empty one and a step of about 2 MiB; returns the bytes one job frees, as prune.sql
    /// counts them.
    async fn large_rows(conn: &mut SqliteConnection, n: i64, in_steps: bool) -> i64 {
        for i in 0..n {
            let payload = if in_steps {
                "'{}'"
            } else {
                "json_object('pad', substr(hex(zeroblob(524000)), 1, 1048000))"
            };
            sqlx::query(&format!(
                "INSERT INTO job_jobs (kind, queue, payload, run_at, created_at, state,
                                       finalized_at)
                 VALUES ('k', 'q', {payload}, 1000000, 1000000, 'completed', 1000000 + ?1)"
            ))
            .bind(i)
            .execute(&mut *conn)
            .await
            .unwrap();
            if in_steps {
                sqlx::query(
                    "INSERT INTO job_steps (job_id, name, output, attempt, recorded_at)
                     VALUES (last_insert_rowid(), 's',
                             json_quote(substr(hex(zeroblob(1000000)), 1, 2000000)), 1, 0)",
                )
                .execute(&mut *conn)
                .await
                .unwrap();
            }
        }
        sqlx::query_scalar(
            "SELECT octet_length(payload) + octet_length(errors)
                    + coalesce((SELECT sum(octet_length(output)) FROM job_steps
                                WHERE job_id = j.id), 0)
             FROM job_jobs j LIMIT 1",
        )
        .fetch_one(&mut *conn)
        .await
        .unwrap()
    }

    /// Everything finished before now.
    const ALL: PruneRequest = PruneRequest {
        completed_retention: std::time::Duration::ZERO,
        cancelled_retention: std::time::Duration::ZERO,
        batch: 1000,
    };

    #[tokio::test]
    async fn a_prune_batch_of_large_jobs_stops_at_its_bytes_before_its_rows() {
        // One batch of 1,000 jobs of 1 MiB held the file's write lock about a second.
        let (dir, store) = plan_store("prune-bytes").await;
        let mut conn = store.pool().acquire().await.unwrap();
        for in_steps in [false, true] {
            let size = large_rows(&mut conn, 40, in_steps).await;
            assert!(size > 1_000_000, "{size}");
            let fit = PRUNE_BYTES / size;
            let batch = prune(&mut conn, &ALL, 1000, PRUNE_BYTES).await.unwrap();
            assert_eq!(
                batch,
                PruneBatch {
                    deleted: u64::try_from(fit).unwrap(),
                    more: true,
                },
                "{} of {size} bytes each (steps: {in_steps})",
                PRUNE_BYTES
            );
            // A job over the bytes alone is deleted all the same.
            let one = prune(&mut conn, &ALL, 1000, 1).await.unwrap();
            assert_eq!(
                one,
                PruneBatch {
                    deleted: 1,
                    more: true
                }
            );
            // As many as asked for: more may be due.
            let two = prune(&mut conn, &ALL, 2, i64::MAX).await.unwrap();
            assert_eq!(
                two,
                PruneBatch {
                    deleted: 2,
                    more: true
                }
            );
            // Fewer than asked for, none left out: none is due any more.
            let left = 40 - u64::try_from(fit).unwrap() - 3;
            let rest = prune(&mut conn, &ALL, 1000, i64::MAX).await.unwrap();
            assert_eq!(
                rest,
                PruneBatch {
                    deleted: left,
                    more: false
                }
            );
            let steps: i64 = sqlx::query_scalar("SELECT count(*) FROM job_steps")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            assert_eq!(steps, 0, "steps go with their jobs");
        }
        drop(conn);
        store.pool().close().await;
        std::fs::remove_dir_all(dir).unwrap();
    }
}
