//! What a prune reads follows what it deletes (PostgreSQL specifics; the pruning contract is in
//! `job_testkit::conformance::lifecycle`): dead letters, however many, and jobs still within
//! their retention are never read; nor, by a purge, the dead letters it does not delete.
//! Measured on the statement's own plan (`EXPLAIN ANALYZE`, rows read by every scan of
//! `job.jobs`), not by a clock.

mod store_support;

use std::time::Duration;

use job_core::{PruneRequest, Store};
use job_testkit::TestDb;
use serde_json::Value;
use sqlx::Row;
use store_support::rows_read;

/// The pruner's two statements (admin.rs runs them in one transaction): the first locks the
/// jobs to delete, the second deletes them.
const PRUNE_PICK: &str = include_str!("../job-postgres/src/sql/prune_pick.sql");
/// prune.sql with its fragment spliced in, as the store's sql.rs splices it.
fn prune_sql() -> String {
    include_str!("../job-postgres/src/sql/prune.sql").replace(
        "-- @verdicts\n",
        include_str!("../job-postgres/src/sql/verdicts.sql"),
    )
}

/// Inserts `n` jobs in the finished `state`, due and finished `age` ago (an SQL interval), the
/// oldest first; returns their ids in that order.
async fn finished(pool: &sqlx::PgPool, n: i64, state: &str, age: &str) -> Vec<i64> {
    sqlx::query_scalar(&format!(
        "INSERT INTO job.jobs (kind, queue, payload, state, attempt, run_at, finalized_at)
         SELECT 'p.kind', 'default', '{{}}', '{state}', 1, f, f
         FROM (SELECT g, now() - interval '{age}' - (($1::bigint - g) * interval '1 millisecond')
               FROM generate_series(1, $1::bigint) g) AS t(g, f)
         ORDER BY g
         RETURNING id"
    ))
    .bind(n)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// The jobs the `Delete on jobs` node of `plan` deleted.
fn deleted(plan: &Value) -> Option<f64> {
    if plan["Node Type"] == "ModifyTable" && plan["Relation Name"] == "jobs" {
        return plan["Actual Rows"].as_f64();
    }
    plan["Plans"].as_array()?.iter().find_map(deleted)
}

/// prune_pick.sql, or `sql` (it under `EXPLAIN`), with the arguments the store gives it.
fn pick<'q>(
    sql: &'q str,
    request: &PruneRequest,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sql)
        .bind(request.completed_retention.as_millis() as i64)
        .bind(request.cancelled_retention.as_millis() as i64)
        .bind(request.batch as i32)
}

/// Runs the prune's two statements under `EXPLAIN ANALYZE` in a transaction it rolls back;
/// returns (jobs deleted, rows of `job.jobs` both read).
async fn explain_prune(pool: &sqlx::PgPool, request: &PruneRequest) -> (f64, f64) {
    let mut tx = pool.begin().await.unwrap();
    let explain_pick = format!("EXPLAIN (ANALYZE, FORMAT JSON) {PRUNE_PICK}");
    let picking: Value = pick(&explain_pick, request)
        .fetch_one(&mut *tx)
        .await
        .unwrap()
        .get(0);
    // The same rows again, which this transaction holds now: the ids for the delete.
    let ids: Vec<i64> = pick(PRUNE_PICK, request)
        .fetch_all(&mut *tx)
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    let explain_delete = format!("EXPLAIN (ANALYZE, FORMAT JSON) {}", prune_sql());
    let (deleting,): (Value,) = sqlx::query_as(&explain_delete)
        .bind(&ids)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let (picking, deleting) = (&picking[0]["Plan"], &deleting[0]["Plan"]);
    (
        deleted(deleting).unwrap(),
        rows_read(picking) + rows_read(deleting),
    )
}

const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test]
async fn a_prune_reads_no_dead_letter_and_no_job_within_its_retention() {
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    // 20,000 dead letters, older than both retentions; 10 completed jobs past their retention
    // (an hour) and 2,000 within it; 3 cancelled jobs past theirs (a day) and 1,000 within it,
    // all of these older than the completed retention.
    let dead = finished(pool, 20_000, "discarded", "30 days").await;
    let completed = finished(pool, 10, "completed", "2 hours").await;
    finished(pool, 2_000, "completed", "1 minute").await;
    let cancelled = finished(pool, 3, "cancelled", "2 days").await;
    finished(pool, 1_000, "cancelled", "2 hours").await;
    // And 1,000 cancelled two days ago before their time, due tomorrow: kept until then, and
    // not read meanwhile (a periodic job's next period, cancelled ahead).
    sqlx::query(
        "INSERT INTO job.jobs (kind, queue, payload, state, attempt, run_at, finalized_at)
         SELECT 'p.kind', 'default', '{}', 'cancelled', 1, now() + interval '1 day',
                now() - interval '2 days'
         FROM generate_series(1, 1000)",
    )
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE job.jobs").execute(pool).await.unwrap();
    let request = PruneRequest {
        completed_retention: HOUR,
        cancelled_retention: 24 * HOUR,
        batch: 1000,
    };

    let (gone, read) = explain_prune(pool, &request).await;
    assert_eq!(
        gone, 13.0,
        "the 10 completed and 3 cancelled jobs past retention"
    );
    // The 13 it deletes, read by their state's scan and by the delete's primary-key lookup,
    // and nothing of the 20,000 dead letters, the 3,000 jobs within their retention or the
    // 1,000 cancelled ahead of their time.
    assert!(
        read <= 2.0 * gone,
        "the prune read {read} rows of job.jobs to delete {gone}"
    );

    assert_eq!(store.prune(&request).await.unwrap(), 13);
    let (gone, read) = explain_prune(pool, &request).await;
    assert_eq!((gone, read), (0.0, 0.0), "a pass with nothing to delete");
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM job.jobs WHERE id = ANY ($1)")
        .bind([completed, cancelled].concat())
        .fetch_all(pool)
        .await
        .unwrap();
    assert_eq!(left, Vec::<i64>::new());
    let (dead_left,): (i64,) =
        sqlx::query_as("SELECT count(*) FROM job.jobs WHERE state = 'discarded'")
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(dead_left, dead.len() as i64, "every dead letter kept");
    db.close().await;
}

#[tokio::test]
async fn a_prune_batch_takes_the_oldest_of_both_states_first() {
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool();
    // Past their retention, oldest first: cancelled 10 days ago, completed 5 days ago, then
    // these three.
    finished(pool, 1, "cancelled", "10 days").await;
    finished(pool, 1, "completed", "5 days").await;
    let cancelled_4d = finished(pool, 1, "cancelled", "4 days").await[0];
    let completed_3d = finished(pool, 1, "completed", "3 days").await[0];
    let completed_2d = finished(pool, 1, "completed", "2 days").await[0];
    let request = PruneRequest {
        completed_retention: 24 * HOUR,
        cancelled_retention: 24 * HOUR,
        batch: 2,
    };
    let left = || async {
        sqlx::query_scalar::<_, i64>("SELECT id FROM job.jobs ORDER BY id")
            .fetch_all(pool)
            .await
            .unwrap()
    };
    assert_eq!(store.prune(&request).await.unwrap(), 2);
    assert_eq!(left().await, [cancelled_4d, completed_3d, completed_2d]);
    assert_eq!(store.prune(&request).await.unwrap(), 2);
    assert_eq!(left().await, [completed_2d]);
    assert_eq!(store.prune(&request).await.unwrap(), 1);
    assert_eq!(store.prune(&request).await.unwrap(), 0);
    db.close().await;
}

/// purge.sql with its fragments spliced in, as the store's sql.rs splices them.
fn purge_sql() -> String {
    include_str!("../job-postgres/src/sql/purge.sql")
        .replace(
            "-- @dead_letters\n",
            include_str!("../job-postgres/src/sql/dead_letters.sql"),
        )
        .replace(
            "-- @job_filter\n",
            include_str!("../job-postgres/src/sql/job_filter.sql"),
        )
        .replace(
            "-- @verdicts\n",
            include_str!("../job-postgres/src/sql/verdicts.sql"),
        )
}

#[tokio::test]
async fn a_purge_of_the_dead_letters_seen_reads_about_what_it_deletes() {
    // The dashboard's "purge (or redrive) all matching" passes the time its page was read as
    // the end of a finalized range. The filter then said the state three times (its states,
    // its range's finished states, dead_letters.sql's own), the planner counted its share as
    // often, and read and sorted every dead letter (a review: 1,000,000, 1.1 s).
    let db = TestDb::new().await;
    let pool = db.store().pool().clone();
    finished(&pool, 20_000, "discarded", "1 hour").await;
    finished(&pool, 20_000, "completed", "1 hour").await;
    sqlx::query("UPDATE job.jobs SET kind = 'p.other' WHERE id % 2 = 0")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("ANALYZE job.jobs")
        .execute(&pool)
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    let (plan,): (Value,) =
        sqlx::query_as(&format!("EXPLAIN (ANALYZE, FORMAT JSON) {}", purge_sql()))
            .bind(Vec::<i64>::new())
            .bind(vec!["discarded"])
            .bind("p.kind")
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(None::<String>)
            .bind(None::<chrono::DateTime<chrono::Utc>>)
            .bind(Some(chrono::Utc::now()))
            .bind(100_i32)
            .bind(None::<String>)
            .fetch_one(&mut *tx)
            .await
            .unwrap();
    tx.rollback().await.unwrap();
    let plan = &plan[0]["Plan"];
    assert_eq!(deleted(plan), Some(100.0), "{plan}");
    let read = rows_read(plan);
    assert!(
        read <= 1_000.0,
        "a purge of 100 dead letters read {read} rows of job.jobs: {plan}"
    );
}
