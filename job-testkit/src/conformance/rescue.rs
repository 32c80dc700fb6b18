//! Rescue of expired leases, and release on shutdown.

use std::time::Duration;

use job_core::{
    Finalize, Finalized, JobId, JobState, Lease, NewJob, Outcome, Release, Renewal, Rescued,
    RescuedJob, RunAt, Store,
};
use job_core::{Rescuer, RescuerConfig};
use uuid::Uuid;

use super::support::{
    assert_lease_cleared, claim_one, new_job, outlive, row, short_lease, started_lease, ClaimDue,
    NOOP, SHORT_LEASE, STARTED_LEASE,
};

/// Rescue moves an expired lease to `retryable`, due at once, the attempt counted and a
/// `lease_expired` error naming the worker recorded; a live lease is never touched. The rescue
/// names the job, its kind and the worker whose lease expired.
pub async fn rescue_only_touches_expired_leases<S: Store>(store: S) {
    let expiring = store.enqueue(new_job(NOOP)).await.unwrap();
    assert_eq!(store.claim_due(&short_lease()).await.unwrap().len(), 1);
    let live_id = store.enqueue(new_job(NOOP)).await.unwrap();
    let live = claim_one(&store, NOOP).await;
    assert_eq!(live.lease.id, live_id);
    outlive(SHORT_LEASE).await;
    let live_before = row(&store, live_id).await;

    let rescued = store.rescue_expired(100).await.unwrap();
    assert_eq!(
        rescued,
        Rescued {
            retried: 1,
            discarded: 0,
            jobs: vec![by_doomed_worker(expiring, JobState::Retryable)],
        }
    );
    let rescued = row(&store, expiring).await;
    assert_eq!(rescued.state, JobState::Retryable);
    assert_eq!(rescued.attempt, 1, "the lost attempt counts");
    assert_eq!(rescued.finalized_at, None);
    assert_lease_cleared(&rescued);
    assert_eq!(rescued.errors.len(), 1);
    let error = &rescued.errors[0];
    assert_eq!((error.attempt, error.class.as_str()), (1, "lease_expired"));
    assert!(error.message.contains("doomed-worker"), "{}", error.message);
    assert_eq!(
        row(&store, live_id).await,
        live_before,
        "a live lease was touched"
    );
    // The rescued job is due at once; nothing is left to rescue.
    let again = claim_one(&store, NOOP).await;
    assert_eq!((again.lease.id, again.attempt), (expiring, 2));
    assert_eq!(store.rescue_expired(100).await.unwrap(), Rescued::default());
}

/// An expired lease whose attempts are used up, and whose last attempt started (the worker
/// recorded its start, [`Store::record_start`]), is `discarded` and finalized, not retried.
pub async fn rescue_discards_an_expired_lease_with_no_attempts_left<S: Store>(store: S) {
    let last_try = NewJob {
        max_attempts: 1,
        ..new_job(NOOP)
    };
    let id = store.enqueue(last_try).await.unwrap();
    let claimed = store.claim_due(&started_lease()).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(store.record_start(claimed[0].lease).await.unwrap());
    outlive(STARTED_LEASE).await;
    let rescued = store.rescue_expired(100).await.unwrap();
    assert_eq!(
        rescued,
        Rescued {
            retried: 0,
            discarded: 1,
            jobs: vec![by_doomed_worker(id, JobState::Discarded)],
        }
    );
    let row = row(&store, id).await;
    assert_eq!(row.state, JobState::Discarded);
    assert!(row.finalized_at.is_some());
    assert_lease_cleared(&row);
    assert_eq!(row.errors[0].class, "lease_expired");
}

/// A last attempt whose start was never recorded (a worker killed while the job waited for a
/// slot) is retried with the attempt not counted and no entry in its history, not discarded:
/// it never ran. A start
/// recorded under an earlier lease does not count for a later one, and a stale lease records
/// nothing.
pub async fn rescue_retries_a_last_attempt_that_never_started<S: Store>(store: S) {
    let last_try = NewJob {
        max_attempts: 2,
        ..new_job(NOOP)
    };
    let id = store.enqueue(last_try).await.unwrap();
    // Attempt 1 started (its start recorded, though only a last attempt needs it) and expired.
    let first = store.claim_due(&started_lease()).await.unwrap();
    assert_eq!(first.len(), 1);
    assert!(store.record_start(first[0].lease).await.unwrap());
    outlive(STARTED_LEASE).await;
    assert_eq!(store.rescue_expired(100).await.unwrap().retried, 1);
    // Attempt 2, the last, claimed and never started: retried, not counted, twice over.
    for _ in 0..2 {
        let last = store.claim_due(&short_lease()).await.unwrap();
        assert_eq!(last.len(), 1);
        assert_eq!((last[0].attempt, last[0].max_attempts), (2, 2));
        outlive(SHORT_LEASE).await;
        assert_eq!(
            store.rescue_expired(100).await.unwrap(),
            Rescued {
                retried: 1,
                discarded: 0,
                jobs: vec![by_doomed_worker(id, JobState::Retryable)],
            },
            "a last attempt that never started was not retried"
        );
        let rescued = row(&store, id).await;
        assert_eq!(rescued.state, JobState::Retryable);
        assert_eq!(
            rescued.attempt, 1,
            "the attempt that never started was counted"
        );
        assert_eq!(rescued.finalized_at, None);
        assert_lease_cleared(&rescued);
        // As a release of an unstarted job: no entry (attempt 1's is the only one).
        let classes: Vec<(i32, &str)> = rescued
            .errors
            .iter()
            .map(|e| (e.attempt, e.class.as_str()))
            .collect();
        assert_eq!(classes, [(1, "lease_expired")]);
        // Its lease is gone: recording a start under it records nothing.
        assert!(!store.record_start(last[0].lease).await.unwrap());
    }
    // Once started, the last attempt is counted: a dead letter.
    let last = store.claim_due(&started_lease()).await.unwrap();
    assert_eq!(last.len(), 1);
    assert!(store.record_start(last[0].lease).await.unwrap());
    outlive(STARTED_LEASE).await;
    assert_eq!(store.rescue_expired(100).await.unwrap().discarded, 1);
    let row = row(&store, id).await;
    assert_eq!((row.state, row.attempt), (JobState::Discarded, 2));
}

/// What a rescue by [`short_lease`]'s worker reports of job `id` of [`NOOP`].
pub(crate) fn by_doomed_worker(id: JobId, state: JobState) -> RescuedJob {
    RescuedJob {
        id,
        kind: NOOP.into(),
        worker: Some("doomed-worker".into()),
        state,
    }
}

/// One rescue call recovers at most its limit; the rest wait for the next.
pub async fn rescue_takes_at_most_its_limit<S: Store>(store: S) {
    store
        .enqueue_many((0..3).map(|_| new_job(NOOP)).collect())
        .await
        .unwrap();
    assert_eq!(store.claim_due(&short_lease()).await.unwrap().len(), 3);
    outlive(SHORT_LEASE).await;
    assert_eq!(store.rescue_expired(2).await.unwrap().retried, 2);
    assert_eq!(store.rescue_expired(2).await.unwrap().retried, 1);
    assert_eq!(store.rescue_expired(2).await.unwrap(), Rescued::default());
}

/// The rescuer's pass repeats batches until every expired lease is recovered.
pub async fn the_rescuer_recovers_every_expired_lease_in_batches<S: Store>(store: S) {
    let ids = store
        .enqueue_many((0..5).map(|_| new_job(NOOP)).collect())
        .await
        .unwrap();
    assert_eq!(store.claim_due(&short_lease()).await.unwrap().len(), 5);
    outlive(SHORT_LEASE).await;
    let config = RescuerConfig {
        batch: 2,
        ..RescuerConfig::default()
    };
    let rescued = Rescuer::new(store.clone(), config)
        .run_once()
        .await
        .unwrap();
    assert_eq!((rescued.retried, rescued.discarded), (5, 0));
    let mut named: Vec<JobId> = rescued.jobs.iter().map(|j| j.id).collect();
    named.sort_unstable();
    assert_eq!(named, ids, "every batch's jobs are named, each once");
    for id in ids {
        assert_eq!(row(&store, id).await.state, JobState::Retryable, "job {id}");
    }
}

/// Once rescued, the old lease can neither finalize nor heartbeat.
pub async fn an_expired_lease_that_was_rescued_cannot_finalize<S: Store>(store: S) {
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    let claimed = store.claim_due(&short_lease()).await.unwrap();
    assert_eq!(claimed.len(), 1);
    outlive(SHORT_LEASE).await;
    assert_eq!(store.rescue_expired(100).await.unwrap().retried, 1);
    let before = row(&store, id).await;
    let late = Finalize {
        result: None,
        lease: claimed[0].lease,
        outcome: Outcome::Complete,
    };
    assert_eq!(
        store.finalize(&[late]).await.unwrap(),
        vec![Finalized::LeaseLost]
    );
    let renewal = Renewal {
        lease: claimed[0].lease,
        extend_by: Duration::from_secs(30),
        stuck: false,
    };
    assert_eq!(
        store.heartbeat(&[renewal]).await.unwrap().lost,
        vec![claimed[0].lease]
    );
    assert_eq!(row(&store, id).await, before);
}

/// Release makes a held job `available` at once, lease cleared and the attempt not counted.
pub async fn release_makes_a_job_available_at_once_with_the_attempt_not_counted<S: Store>(
    store: S,
) {
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    let job = claim_one(&store, NOOP).await;
    assert_eq!(
        store
            .release(&[Release::unstarted(job.lease)])
            .await
            .unwrap(),
        1
    );
    let row = row(&store, id).await;
    assert_eq!(row.state, JobState::Available);
    assert_eq!(row.attempt, 0);
    assert_eq!(row.errors, vec![]);
    assert_lease_cleared(&row);
    let again = claim_one(&store, NOOP).await;
    assert_eq!((again.lease.id, again.attempt), (id, 1));
    // The old lease is gone with the release.
    let late = Finalize {
        result: None,
        lease: job.lease,
        outcome: Outcome::Complete,
    };
    assert_eq!(
        store.finalize(&[late]).await.unwrap(),
        vec![Finalized::LeaseLost]
    );
}

/// Release under a stale token releases nothing and changes nothing; an empty release is 0.
pub async fn release_with_a_stale_token_changes_nothing<S: Store>(store: S) {
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    claim_one(&store, NOOP).await;
    let before = row(&store, id).await;
    let stale = Lease {
        id,
        token: Uuid::new_v4(),
    };
    assert_eq!(
        store.release(&[Release::unstarted(stale)]).await.unwrap(),
        0
    );
    assert_eq!(
        store
            .release(&[Release::interrupted(stale, Duration::from_secs(1))])
            .await
            .unwrap(),
        0
    );
    assert_eq!(store.release(&[]).await.unwrap(), 0);
    assert_eq!(row(&store, id).await, before);
}

/// Releasing an execution that ran leaves an entry of class `released` in the history, under
/// the attempt it used, which is not counted: the next claim runs the same attempt number.
pub async fn releasing_an_execution_that_ran_records_it_without_counting_the_attempt<S: Store>(
    store: S,
) {
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    let job = claim_one(&store, NOOP).await;
    let release = Release::interrupted(job.lease, Duration::from_millis(1500));
    assert_eq!(store.release(&[release]).await.unwrap(), 1);
    let row = row(&store, id).await;
    assert_eq!((row.state, row.attempt), (JobState::Available, 0));
    assert_lease_cleared(&row);
    assert_eq!(row.errors.len(), 1, "{:?}", row.errors);
    let entry = &row.errors[0];
    assert_eq!((entry.attempt, entry.class.as_str()), (1, "released"));
    assert!(entry.message.contains("worker-1"), "{}", entry.message);
    assert!(entry.message.contains("1500 ms"), "{}", entry.message);
    let again = claim_one(&store, NOOP).await;
    assert_eq!((again.lease.id, again.attempt), (id, 1));
}

/// An interrupted execution's attempt is given back uncounted
/// [`MAX_REFUNDED_INTERRUPTIONS`](job_core::MAX_REFUNDED_INTERRUPTIONS) times: the next release
/// is refused, the lease runs out, and the rescuer counts the attempt. A job given back
/// unstarted is released however often it was interrupted.
pub async fn interruptions_are_given_back_uncounted_a_bounded_number_of_times<S: Store>(store: S) {
    let bound = job_core::MAX_REFUNDED_INTERRUPTIONS as usize;
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    for n in 0..bound {
        let job = claim_one(&store, NOOP).await;
        assert_eq!(job.attempt, 1, "interruption {n} was not counted");
        let release = Release::interrupted(job.lease, Duration::from_millis(10));
        assert_eq!(
            store.release(&[release]).await.unwrap(),
            1,
            "interruption {n}"
        );
    }
    let released =
        |row: &job_core::JobRow| row.errors.iter().filter(|e| e.class == "released").count();
    assert_eq!(released(&row(&store, id).await), bound);
    // Unstarted, it is given back still: it did not run.
    let job = claim_one(&store, NOOP).await;
    assert_eq!(
        store
            .release(&[Release::unstarted(job.lease)])
            .await
            .unwrap(),
        1
    );
    // One interruption more: refused, the lease left to run out.
    let job = store.claim_due(&short_lease()).await.unwrap().remove(0);
    assert_eq!((job.lease.id, job.attempt), (id, 1));
    let release = Release::interrupted(job.lease, Duration::from_millis(10));
    assert_eq!(store.release(&[release]).await.unwrap(), 0);
    let held = row(&store, id).await;
    assert_eq!((held.state, held.attempt), (JobState::Running, 1));
    assert_eq!(released(&held), bound, "no entry for the refused release");
    outlive(SHORT_LEASE).await;
    assert_eq!(store.rescue_expired(100).await.unwrap().retried, 1);
    let rescued = row(&store, id).await;
    assert_eq!((rescued.state, rescued.attempt), (JobState::Retryable, 1));
    assert_eq!(
        rescued.errors.last().map(|e| e.class.as_str()),
        Some("lease_expired")
    );
}

/// A rescued job keeps its place: it was due when it was claimed, and it is claimed again
/// before jobs that became due after it, however many wait.
pub async fn a_rescued_job_is_claimed_before_jobs_due_after_it<S: Store>(store: S) {
    let doomed = store.enqueue(new_job(NOOP)).await.unwrap();
    assert_eq!(store.claim_due(&short_lease()).await.unwrap().len(), 1);
    // A backlog that became due after the doomed job was claimed.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut backlog = Vec::new();
    for _ in 0..20 {
        backlog.push(NewJob {
            run_at: RunAt::Now,
            ..new_job(NOOP)
        });
    }
    store.enqueue_many(backlog).await.unwrap();
    outlive(SHORT_LEASE).await;
    assert_eq!(store.rescue_expired(100).await.unwrap().retried, 1);
    let next = store
        .claim_due(&super::support::request(&[NOOP], 1))
        .await
        .unwrap();
    assert_eq!(
        next.iter()
            .map(|j| (j.lease.id, j.attempt))
            .collect::<Vec<_>>(),
        vec![(doomed, 2)],
        "the rescued job must be claimed before the jobs due after it"
    );
}
