//! Existing data survives the migrations that bring the rules: rows written before them by
//! code that was allowed to write them keep running; times no reader can represent are
//! clamped, keeping their meaning.

use std::time::Duration;

use job::{Admin, Job, JobContext, JobError, JobFilter, JobState, PgStore, Store, Worker};
use job_testkit::TestDb;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

/// A hand-written job whose payload was a JSON array (a tuple struct), which the rules no
/// longer let in: its stored jobs must still run.
#[derive(Debug, Serialize, Deserialize)]
struct Pair(i64, bool);

impl Job for Pair {
    const KIND: &'static str = "legacy.pair";
    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Carries a big document: stored with a client limit of 4 MiB before the database had one.
#[derive(Debug, Serialize, Deserialize)]
struct Big {
    doc: String,
}

impl Job for Big {
    const KIND: &'static str = "legacy.big";
    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Drops the schema and applies the migrations up to `last` by hand, as an older build did.
async fn migrate_up_to(pool: &PgPool, last: i32) {
    sqlx::raw_sql(
        "DROP SCHEMA job CASCADE;
         CREATE SCHEMA job;
         CREATE TABLE job.schema_migrations (
             version integer PRIMARY KEY, name text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now());",
    )
    .execute(pool)
    .await
    .unwrap();
    for m in job_postgres::MIGRATIONS
        .iter()
        .filter(|m| m.version <= last)
    {
        sqlx::raw_sql(m.sql).execute(pool).await.unwrap();
        sqlx::query("INSERT INTO job.schema_migrations (version, name) VALUES ($1, $2)")
            .bind(m.version)
            .bind(m.name)
            .execute(pool)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn rows_written_before_the_rules_survive_the_migration_and_still_run() {
    let db = TestDb::new().await;
    let pool = db.pool();
    migrate_up_to(&pool, 3).await;
    let big = serde_json::json!({ "doc": "x".repeat(2 * 1024 * 1024) }).to_string();
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO job.jobs (kind, payload, run_at, deadline, state) VALUES
             ('legacy.pair', '[77, true]', now(), NULL, 'available'),
             ('legacy.big', $1::jsonb, now(), NULL, 'available'),
             ('legacy.never', '{}', 'infinity', NULL, 'scheduled'),
             ('legacy.long_ago', '{}', '-infinity', 'infinity', 'available'),
             (E'legacy\\u200bzero', '{}', now(), NULL, 'available')
         RETURNING id",
    )
    .bind(&big)
    .fetch_all(&pool)
    .await
    .unwrap();
    let store = PgStore::new(pool.clone());
    store.migrate().await.unwrap();

    let times: Vec<(String, String, Option<String>)> = sqlx::query_as(
        "SELECT kind, run_at::text, deadline::text FROM job.jobs WHERE id = ANY($1) ORDER BY id",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        times[2].1, "9999-12-31 23:59:59.999999+00",
        "`infinity` is still never"
    );
    assert_eq!(
        times[3].1, "0001-01-01 00:00:00+00",
        "`-infinity` is still long ago"
    );
    assert_eq!(times[3].2.as_deref(), Some("9999-12-31 23:59:59.999999+00"));
    let constraints: Vec<(String, bool)> = sqlx::query_as(
        "SELECT conname::text, convalidated FROM pg_constraint
         WHERE conrelid = 'job.jobs'::regclass AND conname LIKE 'jobs\\_%\\_check'
           AND conname IN ('jobs_run_at_check', 'jobs_deadline_check', 'jobs_created_at_check',
                           'jobs_finalized_at_check', 'jobs_locked_until_check')",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(constraints.len(), 5);
    assert!(
        constraints.iter().all(|(_, valid)| *valid),
        "{constraints:?}"
    );

    // Every row reads, lists and counts; the legacy jobs run to completion.
    assert_eq!(store.list(&JobFilter::default()).await.unwrap().len(), 5);
    store.stats(&JobFilter::default()).await.unwrap();
    let worker = Worker::builder(store.clone())
        .register::<Pair>()
        .register::<Big>()
        .queue("default", 2)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    for id in &ids[..2] {
        crate::common::reaches(&store, *id, JobState::Completed).await;
    }
    worker.shutdown().await;
    let zero = store.get(ids[4]).await.unwrap().unwrap();
    assert_eq!(zero.state, JobState::Available, "kept as it was");
    // An update that does not set its kind is not refused for it.
    assert_eq!(store.cancel(ids[4]).await.unwrap(), job::Cancelled::Now);
    db.close().await;
}
