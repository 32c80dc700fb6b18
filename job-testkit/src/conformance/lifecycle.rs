//! The lifecycle around the lease: deadlines, pauses, cancellation, snooze counts, pruning
//! and expiry. Pausing and cancelling go through [`Admin`].

use std::time::Duration;

use job_core::{
    Admin, Cancelled, Deadline, ErrorClass, Failure, Finalize, Finalized, JobState, NewJob,
    Outcome, Pause, PruneRequest, Rescued, RunAt, Store,
};

use super::support::{
    assert_nothing_to_claim, claim_one, failure, finalize_one, new_job, outlive, row, running,
    short_lease, ClaimDue, NOOP, SHORT_LEASE,
};

fn retry_later() -> Outcome {
    Outcome::Retry {
        delay: Duration::ZERO,
        failure: Failure {
            attempt: 1,
            class: ErrorClass::Error,
            message: "again".into(),
        },
    }
}

/// A job past its deadline is never claimed, and `expire` discards it with an `expired` entry
/// naming the deadline; a job whose deadline is ahead is claimed as usual.
pub async fn a_job_past_its_deadline_is_never_claimed_and_expire_discards_it<S: Store>(store: S) {
    let late = store
        .enqueue(NewJob {
            deadline: Some(Deadline::In(Duration::from_millis(50))),
            ..new_job(NOOP)
        })
        .await
        .unwrap();
    outlive(Duration::from_millis(50)).await;
    assert_nothing_to_claim(&store, NOOP).await;
    let expired = store.expire(100).await.unwrap();
    assert_eq!((expired.discarded, expired.cancelled), (1, 0));
    let row = row(&store, late).await;
    assert_eq!(row.state, JobState::Discarded);
    assert!(row.finalized_at.is_some());
    let last = row.errors.last().expect("an expired entry");
    assert_eq!(last.class, "expired");
    assert!(last.message.contains("deadline"), "{}", last.message);
    assert_eq!(store.expire(100).await.unwrap(), Default::default());

    let timely = store
        .enqueue(NewJob {
            deadline: Some(Deadline::In(Duration::from_secs(3600))),
            ..new_job(NOOP)
        })
        .await
        .unwrap();
    assert_eq!(claim_one(&store, NOOP).await.lease.id, timely);
}

/// A paused queue, and a paused kind in any queue, is not claimed until resumed; `paused`
/// lists what is paused, and pausing twice or resuming what is not paused says so.
pub async fn a_paused_queue_or_kind_is_not_claimed_until_resumed<S: Store + Admin>(store: S) {
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    let queue = Pause::Queue("default".into());
    let kind = Pause::Kind(NOOP.into());
    assert!(store.pause(&queue).await.unwrap());
    assert!(!store.pause(&queue).await.unwrap(), "paused twice");
    assert!(store.pause(&kind).await.unwrap());
    let mut paused = store.paused().await.unwrap();
    paused.sort();
    assert_eq!(paused, vec![queue.clone(), kind.clone()]);
    assert_nothing_to_claim(&store, NOOP).await;
    assert!(store.resume(&queue).await.unwrap());
    assert!(!store.resume(&queue).await.unwrap(), "resumed twice");
    assert_nothing_to_claim(&store, NOOP).await;
    assert!(store.resume(&kind).await.unwrap());
    assert_eq!(store.paused().await.unwrap(), vec![]);
    assert_eq!(claim_one(&store, NOOP).await.lease.id, id);
}

/// A pause or resume of a name no queue or kind can have (empty, a space, a NUL, over 128
/// bytes) is refused, naming the name, and pauses nothing: reported done, it would match
/// nothing while the operator believed the queue paused.
pub async fn a_pause_of_a_name_no_queue_or_kind_can_have_is_refused<S: Store + Admin>(store: S) {
    for name in ["", "has space", "nul\0byte", &"q".repeat(200)] {
        for what in [Pause::Queue(name.into()), Pause::Kind(name.into())] {
            let refused = store.pause(&what).await.unwrap_err();
            assert!(refused.is_refused(), "{what:?}: {refused}");
            assert!(refused.to_string().contains("name"), "{what:?}: {refused}");
            assert!(store.resume(&what).await.unwrap_err().is_refused());
        }
    }
    assert_eq!(store.paused().await.unwrap(), vec![]);
}

/// `cancel` ends a waiting job at once (`cancelled`, with a `cancelled` entry); of a running
/// one it requests cancellation, which the heartbeat reports, and which `expire` completes
/// once the job is waiting again. A missing or finished job says so.
pub async fn cancel_ends_a_waiting_job_at_once_and_requests_a_running_ones<S: Store + Admin>(
    store: S,
) {
    let waiting = store.enqueue(new_job("conformance.waiting")).await.unwrap();
    assert_eq!(store.cancel(waiting).await.unwrap(), Cancelled::Now);
    let row_now = row(&store, waiting).await;
    assert_eq!(row_now.state, JobState::Cancelled);
    assert!(row_now.finalized_at.is_some());
    assert_eq!(
        row_now.errors.last().map(|e| e.class.as_str()),
        Some("cancelled")
    );
    assert_eq!(
        store.cancel(waiting).await.unwrap(),
        Cancelled::AlreadyFinished(JobState::Cancelled)
    );
    assert_eq!(
        store.cancel(waiting + 1000).await.unwrap(),
        Cancelled::NotFound
    );

    let job = running(&store).await;
    assert_eq!(
        store.cancel(job.lease.id).await.unwrap(),
        Cancelled::Requested
    );
    let during = row(&store, job.lease.id).await;
    assert_eq!(during.state, JobState::Running);
    assert!(during.cancel_requested);
    let report = store
        .heartbeat(&[job_core::Renewal {
            lease: job.lease,
            extend_by: Duration::from_secs(30),
            stuck: false,
        }])
        .await
        .unwrap();
    assert_eq!(report.cancel_requested, vec![job.lease]);
    // The handler did not stop: its retry makes the job wait, and the expire pass ends it.
    finalize_one(&store, job.lease, retry_later()).await;
    assert_nothing_to_claim(&store, NOOP).await;
    let expired = store.expire(100).await.unwrap();
    assert_eq!((expired.discarded, expired.cancelled), (0, 1));
    let ended = row(&store, job.lease.id).await;
    assert_eq!(ended.state, JobState::Cancelled);
    assert_eq!(
        ended.errors.last().map(|e| e.class.as_str()),
        Some("cancelled")
    );
}

/// A job whose cancel was requested and whose lease then expired ends `cancelled`, on its last
/// attempt too: the rescuer makes it wait (never a dead letter, whose compensation and failed
/// dependents the cancel did not ask for), it is never claimed again, and the expirer ends it.
pub async fn an_expired_lease_whose_cancel_was_requested_ends_cancelled<S: Store + Admin>(
    store: S,
) {
    let id = store
        .enqueue(NewJob {
            max_attempts: 1,
            ..new_job(NOOP)
        })
        .await
        .unwrap();
    assert_eq!(store.claim_due(&short_lease()).await.unwrap().len(), 1);
    assert_eq!(store.cancel(id).await.unwrap(), Cancelled::Requested);
    outlive(SHORT_LEASE).await;
    assert_eq!(
        store.rescue_expired(100).await.unwrap(),
        Rescued {
            retried: 1,
            discarded: 0,
            jobs: vec![super::rescue::by_doomed_worker(id, JobState::Retryable)],
        }
    );
    assert_nothing_to_claim(&store, NOOP).await;
    let expired = store.expire(100).await.unwrap();
    assert_eq!((expired.discarded, expired.cancelled), (0, 1));
    let ended = row(&store, id).await;
    assert_eq!(ended.state, JobState::Cancelled);
    assert!(ended.finalized_at.is_some());
}

/// Each snooze is counted on the row and handed to the next claim (which the runtime's snooze
/// limit reads), while the attempt stays the same.
pub async fn snoozes_are_counted_and_handed_to_each_claim<S: Store>(store: S) {
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    for snoozed in 0..3 {
        let job = claim_one(&store, NOOP).await;
        assert_eq!(job.lease.id, id);
        assert_eq!((job.attempt, job.snoozes), (1, snoozed));
        let snooze = Outcome::Snooze {
            delay: Duration::ZERO,
        };
        finalize_one(&store, job.lease, snooze).await;
    }
    let job = claim_one(&store, NOOP).await;
    assert_eq!((job.attempt, job.snoozes), (1, 3));
}

/// `prune` deletes completed and cancelled jobs finished longer ago than their retention,
/// at most its batch, and never a discarded job (kept until purged) or a waiting one; a
/// retention too long for any time to be older (`Duration::MAX`) keeps everything.
pub async fn prune_deletes_finished_jobs_past_retention_and_keeps_dead_letters<S: Store>(store: S) {
    let mut ids = Vec::new();
    for outcome in [
        Outcome::Complete,
        Outcome::Cancel {
            reason: "no".into(),
        },
        Outcome::Discard {
            failure: Failure {
                attempt: 1,
                class: ErrorClass::Terminal,
                message: "dead".into(),
            },
        },
    ] {
        let job = running(&store).await;
        finalize_one(&store, job.lease, outcome).await;
        ids.push(job.lease.id);
    }
    let waiting = store.enqueue(new_job("conformance.waiting")).await.unwrap();
    let keep_an_hour = PruneRequest {
        completed_retention: Duration::from_secs(3600),
        cancelled_retention: Duration::from_secs(3600),
        batch: 100,
    };
    assert_eq!(store.prune(&keep_an_hour).await.unwrap(), 0);
    // A retention past any time the store holds keeps everything, and is no error.
    let keep_for_ever = PruneRequest {
        completed_retention: Duration::MAX,
        cancelled_retention: Duration::MAX,
        batch: 100,
    };
    assert_eq!(store.prune(&keep_for_ever).await.unwrap(), 0);
    outlive(Duration::from_millis(10)).await;
    let keep_nothing = PruneRequest {
        completed_retention: Duration::ZERO,
        cancelled_retention: Duration::ZERO,
        batch: 1,
    };
    assert_eq!(store.prune(&keep_nothing).await.unwrap(), 1);
    let rest = PruneRequest {
        batch: 100,
        ..keep_nothing
    };
    assert_eq!(store.prune(&rest).await.unwrap(), 1);
    assert_eq!(store.prune(&rest).await.unwrap(), 0);
    assert_eq!(store.get(ids[0]).await.unwrap(), None, "completed kept");
    assert_eq!(store.get(ids[1]).await.unwrap(), None, "cancelled kept");
    assert_eq!(row(&store, ids[2]).await.state, JobState::Discarded);
    assert_eq!(row(&store, waiting).await.state, JobState::Available);
}

/// A job cancelled before its run time is not pruned until that time has passed by the
/// retention: a periodic job's next period, cancelled by an operator, holds its unique key
/// (`UntilPruned`) until then, so that no scheduler enqueues the period again.
pub async fn a_job_cancelled_before_its_time_is_pruned_only_after_it<S: Store + Admin>(store: S) {
    let ahead = store
        .enqueue(NewJob {
            run_at: RunAt::At(chrono::Utc::now() + chrono::Duration::hours(1)),
            ..new_job(NOOP)
        })
        .await
        .unwrap();
    let now = store.enqueue(new_job(NOOP)).await.unwrap();
    for id in [ahead, now] {
        assert_eq!(store.cancel(id).await.unwrap(), Cancelled::Now);
    }
    outlive(Duration::from_millis(10)).await;
    let keep_nothing = PruneRequest {
        completed_retention: Duration::ZERO,
        cancelled_retention: Duration::ZERO,
        batch: 100,
    };
    assert_eq!(store.prune(&keep_nothing).await.unwrap(), 1);
    assert_eq!(store.get(now).await.unwrap(), None);
    assert_eq!(row(&store, ahead).await.state, JobState::Cancelled);
}

/// `expire` never touches a running job, even one past its deadline or with cancellation
/// requested: its worker still holds the lease.
pub async fn expire_never_touches_a_running_job<S: Store + Admin>(store: S) {
    let id = store
        .enqueue(NewJob {
            deadline: Some(Deadline::In(Duration::from_millis(300))),
            ..new_job(NOOP)
        })
        .await
        .unwrap();
    let job = claim_one(&store, NOOP).await;
    assert_eq!(job.lease.id, id);
    assert_eq!(store.cancel(id).await.unwrap(), Cancelled::Requested);
    outlive(Duration::from_millis(300)).await;
    assert_eq!(store.expire(100).await.unwrap(), Default::default());
    let applied = store
        .finalize(&[Finalize {
            result: None,
            lease: job.lease,
            outcome: Outcome::Complete,
        }])
        .await
        .unwrap();
    assert_eq!(applied, vec![Finalized::Applied]);
}

/// A kind registered with a compensating job (`Store::register_kinds`): discarding a job of
/// it enqueues the compensating job, available at once in its queue, whose payload names the
/// discarded job, its kind, payload and last error, with the compensating kind's priority,
/// attempts and payload version; other outcomes enqueue nothing, and a kind registered again
/// without one no longer compensates.
pub async fn a_discard_enqueues_the_kinds_compensating_job<S: Store>(store: S) {
    let compensate = job_core::Compensate {
        kind: UNDO,
        queue: "undo",
        priority: 7,
        max_attempts: 2,
        version: 2,
    };
    store
        .register_kinds(&[(NOOP.to_owned(), Some(compensate))])
        .await
        .unwrap();
    let completed = running(&store).await;
    finalize_one(&store, completed.lease, Outcome::Complete).await;
    let job = discard_one(&store, "cannot work").await;
    let claimed = claim_undo(&store).await;
    assert_eq!(claimed.len(), 1, "one compensating job: {claimed:?}");
    assert_eq!(
        (
            claimed[0].priority,
            claimed[0].max_attempts,
            claimed[0].payload_version
        ),
        (7, 2, 2),
        "the compensating kind's options"
    );
    let payload: serde_json::Value = serde_json::from_str(&claimed[0].payload).unwrap();
    let discarded = &payload["discarded"];
    assert_eq!(discarded["job_id"], job);
    assert_eq!(discarded["kind"], NOOP);
    assert_eq!(discarded["payload"], serde_json::json!({"n": 1}));
    assert_eq!(discarded["error"]["class"], "terminal");
    assert_eq!(discarded["error"]["message"], "cannot work");
    let decoded: job_core::Discarded = serde_json::from_value(discarded.clone()).unwrap();
    assert_eq!(decoded.job_id, job);

    store
        .register_kinds(&[(NOOP.to_owned(), None)])
        .await
        .unwrap();
    discard_one(&store, "again").await;
    assert_eq!(claim_undo(&store).await, vec![], "no longer compensated");
}

/// A discard written after a cancel was requested (the worker learns of a request only at its
/// next heartbeat, so its last attempt may end with an error before then) ends the job
/// `cancelled`: no dead letter, no compensation, as the cancel asked.
pub async fn a_discard_after_a_cancel_request_ends_the_job_cancelled<S: Store + Admin>(store: S) {
    let compensate = job_core::Compensate {
        kind: UNDO,
        queue: "undo",
        priority: 0,
        max_attempts: 25,
        version: 1,
    };
    store
        .register_kinds(&[(NOOP.to_owned(), Some(compensate))])
        .await
        .unwrap();
    let job = running(&store).await;
    assert_eq!(
        store.cancel(job.lease.id).await.unwrap(),
        Cancelled::Requested
    );
    let discard = Outcome::Discard {
        failure: failure(1, ErrorClass::Terminal, "gave up"),
    };
    // Said as it was written, so that the worker counts a cancellation, not a dead letter.
    assert_eq!(
        store
            .finalize(&[Finalize::new(job.lease, discard)])
            .await
            .unwrap(),
        vec![Finalized::Cancelled]
    );
    let ended = row(&store, job.lease.id).await;
    assert_eq!(ended.state, JobState::Cancelled);
    assert!(ended.finalized_at.is_some());
    assert_eq!(
        ended.errors.last().map(|e| e.message.as_str()),
        Some("gave up"),
        "the attempt's error is kept"
    );
    assert_eq!(claim_undo(&store).await, vec![], "nothing to compensate");
}

/// The compensating kind of [`a_discard_enqueues_the_kinds_compensating_job`].
const UNDO: &str = "conformance.undo";

/// Runs a fresh [`NOOP`] and discards it with a terminal `message`; returns its id.
async fn discard_one<S: Store>(store: &S, message: &str) -> job_core::JobId {
    let job = running(store).await;
    let discard = Outcome::Discard {
        failure: failure(1, ErrorClass::Terminal, message),
    };
    finalize_one(store, job.lease, discard).await;
    job.lease.id
}

/// Claims what waits in queue `undo`.
async fn claim_undo<S: Store>(store: &S) -> Vec<job_core::ClaimedJob> {
    store
        .claim(&job_core::ClaimRequest {
            queue: "undo".into(),
            // A worker that runs the compensating kind at its version 2.
            kinds: vec![job_core::ClaimKind {
                max_version: 2,
                ..super::support::kind(UNDO)
            }],
            ..super::support::request(&[], 10)
        })
        .await
        .unwrap()
}
