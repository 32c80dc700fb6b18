//! Flow control: a kind's rate limit caps how many of its jobs claims start per window, across
//! claims; a circuit breaker that trips pauses its kind with the reason, until an operator
//! resumes it or its cool-down ends. A store that enforces neither says so
//! ([`Store::supports_flow_control`]) and is not held to these tests.

use std::time::Duration;

use job_core::{
    Admin, Breaker, BreakerCount, ClaimKind, ClaimRequest, Outcome, Pause, PausedBy, RateLimit,
    Store,
};

use super::support::{finalize_one, kind, new_job, request, ClaimDue, NOOP};

/// A kind without a limit, claimed beside the limited one.
const OTHER: &str = "conformance.other";

/// A window far longer than any test: no start leaves it while the test runs.
const HOUR: Duration = Duration::from_secs(3600);

/// Three starts per hour: of five jobs, the first claim takes three, later claims none (even
/// once the first three finished, as finishing frees no start), while another kind in the
/// same claim is taken as usual.
pub async fn a_rate_limit_caps_the_starts_of_its_kind_per_window<S: Store>(store: S) {
    if !store.supports_flow_control() {
        return;
    }
    store
        .enqueue_many((0..5).map(|_| new_job(NOOP)).collect())
        .await
        .unwrap();
    store
        .enqueue_many((0..2).map(|_| new_job(OTHER)).collect())
        .await
        .unwrap();
    let rated = ClaimRequest {
        kinds: vec![
            ClaimKind {
                rate: Some(RateLimit::new(3, HOUR)),
                ..kind(NOOP)
            },
            kind(OTHER),
        ],
        ..request(&[], 10)
    };
    let first = store.claim_due(&rated).await.unwrap();
    let noops: Vec<_> = first.iter().filter(|j| j.kind == NOOP).collect();
    assert_eq!(noops.len(), 3, "{first:?}");
    assert_eq!(first.iter().filter(|j| j.kind == OTHER).count(), 2);
    for job in &first {
        finalize_one(&store, job.lease, Outcome::Complete).await;
    }
    assert_eq!(store.claim_due(&rated).await.unwrap(), vec![]);
    // Without the limit the two left are there to take: they waited, nothing was lost.
    assert_eq!(
        store.claim_due(&request(&[NOOP], 10)).await.unwrap().len(),
        2
    );
}

/// A rate-limited kind and another kind of the same queue share one claim order: a job of
/// the other kind enqueued before the limited kind's jobs is claimed before them, not after
/// them, and one enqueued after them waits its turn, though the limit has room for all.
pub async fn a_rate_limited_kind_keeps_claim_order_with_the_other_kinds<S: Store>(store: S) {
    if !store.supports_flow_control() {
        return;
    }
    let first = store.enqueue(new_job(OTHER)).await.unwrap();
    let rated = store
        .enqueue_many((0..4).map(|_| new_job(NOOP)).collect())
        .await
        .unwrap();
    let last = store.enqueue(new_job(OTHER)).await.unwrap();
    let request = ClaimRequest {
        kinds: vec![
            ClaimKind {
                rate: Some(RateLimit::new(100, HOUR)),
                ..kind(NOOP)
            },
            kind(OTHER),
        ],
        ..request(&[], 3)
    };
    let ids = |jobs: Vec<job_core::ClaimedJob>| {
        let mut ids: Vec<_> = jobs.into_iter().map(|j| j.lease.id).collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(store.claim_due(&request).await.unwrap()),
        [first, rated[0], rated[1]]
    );
    assert_eq!(
        ids(store.claim_due(&request).await.unwrap()),
        [rated[2], rated[3], last]
    );
}

fn count(attempts: u32, failures: u32, breaker: Breaker) -> BreakerCount {
    BreakerCount {
        kind: NOOP.to_owned(),
        breaker,
        attempts,
        failures,
    }
}

/// A breaker trips once its window counted `min_attempts` with `failure_percent` failed, not
/// before: its kind is paused (by the breaker, with the reason, until the cool-down ends) and
/// claims skip it; a second trip while paused reports nothing; an operator's resume lets claims
/// take it again.
pub async fn a_tripped_breaker_pauses_its_kind_until_resumed<S: Store + Admin>(store: S) {
    if !store.supports_flow_control() {
        return;
    }
    let breaker = Breaker {
        failure_percent: 50,
        min_attempts: 10,
        window: HOUR,
        cool_down: HOUR,
    };
    store.enqueue(new_job(NOOP)).await.unwrap();
    // 9 attempts: under the minimum, though all failed.
    assert_eq!(
        store
            .record_breakers(&[count(9, 9, breaker)])
            .await
            .unwrap(),
        vec![]
    );
    // 9 + 11 = 20 attempts, 9 + 0 = 9 failed: 45 %, under the threshold.
    assert_eq!(
        store
            .record_breakers(&[count(11, 0, breaker)])
            .await
            .unwrap(),
        vec![]
    );
    assert_eq!(store.paused().await.unwrap(), vec![]);
    // 21 attempts, 10 failed: still 47 %. Then 22 with 11: 50 %, tripped.
    assert_eq!(
        store
            .record_breakers(&[count(1, 1, breaker)])
            .await
            .unwrap(),
        vec![]
    );
    let tripped = store
        .record_breakers(&[count(1, 1, breaker)])
        .await
        .unwrap();
    assert_eq!(tripped.len(), 1, "{tripped:?}");
    assert_eq!(tripped[0].kind, NOOP);
    assert!(
        tripped[0].reason.contains("11 of 22 attempts failed"),
        "{}",
        tripped[0].reason
    );
    let pauses = store.pauses().await.unwrap();
    assert_eq!(pauses.len(), 1, "{pauses:?}");
    assert_eq!(pauses[0].what, Pause::Kind(NOOP.to_owned()));
    assert_eq!(pauses[0].paused_by, PausedBy::Breaker);
    assert_eq!(
        pauses[0].reason.as_deref(),
        Some(tripped[0].reason.as_str())
    );
    assert_eq!(pauses[0].resume_at, Some(tripped[0].resume_at));
    assert_eq!(
        store.paused().await.unwrap(),
        vec![Pause::Kind(NOOP.to_owned())]
    );
    assert_eq!(
        store.claim_due(&request(&[NOOP], 10)).await.unwrap(),
        vec![]
    );
    // The counts started again: a new full window of failures trips it again, but the pause in
    // force is kept and nothing is reported.
    assert_eq!(
        store
            .record_breakers(&[count(10, 10, breaker)])
            .await
            .unwrap(),
        vec![]
    );
    assert!(store.resume(&Pause::Kind(NOOP.to_owned())).await.unwrap());
    assert_eq!(store.pauses().await.unwrap(), vec![]);
    assert_eq!(
        store.claim_due(&request(&[NOOP], 10)).await.unwrap().len(),
        1
    );
}

/// A breaker pause ends by itself when its cool-down has passed; an operator's pause is never
/// replaced by a breaker's, and an operator's pause replaces a breaker's.
pub async fn a_breaker_pause_ends_after_its_cool_down_and_yields_to_an_operator<
    S: Store + Admin,
>(
    store: S,
) {
    if !store.supports_flow_control() {
        return;
    }
    let short = Breaker {
        failure_percent: 100,
        min_attempts: 1,
        window: HOUR,
        cool_down: Duration::from_secs(1),
    };
    store.enqueue(new_job(NOOP)).await.unwrap();
    let tripped = store.record_breakers(&[count(1, 1, short)]).await.unwrap();
    assert_eq!(tripped.len(), 1);
    assert_eq!(
        store.claim_due(&request(&[NOOP], 10)).await.unwrap(),
        vec![]
    );
    // An operator's pause takes the breaker's place, and a trip leaves it alone.
    assert!(store.pause(&Pause::Kind(NOOP.to_owned())).await.unwrap());
    assert_eq!(
        store.record_breakers(&[count(1, 1, short)]).await.unwrap(),
        vec![]
    );
    let pauses = store.pauses().await.unwrap();
    assert_eq!(pauses[0].paused_by, PausedBy::Operator, "{pauses:?}");
    assert_eq!(pauses[0].resume_at, None);
    assert!(store.resume(&Pause::Kind(NOOP.to_owned())).await.unwrap());
    // A breaker's pause of one second: over once the store's clock has passed its end.
    let tripped = store.record_breakers(&[count(1, 1, short)]).await.unwrap();
    assert_eq!(tripped.len(), 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut claimed = Vec::new();
    for _ in 0..50 {
        claimed = store.claim_due(&request(&[NOOP], 10)).await.unwrap();
        if !claimed.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        claimed.len(),
        1,
        "the kind stayed paused past its cool-down"
    );
    assert_eq!(store.pauses().await.unwrap(), vec![]);
}

/// With a rate key, each key of a rate-limited kind has a window of its own, and jobs without
/// a key share one: at one start per hour, of two jobs of key `a`, one of `b` and two without a
/// key, a claim takes one of `a`, the one of `b` and one without a key, and later claims none.
/// A store without per-key rate limits must refuse a rate key at the door, naming `rate_key`,
/// and write nothing.
pub async fn a_rate_key_gives_each_key_its_own_window<S: Store>(store: S) {
    if !store.supports_flow_control() {
        return;
    }
    let keyed = |key: Option<&str>| job_core::NewJob {
        rate_key: key.map(str::to_owned),
        ..new_job(NOOP)
    };
    match store.enqueue(keyed(Some("a"))).await {
        Ok(_) => {}
        Err(job_core::EnqueueError::InvalidOption {
            option: "rate_key", ..
        }) => {
            assert_eq!(
                store.claim_due(&request(&[NOOP], 10)).await.unwrap(),
                vec![]
            );
            return;
        }
        Err(e) => panic!("enqueue with a rate key failed: {e}"),
    }
    for key in [Some("a"), Some("b"), None, None] {
        store.enqueue(keyed(key)).await.unwrap();
    }
    let rated = ClaimRequest {
        kinds: vec![ClaimKind {
            rate: Some(RateLimit::new(1, HOUR)),
            ..kind(NOOP)
        }],
        ..request(&[], 10)
    };
    let first = store.claim_due(&rated).await.unwrap();
    let mut keys: Vec<Option<String>> = Vec::new();
    for job in &first {
        keys.push(store.get(job.lease.id).await.unwrap().unwrap().rate_key);
    }
    keys.sort();
    assert_eq!(
        keys,
        vec![None, Some("a".to_owned()), Some("b".to_owned())],
        "{first:?}"
    );
    assert_eq!(store.claim_due(&rated).await.unwrap(), vec![]);
}
