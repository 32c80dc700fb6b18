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

#[tokio::test]
async fn rows_stored_before_the_raw_bounds_keep_running_and_their_histories_are_cut() {
    // Before migration 0025 a row could hold an error history of any size (a raw write, or a
    // build before migration 0004) and any 55 characters as its trace, and the settings row
    // could be deleted. Such rows still claim, complete, rescue and cancel: job.push_error
    // cuts what it keeps, and an update that leaves `errors` as it was is not refused.
    let db = TestDb::new().await;
    let pool = db.pool();
    migrate_up_to(&pool, 22).await;
    let history = "(SELECT jsonb_agg(jsonb_build_object('attempt', i, 'at', now(), 'class',
                    'error', 'message', repeat('m', 200000))) FROM generate_series(1, 25) i)";
    let trace = "repeat('z', 55)";
    let ids: Vec<i64> = sqlx::query_scalar(&format!(
        "INSERT INTO job.jobs (kind, payload, errors, trace_context, state, attempt, max_attempts,
                               lock_token, locked_until, locked_by) VALUES
             ('legacy.big', '{{\"doc\": \"x\"}}', {history}, {trace}, 'available', 0, 25,
              NULL, NULL, NULL),
             ('legacy.comp', '{{}}', {history}, {trace}, 'running', 1, 1,
              gen_random_uuid(), now() - interval '1 minute', 'w'),
             ('legacy.waits', '{{}}', {history}, {trace}, 'available', 0, 25, NULL, NULL, NULL)
         RETURNING id"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    sqlx::raw_sql(
        "INSERT INTO job.compensations (kind, compensate_kind, compensate_queue)
             VALUES ('legacy.comp', 'legacy.undo', 'default');
         DELETE FROM job.settings;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let store = PgStore::new(pool.clone());
    store.migrate().await.unwrap();
    let limit: i32 = sqlx::query_scalar("SELECT payload_limit FROM job.settings")
        .fetch_one(&pool)
        .await
        .expect("the deleted settings row is back");
    assert_eq!(limit, 1024 * 1024);
    // The running row's last attempt started, its start recorded as a worker of this release
    // records one (migration 0044): without it, a rescue retries it, the attempt not counted.
    sqlx::query("UPDATE job.jobs SET started_lease = lock_token WHERE id = $1")
        .bind(ids[1])
        .execute(&pool)
        .await
        .unwrap();

    // Claimed and completed: finalize writes `errors = j.errors`, unchanged.
    let worker = Worker::builder(store.clone())
        .register::<Big>()
        .queue("default", 1)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    crate::common::reaches(&store, ids[0], JobState::Completed).await;
    worker.shutdown().await;
    // Rescued (and discarded, so compensated), and cancelled: both append an entry.
    store.rescue_expired(10).await.unwrap();
    assert_eq!(
        store.get(ids[1]).await.unwrap().unwrap().state,
        JobState::Discarded
    );
    assert_eq!(store.cancel(ids[2]).await.unwrap(), job::Cancelled::Now);
    let cut: Vec<(i64, i32, i32, Option<String>)> = sqlx::query_as(
        "SELECT id, jsonb_array_length(errors), octet_length(errors::text), errors -> -1 ->> 'class'
         FROM job.jobs WHERE id = ANY($1) ORDER BY id",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(cut[0].1, 25, "a completion keeps the history as it was");
    for (id, entries, bytes, last) in &cut[1..] {
        assert_eq!(*entries, 20, "job {id}");
        assert!(*bytes <= 2 * 1024 * 1024, "job {id}: {bytes} bytes");
        assert!(last.is_some(), "job {id}: the new entry is last");
    }
    let first: String =
        sqlx::query_scalar("SELECT errors -> 0 ->> 'message' FROM job.jobs WHERE id = $1")
            .bind(ids[1])
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(
        first.ends_with(" bytes cut]"),
        "{}",
        &first[first.len() - 40..]
    );
    let compensation: Option<String> =
        sqlx::query_scalar("SELECT trace_context FROM job.jobs WHERE kind = 'legacy.undo'")
            .fetch_one(&pool)
            .await
            .expect("the compensating job was enqueued, without the trace it could not carry");
    assert_eq!(compensation, None);
    db.close().await;
}

#[tokio::test]
async fn rows_the_checks_of_0022_refuse_are_repaired_and_claimed_again() {
    // Checks added NOT VALID leave old rows alone, but every UPDATE of one is checked: the
    // claim of a row whose tags were not indexed from 1 (which `job.enqueue` took until
    // migration 0022) failed, and with it every claim of its queue.
    let db = TestDb::new().await;
    let pool = db.pool();
    migrate_up_to(&pool, 21).await;
    let odd: i64 = sqlx::query_scalar(
        "SELECT job.enqueue('legacy.pair', '{}', tags => '[5:6]={a,b}'::text[])",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let plain: i64 = sqlx::query_scalar("SELECT job.enqueue('legacy.pair', '{}')")
        .fetch_one(&pool)
        .await
        .unwrap();
    let store = PgStore::new(pool.clone());
    store.migrate().await.unwrap();
    let tags: Vec<String> = sqlx::query_scalar("SELECT unnest(tags) FROM job.jobs WHERE id = $1")
        .bind(odd)
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(tags, ["a", "b"], "the same tags, in the same order");
    store.stage_due(u32::MAX).await.unwrap();
    let claimed = store
        .claim(&job_core::ClaimRequest {
            queue: "default".into(),
            kinds: vec![job_core::ClaimKind {
                kind: "legacy.pair".into(),
                max_version: 1,
                lease: Duration::from_secs(30),
                concurrency: None,
                rate: None,
            }],
            limit: 10,
            worker_id: "w".into(),
        })
        .await
        .expect("the claim takes both rows");
    let mut ids: Vec<i64> = claimed.iter().map(|c| c.lease.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [odd, plain]);
    db.close().await;
}
