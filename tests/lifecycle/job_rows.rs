//! A job's own rows in other tables (its recorded steps, its edges as a dependent) go with it,
//! whatever deletes it; and none is written for a job that does not exist (migration 0057:
//! set-based triggers in place of the foreign keys' per-row cascades).

use std::time::Duration;

use job::{Enqueue, JobId};
use job_core::{Pruner, PrunerConfig};
use sqlx::{Connection, PgConnection, PgPool};

use crate::common::*;
use crate::support::*;

/// Records a step of `job` by a raw write.
async fn step(pool: &PgPool, job: JobId, name: &str) {
    sqlx::query("INSERT INTO job.steps (job_id, name, output, attempt) VALUES ($1, $2, '{}', 1)")
        .bind(job)
        .bind(name)
        .execute(pool)
        .await
        .unwrap();
}

/// Steps and edges of `jobs` (their own: as a dependent).
async fn rows_of(pool: &PgPool, jobs: &[JobId]) -> (i64, i64) {
    sqlx::query_as(
        "SELECT (SELECT count(*) FROM job.steps WHERE job_id = ANY ($1)),
                (SELECT count(*) FROM job.dependencies WHERE job_id = ANY ($1))",
    )
    .bind(jobs)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A dependent of `on`, with two recorded steps.
async fn dependent_with_steps(pool: &PgPool, on: JobId) -> JobId {
    let id = Enqueue::new(Noop { n: 1 })
        .depends_on([on])
        .enqueue(pool)
        .await
        .unwrap();
    step(pool, id, "a").await;
    step(pool, id, "b").await;
    id
}

#[tokio::test]
async fn a_job_deleted_by_the_pruner_a_raw_delete_or_a_truncate_takes_its_steps_and_edges() {
    let h = Harness::new().await;
    let pool = h.store.pool();
    let later = Enqueue::new(Noop { n: 0 })
        .run_at(chrono::Utc::now() + chrono::Duration::days(1))
        .enqueue(pool)
        .await
        .unwrap();

    // The pruner: completed dependents past their retention, with steps and edges (edges
    // resolved, as the stager leaves them once the dependent ran).
    let pruned = [
        dependent_with_steps(pool, later).await,
        dependent_with_steps(pool, later).await,
        dependent_with_steps(pool, later).await,
    ];
    let kept = dependent_with_steps(pool, later).await;
    sqlx::query(
        "UPDATE job.dependencies SET flagged = true, resolved = true WHERE job_id = ANY ($1)",
    )
    .bind(&pruned[..])
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE job.jobs SET state = 'completed', finalized_at = now() - interval '2 hours'
         WHERE id = ANY ($1)",
    )
    .bind(&pruned[..])
    .execute(pool)
    .await
    .unwrap();
    assert_eq!(rows_of(pool, &pruned).await, (6, 3));
    let pass = Pruner::new(
        h.store.clone(),
        PrunerConfig {
            completed_retention: Duration::from_secs(3600),
            batch: 2,
            ..PrunerConfig::default()
        },
    )
    .run_once()
    .await
    .unwrap();
    assert_eq!(pass.deleted, 3);
    assert_eq!(
        rows_of(pool, &pruned).await,
        (0, 0),
        "pruned jobs' rows left"
    );
    assert_eq!(
        rows_of(pool, &[kept]).await,
        (2, 1),
        "a job not pruned lost rows"
    );

    // A raw DELETE, of a statement deleting no job too.
    sqlx::query("DELETE FROM job.jobs WHERE false")
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(rows_of(pool, &[kept]).await, (2, 1));
    sqlx::query("DELETE FROM job.jobs WHERE id = $1")
        .bind(kept)
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(
        rows_of(pool, &[kept]).await,
        (0, 0),
        "a raw DELETE left rows"
    );

    // A TRUNCATE, which the keys refused without CASCADE.
    let last = dependent_with_steps(pool, later).await;
    assert_eq!(rows_of(pool, &[last]).await, (2, 1));
    sqlx::query("TRUNCATE job.jobs")
        .execute(pool)
        .await
        .unwrap();
    let left: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM job.steps), (SELECT count(*) FROM job.dependencies)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(left, (0, 0), "a TRUNCATE left rows");

    // Nothing refers to job.jobs by a foreign key: a key's cascade is a query per deleted job.
    let keys: Vec<String> = sqlx::query_scalar(
        "SELECT conname::text FROM pg_constraint
         WHERE contype = 'f' AND confrelid = 'job.jobs'::regclass",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(keys.is_empty(), "foreign keys to job.jobs: {keys:?}");
}

#[tokio::test]
async fn a_step_or_an_edge_of_a_job_that_does_not_exist_is_refused_naming_the_key() {
    let h = Harness::new().await;
    let pool = h.store.pool();
    let on = enqueue(&h.store, Noop { n: 0 }).await;
    let gone = enqueue(&h.store, Noop { n: 1 }).await;
    exec(&h.store, "DELETE FROM job.jobs WHERE id = $1", gone).await;
    for (sql, key) in [
        (
            "INSERT INTO job.steps (job_id, name, output, attempt) VALUES ($1, 'a', '{}', 1)",
            "steps_job_id_fkey",
        ),
        (
            "INSERT INTO job.dependencies (job_id, depends_on, mode) VALUES ($1, $2, 'completed')",
            "dependencies_job_id_fkey",
        ),
    ] {
        let error = sqlx::query(sql)
            .bind(gone)
            .bind(on)
            .execute(pool)
            .await
            .expect_err("a row of a job that does not exist was written");
        let db = error.as_database_error().expect("a database error");
        assert_eq!(db.code().as_deref(), Some("23503"), "{error}");
        assert_eq!(db.constraint(), Some(key), "{error}");
        assert!(error.to_string().contains(key), "{error}");
        // Moved to a job that does not exist: refused too.
        let id = Enqueue::new(Noop { n: 2 })
            .depends_on([on])
            .enqueue(pool)
            .await
            .unwrap();
        step(pool, id, "a").await;
        let table = if key.starts_with("steps") {
            "steps"
        } else {
            "dependencies"
        };
        let moved = sqlx::query(&format!(
            "UPDATE job.{table} SET job_id = $1 WHERE job_id = $2"
        ))
        .bind(gone)
        .bind(id)
        .execute(pool)
        .await
        .expect_err("a row moved to a job that does not exist");
        assert_eq!(
            moved.as_database_error().and_then(|d| d.constraint()),
            Some(key),
            "{moved}"
        );
    }
    // A NULL job is the column's to refuse, as it was.
    let null = sqlx::query(
        "INSERT INTO job.steps (job_id, name, output, attempt) VALUES (NULL, 'a', '{}', 1)",
    )
    .execute(pool)
    .await
    .expect_err("a step of no job was written");
    assert_eq!(
        null.as_database_error().and_then(|d| d.code()).as_deref(),
        Some("23502"),
        "{null}"
    );
}

/// An edge written for a job that a DELETE then deletes before the edge's transaction commits:
/// the DELETE waits for that transaction (the write holds the job's row), and then deletes the
/// edge with the job. Without the lock the DELETE went first, found no committed edge, and the
/// edge committed after it, left for good with no job.
#[tokio::test]
async fn a_job_deleted_while_an_edge_of_it_is_being_written_takes_the_edge() {
    let h = Harness::new().await;
    let pool = h.store.pool();
    let on = enqueue(&h.store, Noop { n: 0 }).await;
    let dependent = enqueue(&h.store, Noop { n: 1 }).await;
    let url = h.db.url();
    let mut writer = PgConnection::connect(&url).await.unwrap();
    let mut tx = writer.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO job.dependencies (job_id, depends_on, mode) VALUES ($1, $2, 'completed')",
    )
    .bind(dependent)
    .bind(on)
    .execute(&mut *tx)
    .await
    .unwrap();
    let mut deleter = PgConnection::connect(&url).await.unwrap();
    let deleter_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut deleter)
        .await
        .unwrap();
    let delete = tokio::spawn(async move {
        sqlx::query("DELETE FROM job.jobs WHERE id = $1")
            .bind(dependent)
            .execute(&mut deleter)
            .await
            .map(|done| done.rows_affected())
    });
    eventually("the DELETE waits for the edge's transaction", || async {
        let waiting: bool = sqlx::query_scalar(
            "SELECT coalesce((SELECT wait_event_type = 'Lock' FROM pg_stat_activity
                              WHERE pid = $1), false)",
        )
        .bind(deleter_pid)
        .fetch_one(pool)
        .await
        .unwrap();
        waiting.then_some(())
    })
    .await;
    tx.commit().await.unwrap();
    assert_eq!(delete.await.unwrap().unwrap(), 1);
    assert_eq!(
        rows_of(pool, &[dependent]).await,
        (0, 0),
        "an edge outlived its job"
    );
}
