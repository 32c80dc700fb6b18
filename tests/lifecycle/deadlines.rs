//! Deadlines: a job not started by its deadline never runs, and is discarded as expired.

use std::time::Duration;

use job::{Enqueue, JobState};
use job_core::Pruner;

use crate::common::*;

#[tokio::test]
async fn a_job_past_its_deadline_is_never_claimed_and_is_discarded_as_expired() {
    let h = Harness::new().await;
    let late = Enqueue::new(Noop { n: 1 })
        .deadline_in(Duration::from_secs(3600))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    // Past its deadline before any worker looks (an enqueue with a deadline already past is
    // refused: `a_deadline_the_job_could_never_start_before_is_refused_at_every_door`).
    sqlx::query("UPDATE job.jobs SET deadline = now() - interval '1 second' WHERE id = $1")
        .bind(late)
        .execute(h.store.pool())
        .await
        .unwrap();
    let on_time = Enqueue::new(Noop { n: 2 })
        .deadline_in(Duration::from_secs(3600))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let worker = h.worker().build().unwrap().start();
    h.reaches(on_time, JobState::Completed).await;
    assert_eq!(h.ledger.runs(late), 0, "never runs late");
    // Still waiting, or already discarded by the worker's own pruner pass: never running.
    assert_ne!(h.row(late).await.state, JobState::Running);
    worker.shutdown().await;

    let pass = Pruner::new(h.store.clone(), Default::default())
        .run_once()
        .await
        .unwrap();
    assert!(pass.expired.discarded <= 1);
    let row = h.row(late).await;
    assert_eq!(row.state, JobState::Discarded);
    let error = row.errors.last().unwrap();
    assert_eq!(error.class, "expired");
    let deadline = row.deadline.unwrap();
    assert!(
        error
            .message
            .contains(&deadline.format("%Y-%m-%dT%H:%M:%S").to_string()),
        "the message names the deadline: {}",
        error.message
    );
    assert_eq!(h.ledger.runs(late), 0);
}

#[tokio::test]
async fn the_workers_pruner_expires_deadlines_by_itself() {
    let h = Harness::new().await;
    // In a queue the worker does not claim from: only its expirer sees it.
    let late = Enqueue::new(Noop { n: 1 })
        .deadline_in(Duration::from_millis(1))
        .queue("nobody_claims")
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let worker = h
        .worker()
        .pruner(job_core::PrunerConfig {
            interval: Duration::from_millis(50),
            ..Default::default()
        })
        .build()
        .unwrap()
        .start();
    h.reaches(late, JobState::Discarded).await;
    assert_eq!(h.ledger.runs(late), 0);
    worker.shutdown().await;
}

/// A job whose deadline is not after both its run time and now could never start: refused at
/// every door that inserts one (migration 0033), naming `deadline`, where it was stored and
/// left for the expirer to make a dead letter of.
#[tokio::test]
async fn a_deadline_the_job_could_never_start_before_is_refused_at_every_door() {
    let h = Harness::new().await;
    let now = chrono::Utc::now();
    let refused = |result: Result<job::JobId, job::EnqueueError>| match result {
        Err(job::EnqueueError::InvalidOption { option, reason }) => {
            assert_eq!(option, "deadline");
            assert!(reason.contains("could never start"), "{reason}");
        }
        other => panic!("expected the deadline refused, got {other:?}"),
    };
    // The Rust door's mixed forms, which it cannot compare itself.
    refused(
        Enqueue::new(Noop { n: 1 })
            .run_at(now + chrono::Duration::hours(1))
            .deadline_in(Duration::from_secs(60))
            .enqueue(h.store.pool())
            .await,
    );
    refused(
        Enqueue::new(Noop { n: 2 })
            .schedule_in(Duration::from_secs(3600))
            .deadline(now + chrono::Duration::minutes(1))
            .enqueue(h.store.pool())
            .await,
    );
    refused(
        Enqueue::new(Noop { n: 3 })
            .deadline(now - chrono::Duration::seconds(1))
            .enqueue(h.store.pool())
            .await,
    );
    // The SQL doors and a raw INSERT.
    for statement in [
        "SELECT job.enqueue('doors.any', '{}', run_at => now() + interval '1 hour', \
                            deadline => now() + interval '1 minute')",
        "SELECT job.enqueue('doors.any', '{}', deadline => now() - interval '1 hour')",
        "SELECT * FROM job.enqueue_many('[{\"kind\": \"doors.any\", \"payload\": {}, \
             \"run_at\": \"2030-01-01T00:00:00Z\", \"deadline\": \"2000-01-01T00:00:00Z\"}]')",
        "INSERT INTO job.jobs (kind, payload, deadline) VALUES ('doors.any', '{}', now())",
    ] {
        let error = sqlx::query(statement)
            .execute(h.store.pool())
            .await
            .expect_err(statement);
        let db = error.as_database_error().expect("a database error");
        assert_eq!(db.code().as_deref(), Some("23514"), "{statement}: {db}");
        // `deadline`, or the element's (`jobs[0].deadline`, job.enqueue_many since 0059).
        assert!(db.message().contains("deadline`"), "{statement}: {db}");
    }
    // A deadline after the run time is kept.
    let kept = Enqueue::new(Noop { n: 4 })
        .run_at(now + chrono::Duration::hours(1))
        .deadline_in(Duration::from_secs(7200))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    assert_eq!(h.row(kept).await.state, JobState::Scheduled);
}
