//! Helpers the contract tests share. Only the `Store` trait, never a backend's internals.

use std::time::{Duration, Instant};

use job_core::{
    ClaimKind, ClaimRequest, ClaimedJob, ErrorClass, Failure, Finalize, Finalized, JobId, JobRow,
    JobState, Lease, NewJob, Outcome, Store, StoreError,
};

/// A claim as a worker makes it: due jobs staged first ([`Store::stage_due`], which a
/// worker's stager runs every poll interval), then claimed.
pub(crate) trait ClaimDue {
    async fn claim_due(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>, StoreError>;
}

impl<S: Store> ClaimDue for S {
    async fn claim_due(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>, StoreError> {
        self.stage_due(u32::MAX).await?;
        self.claim(request).await
    }
}

/// A failure of `attempt` with `class` and `message`.
pub(crate) fn failure(attempt: i32, class: ErrorClass, message: &str) -> Failure {
    Failure {
        attempt,
        class,
        message: message.into(),
    }
}

/// The kind most tests enqueue.
pub(crate) const NOOP: &str = "conformance.noop";

/// The lease most claims take: long enough never to expire during a test.
pub(crate) const LEASE: Duration = Duration::from_secs(30);

/// The lease of claims a test wants to see expire.
pub(crate) const SHORT_LEASE: Duration = Duration::from_millis(50);

/// The longest any bounded wait in the suite lasts.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// A kind claimed at payload version 1 with [`LEASE`].
pub(crate) fn kind(name: &str) -> ClaimKind {
    ClaimKind {
        kind: name.to_owned(),
        max_version: 1,
        lease: LEASE,
        concurrency: None,
        rate: None,
    }
}

/// A claim of up to `limit` jobs of `kinds` from the `default` queue by `worker-1`.
pub(crate) fn request(kinds: &[&str], limit: u32) -> ClaimRequest {
    ClaimRequest {
        queue: "default".to_owned(),
        kinds: kinds.iter().map(|k| kind(k)).collect(),
        limit,
        worker_id: "worker-1".to_owned(),
    }
}

/// A claim of every due [`NOOP`] with [`SHORT_LEASE`], by `doomed-worker`.
pub(crate) fn short_lease() -> ClaimRequest {
    ClaimRequest {
        kinds: vec![ClaimKind {
            lease: SHORT_LEASE,
            ..kind(NOOP)
        }],
        worker_id: "doomed-worker".into(),
        ..request(&[], 100)
    }
}

/// The lease of claims whose start a test records ([`Store::record_start`] refuses a lease
/// already run out) and then wants to see expire: long enough for the record under load.
pub(crate) const STARTED_LEASE: Duration = Duration::from_secs(2);

/// [`short_lease`] with [`STARTED_LEASE`].
pub(crate) fn started_lease() -> ClaimRequest {
    ClaimRequest {
        kinds: vec![ClaimKind {
            lease: STARTED_LEASE,
            ..kind(NOOP)
        }],
        ..short_lease()
    }
}

/// A due job of `kind` on the `default` queue with payload `{"n":1}`.
pub(crate) fn new_job(kind: &str) -> NewJob {
    NewJob::new(kind, r#"{"n":1}"#)
}

/// Reads a job that must exist.
pub(crate) async fn row<S: Store>(store: &S, id: JobId) -> JobRow {
    store
        .get(id)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("job {id} does not exist"))
}

/// Enqueues one [`NOOP`] and claims it.
pub(crate) async fn running<S: Store>(store: &S) -> ClaimedJob {
    let id = store.enqueue(new_job(NOOP)).await.unwrap();
    let job = claim_one(store, NOOP).await;
    assert_eq!(
        job.lease.id, id,
        "claimed another job than the one enqueued"
    );
    job
}

/// Claims exactly one job of `kind`, failing when there is not exactly one to claim.
pub(crate) async fn claim_one<S: Store>(store: &S, kind: &str) -> ClaimedJob {
    let mut claimed = store.claim_due(&request(&[kind], 10)).await.unwrap();
    assert_eq!(
        claimed.len(),
        1,
        "expected one claimed job of {kind}, got {claimed:?}"
    );
    claimed.pop().unwrap()
}

/// Asserts that nothing of `kind` can be claimed now.
pub(crate) async fn assert_nothing_to_claim<S: Store>(store: &S, kind: &str) {
    let claimed = store.claim_due(&request(&[kind], 10)).await.unwrap();
    assert_eq!(claimed, vec![], "expected nothing of {kind} to claim");
}

/// Finalizes one lease, which must still be held, and returns the row written.
pub(crate) async fn finalize_one<S: Store>(store: &S, lease: Lease, outcome: Outcome) -> JobRow {
    let result = store
        .finalize(&[Finalize::new(lease, outcome)])
        .await
        .unwrap();
    assert_eq!(
        result,
        vec![Finalized::Applied],
        "finalize of job {}",
        lease.id
    );
    row(store, lease.id).await
}

/// Asserts that a row holds no lease.
pub(crate) fn assert_lease_cleared(row: &JobRow) {
    assert_eq!(
        (row.lock_token, row.locked_until, row.locked_by.as_deref()),
        (None, None, None),
        "lease of job {} not cleared",
        row.id
    );
}

/// Waits until every lease a claim took just before this call, with `lease`, has expired by
/// the store's clock. Whatever clock the store uses, it advances at least this far while we
/// sleep, so no clock is compared with ours.
pub(crate) async fn outlive(lease: Duration) {
    tokio::time::sleep(lease + Duration::from_millis(200)).await;
}

/// Waits until job `id` is in `state` and returns its row.
pub(crate) async fn reaches<S: Store>(store: &S, id: JobId, state: JobState) -> JobRow {
    let start = Instant::now();
    loop {
        let row = row(store, id).await;
        if row.state == state {
            return row;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "job {id} did not become {state:?} within {PATIENCE:?}: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
