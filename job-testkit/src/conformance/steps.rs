//! Durable steps: an output recorded once under the lease, read back by later attempts, and
//! nothing recorded without the lease.

use std::collections::HashMap;
use std::time::Duration;

use job_core::{ErrorClass, Failure, Finalized, Outcome, PruneRequest, Store};

use super::support::{claim_one, finalize_one, outlive, running, short_lease, NOOP};

/// The recorded steps as JSON values (a store may normalize the text it stores).
async fn steps<S: Store>(store: &S, lease: &job_core::Lease) -> HashMap<String, serde_json::Value> {
    store
        .load_steps(lease)
        .await
        .unwrap()
        .into_iter()
        .map(|(name, output)| (name, serde_json::from_str(&output).unwrap()))
        .collect()
}

/// A step saved under the lease is recorded; saving the same name again keeps the first
/// output (and is still `Applied`).
pub async fn a_step_is_recorded_once_under_the_lease<S: Store>(store: S) {
    let job = running(&store).await;
    let first = store
        .save_step(&job.lease, "charge", r#"{"id":"ch_1"}"#)
        .await
        .unwrap();
    assert_eq!(first, Finalized::Applied);
    let again = store
        .save_step(&job.lease, "charge", r#"{"id":"ch_2"}"#)
        .await
        .unwrap();
    assert_eq!(again, Finalized::Applied);
    let recorded = steps(&store, &job.lease).await;
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded["charge"], serde_json::json!({ "id": "ch_1" }));
}

/// A save under a lease that was lost (the job rescued) records nothing and says
/// `LeaseLost`; the next attempt finds no such step.
pub async fn a_step_under_a_lost_lease_is_not_recorded<S: Store>(store: S) {
    store.enqueue(super::support::new_job(NOOP)).await.unwrap();
    let doomed = store.claim(&short_lease()).await.unwrap().pop().unwrap();
    outlive(super::support::SHORT_LEASE).await;
    assert_eq!(store.rescue_expired(10).await.unwrap().retried, 1);
    let saved = store.save_step(&doomed.lease, "late", "1").await.unwrap();
    assert_eq!(saved, Finalized::LeaseLost);
    let next = claim_one(&store, NOOP).await;
    assert_eq!(steps(&store, &next.lease).await, HashMap::new());
}

/// A retry's next attempt reads the steps of the earlier one; pruning the job deletes its
/// steps with it.
pub async fn steps_outlive_a_retry_and_go_with_the_job<S: Store>(store: S) {
    let job = running(&store).await;
    store.save_step(&job.lease, "a", "1").await.unwrap();
    let retry = Outcome::Retry {
        delay: Duration::ZERO,
        failure: Failure {
            attempt: 1,
            class: ErrorClass::Error,
            message: "crashed after a".into(),
        },
    };
    finalize_one(&store, job.lease, retry).await;
    let second = claim_one(&store, NOOP).await;
    assert_eq!(second.attempt, 2);
    assert_eq!(
        steps(&store, &second.lease).await["a"],
        serde_json::json!(1)
    );
    finalize_one(&store, second.lease, Outcome::Complete).await;
    outlive(Duration::from_millis(10)).await;
    let prune = PruneRequest {
        completed_retention: Duration::ZERO,
        cancelled_retention: Duration::ZERO,
        batch: 10,
    };
    assert_eq!(store.prune(&prune).await.unwrap(), 1);
    assert_eq!(steps(&store, &second.lease).await, HashMap::new());
}
