//! Enqueueing and scheduling: what a new row looks like and when it becomes claimable.

use std::time::{Duration, Instant};

use chrono::Utc;
use job_core::{JobState, NewJob, RunAt, Store};

use super::support::{
    assert_nothing_to_claim, claim_one, new_job, request, row, ClaimDue, NOOP, PATIENCE,
};

/// `enqueue` stores every field as given, `available` with no attempt, no lease, no errors.
pub async fn enqueue_stores_the_job_as_given<S: Store>(store: S) {
    let job = NewJob {
        queue: "mail".into(),
        priority: 3,
        payload: r#"{"to":"a@example.com","n":[1,2]}"#.into(),
        payload_version: 2,
        max_attempts: 7,
        tags: vec!["billing".into(), "eu".into()],
        tenant: Some("acme".into()),
        ..new_job(NOOP)
    };
    let id = store.enqueue(job).await.unwrap();
    let row = row(&store, id).await;
    assert_eq!(row.id, id);
    assert_eq!(
        (row.kind.as_str(), row.queue.as_str(), row.priority),
        (NOOP, "mail", 3)
    );
    assert_eq!(
        row.payload,
        serde_json::json!({ "to": "a@example.com", "n": [1, 2] })
    );
    assert_eq!((row.payload_version, row.max_attempts), (2, 7));
    assert_eq!(row.tags, ["billing", "eu"]);
    assert_eq!(row.tenant.as_deref(), Some("acme"));
    assert_eq!(row.state, JobState::Available);
    assert_eq!(row.attempt, 0);
    assert_eq!(
        (row.lock_token, row.locked_until, row.locked_by),
        (None, None, None)
    );
    assert!(!row.cancel_requested);
    assert_eq!(row.errors, vec![]);
    assert_eq!((row.finalized_at, row.deadline), (None, None));
    assert!(row.run_at >= row.created_at, "due before it was created");
}

/// A claim returns the job `running` at attempt 1 under a fresh token, with its payload and a
/// lease of the kind's length written to the row.
pub async fn enqueue_then_claim_returns_it_running_with_attempt_one_and_a_token<S: Store>(
    store: S,
) {
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    let created_at = row(&store, id).await.created_at;
    let claimed = claim_one(&store, NOOP).await;
    assert_eq!(claimed.lease.id, id);
    assert_eq!(claimed.attempt, 1);
    assert_eq!(
        (claimed.kind.as_str(), claimed.queue.as_str()),
        (NOOP, "default")
    );
    let payload: serde_json::Value = serde_json::from_str(&claimed.payload).unwrap();
    assert_eq!(payload, serde_json::json!({ "n": 1 }));
    assert_eq!(claimed.payload_version, 1);
    assert_eq!((claimed.max_attempts, claimed.snoozes), (25, 0));

    let row = row(&store, id).await;
    assert_eq!(row.state, JobState::Running);
    assert_eq!(row.attempt, 1);
    assert_eq!(row.lock_token, Some(claimed.lease.token));
    assert_eq!(row.locked_by.as_deref(), Some("worker-1"));
    let until = row.locked_until.expect("a running job has a lease");
    // The lease is 30 s from the claim, which came after the insert.
    assert!(
        until > created_at + chrono::Duration::seconds(29),
        "lease ends at {until}, created at {created_at}"
    );
}

/// `get` of an id that was never enqueued is `None`, not an error.
pub async fn get_returns_none_for_an_unknown_id<S: Store>(store: S) {
    assert_eq!(store.get(12345).await.unwrap(), None);
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    assert_eq!(store.get(id + 1000).await.unwrap(), None);
}

/// A job scheduled in the future is `scheduled` with its run time, and is not claimed.
pub async fn a_scheduled_job_is_not_claimed<S: Store>(store: S) {
    let later = NewJob {
        run_at: RunAt::In(Duration::from_secs(3600)),
        ..new_job(NOOP)
    };
    let id = store.enqueue(later).await.unwrap();
    let row = row(&store, id).await;
    assert_eq!(row.state, JobState::Scheduled);
    assert!(
        row.run_at > row.created_at + chrono::Duration::minutes(59),
        "run_at {} for a job created at {}",
        row.run_at,
        row.created_at
    );
    assert_nothing_to_claim(&store, NOOP).await;
}

/// A job scheduled shortly ahead is claimed once it is due, and not before.
pub async fn a_scheduled_job_is_claimed_once_due<S: Store>(store: S) {
    let delay = Duration::from_millis(400);
    let enqueued = Instant::now();
    let soon = NewJob {
        run_at: RunAt::In(delay),
        ..new_job(NOOP)
    };
    let id = store.enqueue(soon).await.unwrap();
    loop {
        let claimed = store.claim_due(&request(&[NOOP], 10)).await.unwrap();
        if let Some(job) = claimed.first() {
            assert_eq!(job.lease.id, id);
            break;
        }
        assert!(
            enqueued.elapsed() < PATIENCE,
            "a job due in {delay:?} was not claimed within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        enqueued.elapsed() >= delay,
        "claimed after {:?}, before its delay of {delay:?}",
        enqueued.elapsed()
    );
}

/// A job scheduled at an instant already past is `available` and claimed at once.
pub async fn a_job_at_a_past_instant_is_available_at_once<S: Store>(store: S) {
    let past = NewJob {
        run_at: RunAt::At(Utc::now() - chrono::Duration::hours(1)),
        ..new_job(NOOP)
    };
    let id = store.enqueue(past).await.unwrap();
    assert_eq!(row(&store, id).await.state, JobState::Available);
    assert_eq!(claim_one(&store, NOOP).await.lease.id, id);
}

/// `enqueue_many` returns one id per job in input order, each row as given; an empty batch
/// is fine.
pub async fn enqueue_many_keeps_input_order<S: Store>(store: S) {
    let jobs: Vec<NewJob> = (0..300)
        .map(|i| NewJob {
            payload: format!(r#"{{"i":{i}}}"#),
            queue: if i % 2 == 0 { "even" } else { "odd" }.to_owned(),
            run_at: if i % 3 == 0 {
                RunAt::In(Duration::from_secs(60))
            } else {
                RunAt::Now
            },
            ..new_job(NOOP)
        })
        .collect();
    let ids = store.enqueue_many(jobs).await.unwrap();
    assert_eq!(ids.len(), 300);
    for (i, id) in ids.iter().enumerate() {
        let row = row(&store, *id).await;
        assert_eq!(row.payload, serde_json::json!({ "i": i }), "job {i}");
        let queue = if i % 2 == 0 { "even" } else { "odd" };
        let state = if i % 3 == 0 {
            JobState::Scheduled
        } else {
            JobState::Available
        };
        assert_eq!((row.queue.as_str(), row.state), (queue, state), "job {i}");
    }
    assert_eq!(
        store.enqueue_many(Vec::new()).await.unwrap(),
        Vec::<i64>::new()
    );
}

/// An invalid job is refused with an error naming the bad option, and a batch with one bad
/// job writes none of them.
pub async fn enqueue_refuses_an_invalid_job_and_a_batch_with_one_writes_nothing<S: Store>(
    store: S,
) {
    let bad = || NewJob {
        priority: -1,
        ..new_job(NOOP)
    };
    let err = store.enqueue(bad()).await.unwrap_err();
    assert!(err.to_string().contains("priority"), "{err}");
    let err = store
        .enqueue_many(vec![new_job(NOOP), bad()])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("priority"), "{err}");
    assert_nothing_to_claim(&store, NOOP).await;
}
