//! Per-key ordering: jobs with one ordering key are claimable one at a time, in enqueue order;
//! a retrying job holds its key; a finished one hands it to the next. A store that does not
//! support ordering keys must refuse them at the door, naming `ordering_key`, and write
//! nothing: it may not store the key and ignore it.

use std::time::Duration;

use job_core::{EnqueueError, ErrorClass, JobId, JobState, NewJob, Outcome, Store};

use super::support::{
    assert_nothing_to_claim, claim_one, failure, finalize_one, new_job, request, row, ClaimDue,
    NOOP,
};

fn ordered(key: &str) -> NewJob {
    NewJob {
        ordering_key: Some(key.to_owned()),
        ..new_job(NOOP)
    }
}

/// Enqueues `job`, or returns `None` when the store refuses ordering keys as the contract
/// allows (and checks that it wrote nothing).
async fn enqueue_ordered<S: Store>(store: &S, job: NewJob) -> Option<JobId> {
    match store.enqueue(job).await {
        Ok(id) => Some(id),
        Err(EnqueueError::InvalidOption {
            option: "ordering_key",
            ..
        }) => {
            assert_nothing_to_claim(store, NOOP).await;
            None
        }
        Err(e) => panic!("enqueue of an ordered job failed: {e}"),
    }
}

/// Three jobs of key `a` and one of key `b`: `a`'s first and `b`'s are claimable, `a`'s others
/// wait `pending`; a retry keeps the key, a completion hands it to the next job of `a`, a
/// discard to the one after.
pub async fn one_job_of_a_key_at_a_time_in_enqueue_order<S: Store>(store: S) {
    let Some(a1) = enqueue_ordered(&store, ordered("a")).await else {
        return;
    };
    let a2 = store.enqueue(ordered("a")).await.unwrap();
    let b1 = store.enqueue(ordered("b")).await.unwrap();
    let a3 = store.enqueue(ordered("a")).await.unwrap();
    assert_eq!(row(&store, a1).await.ordering_key.as_deref(), Some("a"));
    for id in [a2, a3] {
        assert_eq!(row(&store, id).await.state, JobState::Pending, "job {id}");
    }
    let mut claimed: Vec<JobId> = store
        .claim_due(&request(&[NOOP], 10))
        .await
        .unwrap()
        .into_iter()
        .map(|c| c.lease.id)
        .collect();
    claimed.sort_unstable();
    assert_eq!(claimed, [a1, b1], "the head of each key, nothing else");

    // A retry keeps the key: a2 still waits.
    let a1_row = row(&store, a1).await;
    let lease = job_core::Lease {
        id: a1,
        token: a1_row.lock_token.expect("running"),
    };
    let retried = finalize_one(
        &store,
        lease,
        Outcome::Retry {
            delay: Duration::ZERO,
            failure: failure(1, ErrorClass::Error, "not yet"),
        },
    )
    .await;
    assert_eq!(retried.state, JobState::Retryable);
    assert_eq!(row(&store, a2).await.state, JobState::Pending);
    store.stage_due(100).await.unwrap();
    let again = claim_one(&store, NOOP).await;
    assert_eq!(again.lease.id, a1, "the retry, not its successor");

    // A completion hands the key to a2, and only to a2.
    finalize_one(&store, again.lease, Outcome::Complete).await;
    let next = claim_one(&store, NOOP).await;
    assert_eq!(next.lease.id, a2);
    assert_eq!(row(&store, a3).await.state, JobState::Pending);

    // A discard hands it on too.
    finalize_one(
        &store,
        next.lease,
        Outcome::Discard {
            failure: failure(1, ErrorClass::Terminal, "cannot work"),
        },
    )
    .await;
    assert_eq!(claim_one(&store, NOOP).await.lease.id, a3);
}
