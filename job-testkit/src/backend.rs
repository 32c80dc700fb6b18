//! What the testkit needs of a store beyond the [`Store`] and [`Admin`] contract, for each
//! backend it supports: making scheduled jobs due at once (`Drain::with_scheduled`).

use std::future::Future;

use job_core::{Admin, Store};
#[cfg(feature = "postgres")]
use job_postgres::PgStore;
use job_sqlite::SqliteStore;

/// A store the testkit's [`Drain`](crate::Drain) runs on: PostgreSQL's and SQLite's.
pub trait TestStore: Store + Admin {
    /// Makes every scheduled or retryable job of `queue` due now (a test's shortcut past
    /// run times; never used by the runtime).
    fn make_due(&self, queue: &str) -> impl Future<Output = ()> + Send;
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
}
