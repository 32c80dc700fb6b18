//! What the testkit needs of a store beyond the [`Store`] and [`Admin`] contract, for each
//! backend it supports: making scheduled jobs due at once (`Drain::with_scheduled`), and
//! reading what keeps a queue busy (`wait_until_idle`).

use std::future::Future;

use job_core::{Admin, JobId, Store};
#[cfg(feature = "postgres")]
use job_postgres::PgStore;
use job_sqlite::SqliteStore;

/// A store the testkit's [`Drain`](crate::Drain) and
/// [`wait_until_idle`](crate::wait_until_idle) run on: PostgreSQL's and SQLite's.
pub trait TestStore: Store + Admin {
    /// Makes every scheduled or retryable job of `queue` due now (a test's shortcut past
    /// run times; never used by the runtime).
    fn make_due(&self, queue: &str) -> impl Future<Output = ()> + Send;

    /// What keeps `queue` busy, per state: jobs running, due waiting ones, and pending ones
    /// that nothing active holds back any more (their dependencies finished, no job of their
    /// ordering key waiting or running). Empty when the queue is idle.
    fn busy(
        &self,
        queue: &str,
    ) -> impl Future<Output = Result<Vec<(String, i64)>, sqlx::Error>> + Send;

    /// When `queue` holds no job at all: the other queues with jobs waiting or running, and
    /// how many (at most 10 queues). Empty otherwise.
    fn busy_elsewhere(&self, queue: &str) -> impl Future<Output = Vec<(String, i64)>> + Send;

    /// Makes the lease of job `id` run out now, when it is running attempt `attempt` (under
    /// the lease `token`, when given), so that the next rescue pass takes it
    /// ([`Faults::rescue_at_once`](crate::Faults::rescue_at_once)'s shortcut past a crashed
    /// execution's lease). Returns the lease's token, or `None` when the job is not running
    /// so. Defaults to `None`: the lease runs out by itself.
    fn expire_lease(
        &self,
        id: JobId,
        attempt: i32,
        token: Option<&str>,
    ) -> impl Future<Output = Option<String>> + Send {
        let _ = (id, attempt, token);
        async { None }
    }
}

#[cfg(feature = "postgres")]
impl TestStore for PgStore {
    async fn make_due(&self, queue: &str) {
        sqlx::query(
            "UPDATE job.jobs SET run_at = now() WHERE queue = $1 \
             AND state IN ('scheduled', 'retryable') AND run_at > now()",
        )
        .bind(queue)
        .execute(self.pool())
        .await
        .expect("make scheduled jobs due");
    }

    async fn busy(&self, queue: &str) -> Result<Vec<(String, i64)>, sqlx::Error> {
        // A pending job counts once nothing it waits for is active: every job it depends on
        // finished, and no job of its ordering key waits or runs. The next stager pass moves
        // it on by itself (a dependent or a batch callback ran after "idle").
        sqlx::query_as(
            "SELECT state::text, count(*) FROM job.jobs j
             WHERE queue = $1 AND (state = 'running'
                   OR (state IN ('available', 'scheduled', 'retryable') AND run_at <= now())
                   OR (state = 'pending'
                       AND NOT EXISTS (
                           SELECT 1 FROM job.dependencies d
                           JOIN job.jobs w ON w.id = d.depends_on
                           WHERE d.job_id = j.id
                             AND w.state NOT IN ('completed', 'cancelled', 'discarded'))
                       AND NOT EXISTS (
                           SELECT 1 FROM job.jobs h
                           WHERE j.ordering_key IS NOT NULL
                             AND h.ordering_key = j.ordering_key
                             AND h.state IN ('scheduled', 'available', 'running',
                                             'retryable'))))
             GROUP BY state ORDER BY state",
        )
        .bind(queue)
        .fetch_all(self.pool())
        .await
    }

    async fn busy_elsewhere(&self, queue: &str) -> Vec<(String, i64)> {
        sqlx::query_as(
            "SELECT o.queue, count(*) FROM job.jobs o
             WHERE NOT EXISTS (SELECT 1 FROM job.jobs j WHERE j.queue = $1)
               AND o.state IN ('pending', 'scheduled', 'available', 'running', 'retryable')
             GROUP BY o.queue ORDER BY o.queue LIMIT 10",
        )
        .bind(queue)
        .fetch_all(self.pool())
        .await
        .unwrap_or_default()
    }
    async fn expire_lease(&self, id: JobId, attempt: i32, token: Option<&str>) -> Option<String> {
        // A millisecond before now: the rescue takes a lease that ran out before its now.
        sqlx::query_scalar(
            "UPDATE job.jobs SET locked_until = now() - interval '1 millisecond' \
             WHERE id = $1 AND attempt = $2 AND state = 'running' \
               AND ($3::text IS NULL OR lock_token::text = $3) \
             RETURNING lock_token::text",
        )
        .bind(id)
        .bind(attempt)
        .bind(token)
        .fetch_optional(self.pool())
        .await
        .ok()
        .flatten()
    }
}

impl TestStore for SqliteStore {
    async fn make_due(&self, queue: &str) {
        sqlx::query(
            "UPDATE job_jobs SET run_at = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000 \
             WHERE queue = ?1 AND state IN ('scheduled', 'retryable') \
             AND run_at > CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000",
        )
        .bind(queue)
        .execute(self.pool())
        .await
        .expect("make scheduled jobs due");
    }

    async fn busy(&self, queue: &str) -> Result<Vec<(String, i64)>, sqlx::Error> {
        // SQLite has no ordering keys or dependencies: nothing waits in `pending`.
        sqlx::query_as(
            "SELECT state, count(*) FROM job_jobs
             WHERE queue = ?1 AND (state = 'running'
                   OR (state IN ('available', 'scheduled', 'retryable')
                       AND run_at <= CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000))
             GROUP BY state ORDER BY state",
        )
        .bind(queue)
        .fetch_all(self.pool())
        .await
    }

    async fn busy_elsewhere(&self, queue: &str) -> Vec<(String, i64)> {
        sqlx::query_as(
            "SELECT o.queue, count(*) FROM job_jobs o
             WHERE NOT EXISTS (SELECT 1 FROM job_jobs j WHERE j.queue = ?1)
               AND o.state IN ('pending', 'scheduled', 'available', 'running', 'retryable')
             GROUP BY o.queue ORDER BY o.queue LIMIT 10",
        )
        .bind(queue)
        .fetch_all(self.pool())
        .await
        .unwrap_or_default()
    }

    async fn expire_lease(&self, id: JobId, attempt: i32, token: Option<&str>) -> Option<String> {
        sqlx::query_scalar(
            "UPDATE job_jobs \
             SET locked_until = CAST(round(unixepoch('subsec') * 1000) AS INTEGER) * 1000 - 1000 \
             WHERE id = ?1 AND attempt = ?2 AND state = 'running' \
               AND (?3 IS NULL OR hex(lock_token) = ?3) \
             RETURNING hex(lock_token)",
        )
        .bind(id)
        .bind(attempt)
        .bind(token)
        .fetch_optional(self.pool())
        .await
        .ok()
        .flatten()
    }
}
