//! Bad input loses nothing: unknown kinds wait for a worker that knows them, poison payloads
//! are discarded with their reason, newer payload versions are left alone, and bad options
//! are refused at enqueue.

use job::{EnqueueError, JobState, Store};
use job_core::{EnqueueOptions, NewJob, DEFAULT_PAYLOAD_LIMIT};

use crate::common::*;

fn raw(kind: &str, payload: &str, version: i32) -> NewJob {
    NewJob {
        payload_version: version,
        max_attempts: 5,
        ..NewJob::new(kind, payload)
    }
}

#[tokio::test]
async fn unknown_kinds_stay_untouched() {
    let h = Harness::new().await;
    let stranger = h
        .store
        .enqueue(raw("billing.unknown", "{}", 1))
        .await
        .unwrap();
    let known = enqueue(&h.store, Noop { n: 1 }).await;
    let worker = h.worker().build().unwrap().start();
    h.reaches(known, JobState::Completed).await;
    worker.shutdown().await;
    let row = h.row(stranger).await;
    assert_eq!(row.state, JobState::Available);
    assert_eq!(row.attempt, 0);
    assert_eq!(row.locked_by, None);
}

#[tokio::test]
async fn a_poison_payload_is_discarded_with_its_reason() {
    let h = Harness::new().await;
    let id = h
        .store
        .enqueue(raw("test.noop", r#"{"n":"not a number"}"#, 1))
        .await
        .unwrap();
    let worker = h.worker().build().unwrap().start();
    let row = h.reaches(id, JobState::Discarded).await;
    worker.shutdown().await;
    assert_eq!(
        h.ledger.runs(id),
        0,
        "the handler never sees a poison payload"
    );
    assert_eq!(row.attempt, 1, "discarded at once, not retried in a loop");
    assert_eq!(row.errors.len(), 1);
    assert_eq!(row.errors[0].class, "poison");
    assert!(
        row.errors[0].message.contains("does not decode"),
        "{}",
        row.errors[0].message
    );
    assert_eq!(
        row.payload["n"], "not a number",
        "the payload is kept for inspection"
    );
}

#[tokio::test]
async fn a_newer_payload_version_is_left_for_a_newer_worker() {
    let h = Harness::new().await;
    let newer = h
        .store
        .enqueue(raw("test.noop", r#"{"n":1}"#, 2))
        .await
        .unwrap();
    let current = enqueue(&h.store, Noop { n: 2 }).await;
    let worker = h.worker().build().unwrap().start();
    h.reaches(current, JobState::Completed).await;
    worker.shutdown().await;
    let row = h.row(newer).await;
    assert_eq!(row.state, JobState::Available);
    assert_eq!(row.attempt, 0);
}

#[tokio::test]
async fn bad_options_are_refused_at_enqueue_and_nothing_is_written() {
    let h = Harness::new().await;
    let err = job::Enqueue::new(Noop { n: 1 })
        .queue("")
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnqueueError::InvalidOption {
                option: "queue",
                ..
            }
        ),
        "{err}"
    );
    let err = job::Enqueue::new(Noop { n: 1 })
        .priority(-3)
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnqueueError::InvalidOption {
                option: "priority",
                ..
            }
        ),
        "{err}"
    );
    let huge = NewJob::build(
        &Noop { n: 1 },
        EnqueueOptions::default(),
        DEFAULT_PAYLOAD_LIMIT,
    )
    .map(|mut j| {
        j.payload = format!(r#"{{"n":1,"pad":"{}"}}"#, "x".repeat(DEFAULT_PAYLOAD_LIMIT));
        j
    })
    .unwrap();
    let err = h.store.enqueue(huge).await.unwrap_err();
    assert!(err.to_string().contains("over the limit"), "{err}");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM job.jobs")
        .fetch_one(h.store.pool())
        .await
        .unwrap();
    assert_eq!(rows, 0);
}
