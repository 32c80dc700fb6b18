//! Unique jobs: decided by the unique index, never by a pre-check.

use std::time::Duration;

use job::{Enqueue, EnqueueError, JobState};
use job_core::{Store, UniqueScope};

use crate::common::*;
use crate::support::*;

fn invoice(id: i64, note: &str) -> SendInvoice {
    SendInvoice {
        invoice_id: id,
        note: note.into(),
    }
}

#[tokio::test]
async fn fifty_concurrent_enqueues_of_one_key_make_one_job_and_forty_nine_duplicates() {
    let h = Harness::new().await;
    let tasks: Vec<_> = (0..50)
        .map(|i| {
            let pool = h.store.pool().clone();
            tokio::spawn(async move {
                Enqueue::new(invoice(7, &format!("try {i}")))
                    .enqueue(&pool)
                    .await
            })
        })
        .collect();
    let mut ids = Vec::new();
    let mut existing = Vec::new();
    for t in tasks {
        match t.await.unwrap() {
            Ok(id) => ids.push(id),
            Err(EnqueueError::Duplicate {
                kind,
                key,
                existing: id,
            }) => {
                assert_eq!(kind, "test.send_invoice");
                assert_eq!(key, "invoice:7");
                existing.push(id);
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(ids.len(), 1, "exactly one enqueue wins");
    assert_eq!(existing.len(), 49);
    assert!(existing.iter().all(|id| *id == ids[0]), "{existing:?}");
    let rows = count(&h.store, "SELECT count(*) FROM job.jobs").await;
    assert_eq!(rows, 1);
    assert_eq!(h.row(ids[0]).await.unique_key.as_deref(), Some("invoice:7"));
}

#[tokio::test]
async fn a_per_call_key_overrides_the_derived_one_and_other_keys_do_not_collide() {
    let h = Harness::new().await;
    let a = Enqueue::new(invoice(1, "a"))
        .unique_key("custom")
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let b = Enqueue::new(invoice(1, "b"))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    assert_ne!(a, b);
    assert_eq!(h.row(a).await.unique_key.as_deref(), Some("custom"));
    let err = Enqueue::new(invoice(2, "c"))
        .unique_key("custom")
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert_eq!(err.duplicate_of(), Some(a));
    assert_eq!(
        err.to_string(),
        format!(
            "a job of `test.send_invoice` with unique key `custom` is already active (job {a})"
        )
    );
}

#[tokio::test]
async fn the_store_level_enqueue_reports_a_typed_duplicate() {
    let h = Harness::new().await;
    let first = Enqueue::new(invoice(3, "x")).build().unwrap();
    let id = h.store.enqueue(first.clone()).await.unwrap();
    let err = h.store.enqueue(first).await.unwrap_err();
    assert!(
        matches!(err, job::EnqueueError::Duplicate { existing, .. } if existing == id),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_finished_job_frees_its_key() {
    let h = Harness::new().await;
    let first = Enqueue::new(invoice(4, "x"))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let worker = lifecycle_worker(&h).build().unwrap().start();
    h.reaches(first, JobState::Completed).await;
    let second = Enqueue::new(invoice(4, "y"))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    assert_ne!(first, second);
    h.reaches(second, JobState::Completed).await;
    worker.shutdown().await;
}

#[tokio::test]
async fn until_finished_keeps_the_key_while_running_and_until_started_lets_a_new_one_in() {
    let h = Harness::new().await;
    let spin = Spin::default();
    let worker = lifecycle_worker(&h)
        .state(spin.clone())
        .build()
        .unwrap()
        .start();
    let finished = Enqueue::new(Spinner {})
        .unique_key("spin:finished")
        .enqueue(h.store.pool())
        .await
        .unwrap();
    h.reaches(finished, JobState::Running).await;
    let dup = Enqueue::new(Spinner {})
        .unique_key("spin:finished")
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert_eq!(dup.duplicate_of(), Some(finished));

    let started = Enqueue::new(Spinner {})
        .unique_key("spin:started")
        .unique_scope(UniqueScope::UntilStarted)
        .schedule_in(Duration::from_secs(3600))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let waiting_dup = Enqueue::new(Spinner {})
        .unique_key("spin:started")
        .unique_scope(UniqueScope::UntilStarted)
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert_eq!(
        waiting_dup.duplicate_of(),
        Some(started),
        "waiting: still held"
    );
    sqlx::query("UPDATE job.jobs SET run_at = now() WHERE id = $1")
        .bind(started)
        .execute(h.store.pool())
        .await
        .unwrap();
    h.reaches(started, JobState::Running).await;
    let next = Enqueue::new(Spinner {})
        .unique_key("spin:started")
        .unique_scope(UniqueScope::UntilStarted)
        .schedule_in(Duration::from_secs(3600))
        .enqueue(h.store.pool())
        .await
        .expect("a started job no longer holds its key");
    assert_ne!(next, started);
    worker.shutdown().await;
}

#[tokio::test]
async fn replace_updates_a_waiting_job_and_refuses_a_running_one() {
    let h = Harness::new().await;
    let first = Enqueue::new(invoice(5, "old"))
        .schedule_in(Duration::from_secs(3600))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let before = h.row(first).await;
    let replaced = Enqueue::new(invoice(5, "new"))
        .schedule_in(Duration::from_secs(7200))
        .replace_duplicate()
        .enqueue(h.store.pool())
        .await
        .unwrap();
    assert_eq!(
        replaced, first,
        "the waiting job is replaced, not duplicated"
    );
    let after = h.row(first).await;
    assert_eq!(after.payload["note"], "new");
    assert!(after.run_at > before.run_at + chrono::Duration::minutes(59));
    assert_eq!(after.state, JobState::Scheduled);
    assert_eq!(count(&h.store, "SELECT count(*) FROM job.jobs").await, 1);

    // Running: a replace must not touch it.
    let spin = Spin::default();
    let worker = lifecycle_worker(&h)
        .state(spin.clone())
        .build()
        .unwrap()
        .start();
    let running = Enqueue::new(Spinner {})
        .unique_key("spin:replace")
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let row = h.reaches(running, JobState::Running).await;
    let err = Enqueue::new(Spinner {})
        .unique_key("spin:replace")
        .replace_duplicate()
        .schedule_in(Duration::from_secs(3600))
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert_eq!(err.duplicate_of(), Some(running));
    let untouched = h.row(running).await;
    assert_eq!(untouched.run_at, row.run_at);
    assert_eq!(untouched.lock_token, row.lock_token);
    worker.shutdown().await;
}

#[tokio::test]
async fn replace_updates_a_job_pending_behind_its_ordering_key_and_keeps_it_there() {
    // A job waiting behind its ordering key is waiting like a scheduled one; it was refused
    // as if it ran ("already active").
    let h = Harness::new().await;
    let head = Enqueue::new(invoice(6, "head"))
        .ordering_key("account:6")
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let waiting = Enqueue::new(invoice(7, "old"))
        .ordering_key("account:6")
        .enqueue(h.store.pool())
        .await
        .unwrap();
    assert_eq!(h.row(waiting).await.state, JobState::Pending);
    let replaced = Enqueue::new(invoice(7, "new"))
        .ordering_key("account:6")
        .replace_duplicate()
        .enqueue(h.store.pool())
        .await
        .expect("a pending holder is replaced");
    assert_eq!(replaced, waiting);
    let after = h.row(waiting).await;
    assert_eq!(after.payload["note"], "new");
    assert_eq!(
        after.state,
        JobState::Pending,
        "still behind its key's head"
    );
    assert_eq!(h.row(head).await.state, JobState::Available);
}

#[tokio::test]
async fn replacers_racing_a_claim_never_touch_the_running_row() {
    let h = Harness::new().await;
    for round in 0..20 {
        let key = format!("race:{round}");
        let id = Enqueue::new(Spinner {})
            .unique_key(key.clone())
            .enqueue(h.store.pool())
            .await
            .unwrap();
        let claim = {
            let store = h.store.clone();
            tokio::spawn(async move {
                let request = job_core::ClaimRequest {
                    queue: "default".into(),
                    kinds: vec![job_core::ClaimKind {
                        kind: "test.spinner".into(),
                        max_version: 1,
                        lease: Duration::from_secs(30),
                        concurrency: None,
                        rate: None,
                    }],
                    limit: 1,
                    worker_id: "racer".into(),
                };
                store.claim(&request).await.unwrap()
            })
        };
        let replacers: Vec<_> = (0..4)
            .map(|_| {
                let pool = h.store.pool().clone();
                let key = key.clone();
                tokio::spawn(async move {
                    Enqueue::new(Spinner {})
                        .unique_key(key)
                        .replace_duplicate()
                        .schedule_in(Duration::from_secs(3600))
                        .enqueue(&pool)
                        .await
                })
            })
            .collect();
        let claimed = claim.await.unwrap();
        for r in replacers {
            match r.await.unwrap() {
                Ok(got) | Err(EnqueueError::Duplicate { existing: got, .. }) => {
                    assert_eq!(got, id)
                }
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        let row = h.row(id).await;
        if claimed.is_empty() {
            // Every replace ran before the claim, pushing run_at an hour out.
            assert_eq!(row.state, JobState::Scheduled);
        } else {
            assert_eq!(row.state, JobState::Running);
            // A replace that came after the claim changed nothing: the claim saw a due row,
            // and a running row is never replaced, so run_at is still in the past.
            assert!(row.run_at <= chrono::Utc::now() + chrono::Duration::minutes(1));
        }
        assert_eq!(
            count(
                &h.store,
                &format!("SELECT count(*) FROM job.jobs WHERE unique_key = '{key}'")
            )
            .await,
            1
        );
    }
}
