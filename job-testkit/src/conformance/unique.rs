//! Unique jobs: a key per kind, held while its scope counts the job, decided by the store
//! (never by a racy pre-check) and refused with the typed [`EnqueueError::Duplicate`].

use std::time::Duration;

use job_core::{
    Admin, Cancelled, EnqueueError, ErrorClass, Finalize, Finalized, JobId, NewJob, OnDuplicate,
    Outcome, Release, Store, Unique, UniqueScope,
};

use super::support::{
    claim_one, failure, finalize_one, new_job, outlive, request, row, short_lease, started_lease,
    ClaimDue, NOOP, SHORT_LEASE, STARTED_LEASE,
};

/// A [`NOOP`] with unique key `key` in `scope`.
fn keyed(key: &str, scope: UniqueScope, on_duplicate: OnDuplicate) -> NewJob {
    NewJob {
        unique: Some(Unique {
            key: key.to_owned(),
            scope,
            on_duplicate,
        }),
        ..new_job(NOOP)
    }
}

fn until_finished(key: &str) -> NewJob {
    keyed(key, UniqueScope::UntilFinished, OnDuplicate::Keep)
}

/// The id a refused duplicate names, failing on any other answer.
fn duplicate_of(result: Result<JobId, EnqueueError>) -> JobId {
    match result {
        Err(EnqueueError::Duplicate {
            existing,
            kind,
            key,
        }) => {
            assert_eq!(kind, NOOP, "the duplicate names the kind");
            assert!(!key.is_empty(), "the duplicate names the key");
            existing
        }
        other => panic!("expected EnqueueError::Duplicate, got {other:?}"),
    }
}

/// A second job of a kind with a key an active job holds is refused with
/// `EnqueueError::Duplicate` naming the holder, and nothing is written; another key, or the
/// same key of another kind, is a job of its own.
pub async fn a_duplicate_key_is_refused_with_the_holders_id<S: Store>(store: S) {
    let first = store.enqueue(until_finished("order-1")).await.unwrap();
    assert_eq!(
        duplicate_of(store.enqueue(until_finished("order-1")).await),
        first
    );
    let other_key = store.enqueue(until_finished("order-2")).await.unwrap();
    let other_kind = store
        .enqueue(NewJob {
            kind: "conformance.other".into(),
            ..until_finished("order-1")
        })
        .await
        .unwrap();
    assert!(other_key != first && other_kind != first && other_key != other_kind);
    assert_eq!(
        row(&store, first).await.unique_key.as_deref(),
        Some("order-1")
    );
    // Only the first job of NOOP with that key was written: one claim takes both NOOPs.
    let claimed = store
        .claim(&super::support::request(&[NOOP], 10))
        .await
        .unwrap();
    let mut ids: Vec<JobId> = claimed.iter().map(|c| c.lease.id).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![first, other_key]);
}

/// `UntilFinished` holds the key while the job waits and runs, and frees it once the job
/// has finished.
pub async fn until_finished_holds_the_key_while_running_and_frees_it_when_finished<S: Store>(
    store: S,
) {
    let id = store.enqueue(until_finished("k")).await.unwrap();
    let job = claim_one(&store, NOOP).await;
    assert_eq!(duplicate_of(store.enqueue(until_finished("k")).await), id);
    finalize_one(&store, job.lease, Outcome::Complete).await;
    let next = store.enqueue(until_finished("k")).await.unwrap();
    assert_ne!(next, id);
}

/// `UntilStarted` holds the key until the job's first claim, and never again: a newer job
/// takes the key, and the started job can still be retried without colliding with it.
pub async fn until_started_frees_the_key_at_the_first_claim_for_good<S: Store>(store: S) {
    let started = || keyed("s", UniqueScope::UntilStarted, OnDuplicate::Keep);
    let first = store.enqueue(started()).await.unwrap();
    assert_eq!(duplicate_of(store.enqueue(started()).await), first);
    let job = claim_one(&store, NOOP).await;
    let second = store.enqueue(started()).await.unwrap();
    assert_ne!(second, first);
    // The first job goes back to waiting: it holds nothing, so the second keeps the key.
    let retry = Outcome::Retry {
        delay: std::time::Duration::from_secs(3600),
        failure: job_core::Failure {
            attempt: 1,
            class: job_core::ErrorClass::Error,
            message: "again".into(),
        },
    };
    let applied = store
        .finalize(&[Finalize {
            result: None,
            lease: job.lease,
            outcome: retry,
        }])
        .await
        .unwrap();
    assert_eq!(applied, vec![Finalized::Applied]);
    assert_eq!(duplicate_of(store.enqueue(started()).await), second);
}

/// `UntilPruned` holds the key in every state, finished too, until the row is deleted.
pub async fn until_pruned_holds_the_key_after_the_job_finished<S: Store>(store: S) {
    let pruned = || keyed("p", UniqueScope::UntilPruned, OnDuplicate::Keep);
    let id = store.enqueue(pruned()).await.unwrap();
    let job = claim_one(&store, NOOP).await;
    finalize_one(&store, job.lease, Outcome::Complete).await;
    assert_eq!(duplicate_of(store.enqueue(pruned()).await), id);
}

/// `OnDuplicate::Replace` replaces a waiting holder's payload and returns its id; a running
/// holder is not touched, and the enqueue is refused as a duplicate.
pub async fn replace_updates_a_waiting_holder_and_refuses_a_running_one<S: Store>(store: S) {
    let replacing = |n: u32| NewJob {
        payload: format!(r#"{{"n":{n}}}"#),
        ..keyed("r", UniqueScope::UntilFinished, OnDuplicate::Replace)
    };
    let id = store.enqueue(replacing(1)).await.unwrap();
    assert_eq!(store.enqueue(replacing(2)).await.unwrap(), id);
    assert_eq!(row(&store, id).await.payload, serde_json::json!({ "n": 2 }));
    let job = claim_one(&store, NOOP).await;
    assert_eq!(job.lease.id, id);
    assert_eq!(duplicate_of(store.enqueue(replacing(3)).await), id);
    assert_eq!(row(&store, id).await.payload, serde_json::json!({ "n": 2 }));
}

/// `OnDuplicate::Replace` leaves a waiting holder alone, and refuses the enqueue as its
/// duplicate, when the holder recorded durable steps in an earlier attempt (they belong to its
/// payload: the next attempt would be handed their outputs instead of running them for the new
/// one) or when its cancel was requested (the cancel would end the new payload).
pub async fn replace_leaves_a_holder_with_recorded_steps_or_a_requested_cancel_alone<
    S: Store + Admin,
>(
    store: S,
) {
    // Waiting an hour: claimable no more in this test.
    let again = || Outcome::Retry {
        delay: Duration::from_secs(3600),
        failure: failure(1, ErrorClass::Error, "again"),
    };
    let replacing = |key: &str, n: u32| NewJob {
        payload: format!(r#"{{"n":{n}}}"#),
        ..keyed(key, UniqueScope::UntilFinished, OnDuplicate::Replace)
    };

    let stepped = store.enqueue(replacing("steps", 1)).await.unwrap();
    let job = claim_one(&store, NOOP).await;
    store
        .save_step(&job.lease, "charge", r#""ch_1""#)
        .await
        .unwrap();
    finalize_one(&store, job.lease, again()).await;
    assert_eq!(
        duplicate_of(store.enqueue(replacing("steps", 2)).await),
        stepped
    );
    assert_eq!(
        row(&store, stepped).await.payload,
        serde_json::json!({ "n": 1 })
    );

    let cancelling = store.enqueue(replacing("cancel", 1)).await.unwrap();
    let job = claim_one(&store, NOOP).await;
    assert_eq!(job.lease.id, cancelling);
    assert_eq!(
        store.cancel(cancelling).await.unwrap(),
        Cancelled::Requested
    );
    finalize_one(&store, job.lease, again()).await;
    assert_eq!(
        duplicate_of(store.enqueue(replacing("cancel", 2)).await),
        cancelling
    );
    assert_eq!(
        row(&store, cancelling).await.payload,
        serde_json::json!({ "n": 1 })
    );

    // A waiting holder with neither is replaced, as before.
    let plain = store.enqueue(replacing("plain", 1)).await.unwrap();
    assert_eq!(store.enqueue(replacing("plain", 2)).await.unwrap(), plain);
}

/// An `UntilStarted` job given back before its first attempt started (a worker's shutdown
/// returning the jobs it prefetched) holds its key again: it has not started, so the next
/// enqueue of the key is its duplicate. Given back after it ran, it started, and holds
/// nothing; and when another job took the key while it was claimed, that one keeps it.
pub async fn until_started_holds_the_key_again_when_given_back_unstarted<S: Store>(store: S) {
    let started = |key: &str| keyed(key, UniqueScope::UntilStarted, OnDuplicate::Keep);
    let give_back = |lease, ran_for| [Release { lease, ran_for }];

    let first = store.enqueue(started("s")).await.unwrap();
    let job = claim_one(&store, NOOP).await;
    assert_eq!(store.release(&give_back(job.lease, None)).await.unwrap(), 1);
    assert_eq!(duplicate_of(store.enqueue(started("s")).await), first);

    let job = claim_one(&store, NOOP).await;
    assert_eq!(job.lease.id, first);
    let ran = Some(Duration::from_millis(5));
    assert_eq!(store.release(&give_back(job.lease, ran)).await.unwrap(), 1);
    let second = store.enqueue(started("s")).await.unwrap();
    assert_ne!(second, first);

    // Both jobs of "s" end, so that the next claim takes the job of "t".
    let both = store.claim_due(&request(&[NOOP], 10)).await.unwrap();
    assert_eq!(both.len(), 2);
    for job in both {
        finalize_one(&store, job.lease, Outcome::Complete).await;
    }
    let taken = store.enqueue(started("t")).await.unwrap();
    let job = claim_one(&store, NOOP).await;
    assert_eq!(job.lease.id, taken);
    let newer = store.enqueue(started("t")).await.unwrap();
    assert_eq!(store.release(&give_back(job.lease, None)).await.unwrap(), 1);
    assert_eq!(duplicate_of(store.enqueue(started("t")).await), newer);

    // A job that started once (it snoozed, which gives the attempt back too) and is then
    // claimed and given back unstarted holds nothing: its start spent the key.
    let both = store.claim_due(&request(&[NOOP], 10)).await.unwrap();
    for job in both {
        finalize_one(&store, job.lease, Outcome::Complete).await;
    }
    let snoozer = store.enqueue(started("u")).await.unwrap();
    let job = claim_one(&store, NOOP).await;
    assert_eq!(job.lease.id, snoozer);
    let snooze = Outcome::Snooze {
        delay: Duration::ZERO,
    };
    finalize_one(&store, job.lease, snooze).await;
    let job = claim_one(&store, NOOP).await;
    assert_eq!((job.lease.id, job.attempt), (snoozer, 1));
    assert_eq!(store.release(&give_back(job.lease, None)).await.unwrap(), 1);
    let after = store.enqueue(started("u")).await.unwrap();
    assert_ne!(after, snoozer, "the key was spent by the job's first start");
}

/// An `UntilStarted` job on its only attempt, claimed and lost with its worker before it
/// started, is retried uncounted by the rescuer and holds its key again, as a job given back
/// unstarted does; once its attempt started, the rescue discards it and the key is free.
pub async fn until_started_holds_the_key_again_when_rescued_unstarted<S: Store>(store: S) {
    let only_try = || NewJob {
        max_attempts: 1,
        ..keyed("r", UniqueScope::UntilStarted, OnDuplicate::Keep)
    };
    let first = store.enqueue(only_try()).await.unwrap();
    assert_eq!(store.claim_due(&short_lease()).await.unwrap().len(), 1);
    outlive(SHORT_LEASE).await;
    assert_eq!(store.rescue_expired(100).await.unwrap().retried, 1);
    assert_eq!(duplicate_of(store.enqueue(only_try()).await), first);

    let claimed = store.claim_due(&started_lease()).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(store.record_start(claimed[0].lease).await.unwrap());
    outlive(STARTED_LEASE).await;
    assert_eq!(store.rescue_expired(100).await.unwrap().discarded, 1);
    let second = store.enqueue(only_try()).await.unwrap();
    assert_ne!(second, first, "the started attempt spent the key");
}

/// Eight concurrent enqueues of one key make exactly one job; the seven others are refused
/// as duplicates of it.
pub async fn eight_concurrent_enqueues_of_one_key_make_one_job<S: Store>(store: S) {
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let store = store.clone();
        tasks.spawn(async move { store.enqueue(until_finished("race")).await });
    }
    let mut made = Vec::new();
    let mut refused = Vec::new();
    while let Some(result) = tasks.join_next().await {
        match result.unwrap() {
            Ok(id) => made.push(id),
            other => refused.push(duplicate_of(other)),
        }
    }
    assert_eq!(made.len(), 1, "made {made:?}, refused {refused:?}");
    assert!(refused.iter().all(|id| *id == made[0]), "{refused:?}");
}
