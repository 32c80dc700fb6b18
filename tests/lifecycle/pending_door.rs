//! A row written `pending` with nothing to wait for (no unresolved dependency, no ordering key
//! head) is released when its transaction commits (migration 0040): it was never run, and
//! `job check` said the queue reconciled.

use std::time::Duration;

use job::{JobId, JobState, Store as _};

use crate::common::*;
use crate::support::count;

/// Inserts a `pending` row of kind `test.raw` raw, with `extra` ("column=SQL value") if any.
async fn insert_pending(pool: &sqlx::PgPool, extra: &str) -> JobId {
    let (column, value) = match extra.split_once('=') {
        Some((c, v)) => (format!(", {c}"), format!(", {v}")),
        None => (String::new(), String::new()),
    };
    let (id,): (i64,) = sqlx::query_as(&format!(
        "INSERT INTO job.jobs (kind, payload, state{column}) \
         VALUES ('test.raw', '{{}}', 'pending'{value}) RETURNING id"
    ))
    .fetch_one(pool)
    .await
    .unwrap();
    id
}

#[tokio::test]
async fn a_raw_pending_row_without_key_or_dependency_becomes_available_at_commit() {
    let h = Harness::new().await;
    let pool = h.store.pool();
    let now = insert_pending(pool, "").await;
    assert_eq!(h.row(now).await.state, JobState::Available);
    let later = insert_pending(pool, "run_at=now() + interval '1 hour'").await;
    assert_eq!(h.row(later).await.state, JobState::Scheduled);
    // An operator's update to pending of a job that waits for nothing.
    sqlx::query("UPDATE job.jobs SET state = 'pending' WHERE id = $1")
        .bind(now)
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(h.row(now).await.state, JobState::Available);
}

#[tokio::test]
async fn a_raw_pending_row_whose_edges_follow_in_its_transaction_waits_for_them() {
    let h = Harness::new().await;
    let pool = h.store.pool();
    let parent = insert_pending(pool, "").await;
    let mut tx = pool.begin().await.unwrap();
    let (child,): (i64,) = sqlx::query_as(
        "INSERT INTO job.jobs (kind, payload, state) VALUES ('test.raw', '{}', 'pending')
         RETURNING id",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    sqlx::query(
        "INSERT INTO job.dependencies (job_id, depends_on, mode) VALUES ($1, $2, 'completed')",
    )
    .bind(child)
    .bind(parent)
    .execute(&mut *tx)
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        h.row(child).await.state,
        JobState::Pending,
        "it waits for its parent"
    );
    // And the Rust door's dependent too.
    let dependent = job::Enqueue::new(Noop { n: 1 })
        .depends_on([parent])
        .enqueue(pool)
        .await
        .unwrap();
    assert_eq!(h.row(dependent).await.state, JobState::Pending);
    sqlx::query("UPDATE job.jobs SET state = 'completed', finalized_at = now() WHERE id = $1")
        .bind(parent)
        .execute(pool)
        .await
        .unwrap();
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(child).await.state, JobState::Available);
    assert_eq!(h.row(dependent).await.state, JobState::Available);
}

#[tokio::test]
async fn a_raw_pending_row_of_a_key_without_a_head_wakes_its_key() {
    let h = Harness::new().await;
    let pool = h.store.pool();
    let alone = insert_pending(pool, "ordering_key='account:1'").await;
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.ordering_wake").await,
        1,
        "the key is on the wake-up list"
    );
    h.store.stage_due(100).await.unwrap();
    assert_eq!(
        h.row(alone).await.state,
        JobState::Available,
        "the key's head"
    );
    // Behind that head, a raw pending row of the key waits its turn.
    let behind = insert_pending(pool, "ordering_key='account:1'").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(behind).await.state, JobState::Pending);
    sqlx::query("UPDATE job.jobs SET state = 'completed', finalized_at = now() WHERE id = $1")
        .bind(alone)
        .execute(pool)
        .await
        .unwrap();
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(behind).await.state, JobState::Available);
}

#[tokio::test]
async fn check_flags_a_pending_row_that_waits_for_nothing() {
    let h = Harness::new().await;
    let pool = h.store.pool();
    let lease = Duration::from_secs(30);
    assert!(h.store.check(lease).await.unwrap().problems().is_empty());
    // A row stranded as before migration 0040.
    sqlx::query("ALTER TABLE job.jobs DISABLE TRIGGER jobs_pending_door")
        .execute(pool)
        .await
        .unwrap();
    let stranded = insert_pending(pool, "").await;
    let keyed = insert_pending(pool, "ordering_key='account:2'").await;
    sqlx::query("ALTER TABLE job.jobs ENABLE TRIGGER jobs_pending_door")
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(h.row(stranded).await.state, JobState::Pending);
    let check = h.store.check(lease).await.unwrap();
    assert_eq!(check.pending_stranded, 2);
    let problems = check.problems();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("2 pending job(s) wait for nothing")),
        "{problems:?}"
    );
    // Written pending again, they are released; the check reconciles.
    sqlx::query("UPDATE job.jobs SET state = 'pending' WHERE id IN ($1, $2)")
        .bind(stranded)
        .bind(keyed)
        .execute(pool)
        .await
        .unwrap();
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(stranded).await.state, JobState::Available);
    assert_eq!(h.row(keyed).await.state, JobState::Available);
    let check = h.store.check(lease).await.unwrap();
    assert_eq!(check.pending_stranded, 0);
    assert!(check.problems().is_empty(), "{:?}", check.problems());
}
