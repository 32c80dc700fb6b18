//! Claiming: order, limits, queues, kinds, versions, concurrency limits and exclusivity.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use job_core::{
    ClaimKind, ClaimRequest, InvalidClaim, JobId, JobState, NewJob, Outcome, RateLimit, RunAt,
    Store,
};
use tokio::sync::Barrier;

use super::support::{
    assert_nothing_to_claim, claim_one, finalize_one, kind, new_job, request, row, ClaimDue, NOOP,
};

/// Due jobs are claimed by priority (lower first), then run time, then id, across batches.
pub async fn claim_order_is_priority_then_run_at_then_id<S: Store>(store: S) {
    let hour_ago = Utc::now() - chrono::Duration::hours(1);
    let at = |minutes: i64| RunAt::At(hour_ago + chrono::Duration::minutes(minutes));
    // (label, priority, run_at), enqueued out of order.
    let specs = [
        ("p1-late", 1, at(30)),
        ("p0-late", 0, at(20)),
        ("p1-early", 1, at(10)),
        ("p0-early-a", 0, at(5)),
        ("p0-early-b", 0, at(5)),
        ("p2", 2, at(0)),
    ];
    let mut ids = Vec::new();
    for (label, priority, run_at) in specs {
        let job = NewJob {
            priority,
            run_at,
            payload: format!(r#"{{"label":"{label}"}}"#),
            ..new_job(NOOP)
        };
        ids.push((label, store.enqueue(job).await.unwrap()));
    }
    let id_of = |label: &str| ids.iter().find(|(l, _)| *l == label).unwrap().1;
    let expected: Vec<JobId> = [
        "p0-early-a",
        "p0-early-b",
        "p0-late",
        "p1-early",
        "p1-late",
        "p2",
    ]
    .into_iter()
    .map(id_of)
    .collect();

    // One batch comes back in claim order...
    let claimed = store.claim_due(&request(&[NOOP], 4)).await.unwrap();
    let got: Vec<JobId> = claimed.iter().map(|c| c.lease.id).collect();
    assert_eq!(got, expected[..4]);
    // ...and the next batch continues where it stopped.
    let claimed = store.claim_due(&request(&[NOOP], 4)).await.unwrap();
    let got: Vec<JobId> = claimed.iter().map(|c| c.lease.id).collect();
    assert_eq!(got, expected[4..]);
}

/// A claim takes at most its limit (zero takes nothing), and only from its own queue.
pub async fn claim_takes_at_most_the_limit_and_only_from_its_queue<S: Store>(store: S) {
    let mut jobs: Vec<NewJob> = (0..5).map(|_| new_job(NOOP)).collect();
    jobs.push(NewJob {
        queue: "other".into(),
        ..new_job(NOOP)
    });
    let ids = store.enqueue_many(jobs).await.unwrap();
    assert_eq!(store.claim_due(&request(&[NOOP], 0)).await.unwrap(), vec![]);
    assert_eq!(
        store.claim_due(&request(&[NOOP], 3)).await.unwrap().len(),
        3
    );
    assert_eq!(
        store.claim_due(&request(&[NOOP], 3)).await.unwrap().len(),
        2
    );
    assert_eq!(
        store.claim_due(&request(&[NOOP], 3)).await.unwrap().len(),
        0
    );
    assert_eq!(row(&store, ids[5]).await.state, JobState::Available);
    let other = ClaimRequest {
        queue: "other".into(),
        ..request(&[NOOP], 3)
    };
    let claimed = store.claim_due(&other).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].lease.id, ids[5]);
}

/// Rows of a kind the claimer did not ask for are never claimed and stay exactly as they were.
pub async fn unknown_kinds_are_never_claimed_and_stay_untouched<S: Store>(store: S) {
    let unknown = store.enqueue(new_job("conformance.unknown")).await.unwrap();
    let known = store.enqueue(new_job("conformance.known")).await.unwrap();
    let before = row(&store, unknown).await;

    let claimed = store
        .claim_due(&request(&["conformance.known"], 10))
        .await
        .unwrap();
    let ids: Vec<JobId> = claimed.iter().map(|c| c.lease.id).collect();
    assert_eq!(ids, vec![known]);
    assert_nothing_to_claim(&store, "conformance.known").await;
    assert_eq!(store.claim_due(&request(&[], 10)).await.unwrap(), vec![]);
    assert_eq!(row(&store, unknown).await, before);
}

/// A row whose payload version is above the claimer's `max_version` is never claimed and
/// stays untouched; versions up to it are.
pub async fn a_row_with_a_payload_version_above_the_workers_max_is_never_claimed<S: Store>(
    store: S,
) {
    let version = |v| NewJob {
        payload_version: v,
        ..new_job(NOOP)
    };
    let v1 = store.enqueue(version(1)).await.unwrap();
    let v2 = store.enqueue(version(2)).await.unwrap();
    let v3 = store.enqueue(version(3)).await.unwrap();
    let before = row(&store, v3).await;
    let old_worker = ClaimRequest {
        kinds: vec![ClaimKind {
            max_version: 2,
            ..kind(NOOP)
        }],
        ..request(&[], 10)
    };
    let claimed: Vec<(JobId, i32)> = store
        .claim_due(&old_worker)
        .await
        .unwrap()
        .iter()
        .map(|c| (c.lease.id, c.payload_version))
        .collect();
    assert_eq!(claimed, vec![(v1, 1), (v2, 2)]);
    assert_eq!(store.claim_due(&old_worker).await.unwrap(), vec![]);
    assert_eq!(row(&store, v3).await, before);
}

/// One claim of several kinds gives each job the lease and version bound of its own kind.
pub async fn each_kind_is_claimed_with_its_own_lease_and_max_version<S: Store>(store: S) {
    let short = store.enqueue(new_job("conformance.short")).await.unwrap();
    let long = NewJob {
        payload_version: 5,
        ..new_job("conformance.long")
    };
    let long = store.enqueue(long).await.unwrap();
    let both = ClaimRequest {
        kinds: vec![
            ClaimKind {
                lease: Duration::from_secs(10),
                ..kind("conformance.short")
            },
            ClaimKind {
                max_version: 5,
                lease: Duration::from_secs(3600),
                ..kind("conformance.long")
            },
        ],
        ..request(&[], 10)
    };
    assert_eq!(store.claim_due(&both).await.unwrap().len(), 2);
    let short = row(&store, short).await.locked_until.unwrap();
    let long = row(&store, long).await.locked_until.unwrap();
    let gap = long - short;
    assert!(
        gap > chrono::Duration::minutes(59) && gap < chrono::Duration::minutes(61),
        "leases of 10 s and 1 h end {gap} apart"
    );
}

/// A claim with a kind's lease under 1 ms or over `MAX_DURATION` is refused, naming the kind,
/// whether or not the kind is rate-limited, and takes nothing; a lease of 1 ms is taken.
pub async fn a_claim_with_a_lease_out_of_bounds_is_refused_and_takes_nothing<S: Store>(store: S) {
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    let with = |lease: Duration, rate: Option<RateLimit>| ClaimRequest {
        kinds: vec![ClaimKind {
            lease,
            rate,
            ..kind(NOOP)
        }],
        ..request(&[], 10)
    };
    let hour = Some(RateLimit::new(100, Duration::from_secs(3600)));
    let over = job_core::MAX_DURATION + Duration::from_millis(1);
    for lease in [Duration::ZERO, Duration::from_micros(999), over] {
        for rate in [None, hour] {
            let error = store
                .claim(&with(lease, rate))
                .await
                .expect_err("a lease out of bounds was taken");
            assert!(error.is_refused(), "not refused: {error}");
            let invalid = error
                .inner()
                .downcast_ref::<InvalidClaim>()
                .unwrap_or_else(|| panic!("not an InvalidClaim: {error:?}"));
            assert_eq!(
                (invalid.kind.as_str(), invalid.lease),
                (NOOP, lease),
                "{error}"
            );
            assert!(
                error.to_string().contains("lease of kind `") && error.to_string().contains(NOOP),
                "{error}"
            );
        }
    }
    // Two kinds, the second's lease out of bounds: refused, naming it, and nothing of the
    // first is taken either.
    let both = ClaimRequest {
        kinds: vec![
            kind(NOOP),
            ClaimKind {
                lease: Duration::ZERO,
                ..kind("conformance.other")
            },
        ],
        ..request(&[], 10)
    };
    let error = store
        .claim(&both)
        .await
        .expect_err("a lease of 0 was taken");
    let invalid = error.inner().downcast_ref::<InvalidClaim>();
    assert_eq!(
        invalid.map(|i| i.kind.as_str()),
        Some("conformance.other"),
        "{error}"
    );
    let claimed = store
        .claim_due(&with(Duration::from_millis(1), None))
        .await
        .unwrap();
    assert_eq!(
        claimed
            .iter()
            .map(|c| (c.lease.id, c.attempt))
            .collect::<Vec<_>>(),
        vec![(id, 1)],
        "the refused claims took the job"
    );
}

/// A job whose lease is held is not claimed again.
pub async fn a_claimed_job_is_not_claimed_again<S: Store>(store: S) {
    store.enqueue(new_job(NOOP)).await.unwrap();
    claim_one(&store, NOOP).await;
    assert_nothing_to_claim(&store, NOOP).await;
}

/// A kind's concurrency limit caps its running jobs across claims; finishing one frees a slot.
pub async fn a_kind_concurrency_limit_caps_its_running_jobs<S: Store>(store: S) {
    store
        .enqueue_many((0..5).map(|_| new_job(NOOP)).collect())
        .await
        .unwrap();
    let limited = ClaimRequest {
        kinds: vec![ClaimKind {
            concurrency: Some(2),
            rate: None,
            ..kind(NOOP)
        }],
        ..request(&[], 10)
    };
    let first = store.claim_due(&limited).await.unwrap();
    assert_eq!(first.len(), 2, "{first:?}");
    assert_eq!(store.claim_due(&limited).await.unwrap(), vec![]);
    finalize_one(&store, first[0].lease, Outcome::Complete).await;
    assert_eq!(store.claim_due(&limited).await.unwrap().len(), 1);
    assert_eq!(store.claim_due(&limited).await.unwrap(), vec![]);
}

/// Eight claimers racing over 500 jobs hand every job out exactly once, at attempt 1.
pub async fn claims_by_8_concurrent_tasks_never_hand_one_job_to_two_claimers<S: Store>(store: S) {
    const CLAIMERS: usize = 8;
    let jobs: Vec<NewJob> = (0..500).map(|_| new_job(NOOP)).collect();
    let enqueued: HashSet<JobId> = store
        .enqueue_many(jobs)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(enqueued.len(), 500);

    let start = Arc::new(Barrier::new(CLAIMERS));
    let claimers: Vec<_> = (0..CLAIMERS)
        .map(|n| {
            let store = store.clone();
            let start = start.clone();
            tokio::spawn(async move {
                let request = ClaimRequest {
                    worker_id: format!("worker-{n}"),
                    ..request(&[NOOP], 7)
                };
                // A first claim that returns nothing before the others begin proves nothing:
                // start together so the claims contend.
                start.wait().await;
                let mut mine = Vec::new();
                loop {
                    let batch = store.claim_due(&request).await.unwrap();
                    if batch.is_empty() {
                        return (request.worker_id, mine);
                    }
                    mine.extend(batch.into_iter().map(|c| (c.lease, c.attempt)));
                }
            })
        })
        .collect();
    let mut seen = HashSet::new();
    let mut holders = Vec::new();
    for claimer in claimers {
        let (worker, mine) = claimer.await.unwrap();
        for (lease, attempt) in mine {
            assert_eq!(attempt, 1, "job {} was claimed more than once", lease.id);
            assert!(
                seen.insert(lease.id),
                "job {} was handed to two claimers",
                lease.id
            );
            holders.push((lease, worker.clone()));
        }
    }
    assert_eq!(seen, enqueued);
    for (lease, worker) in holders {
        let row = row(&store, lease.id).await;
        assert_eq!(
            (
                row.state,
                row.attempt,
                row.lock_token,
                row.locked_by.as_deref()
            ),
            (
                JobState::Running,
                1,
                Some(lease.token),
                Some(worker.as_str())
            ),
            "job {}",
            lease.id
        );
    }
}
