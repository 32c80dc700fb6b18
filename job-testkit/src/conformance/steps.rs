//! Durable steps: an output recorded once under the lease, read back by later attempts, and
//! nothing recorded without the lease.

use std::collections::HashMap;
use std::time::Duration;

use job_core::{
    ErrorClass, Failure, Finalized, Outcome, PruneRequest, StepLimit, Store, MAX_STEPS_TOTAL,
};

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

/// The steps load in name order up to a bound of bytes (names and output text), saying
/// whether that is all of them; any one reads by name. With no step, the load is complete.
pub async fn steps_load_in_name_order_up_to_a_bound_and_one_by_name<S: Store>(store: S) {
    let job = running(&store).await;
    assert_eq!(
        store.load_steps_up_to(&job.lease, 0).await.unwrap(),
        (HashMap::new(), true),
        "no step yet"
    );
    // Each name and output: 1 + 100 bytes.
    let output = format!("\"{}\"", "x".repeat(98));
    for name in ["c", "a", "b"] {
        let saved = store.save_step(&job.lease, name, &output).await.unwrap();
        assert_eq!(saved, Finalized::Applied);
    }
    let names = |loaded: &HashMap<String, String>| {
        let mut names: Vec<String> = loaded.keys().cloned().collect();
        names.sort();
        names
    };
    let (two, complete) = store.load_steps_up_to(&job.lease, 250).await.unwrap();
    assert_eq!(
        (names(&two), complete),
        (vec!["a".into(), "b".into()], false)
    );
    assert_eq!(
        serde_json::from_str::<String>(&two["a"]).unwrap(),
        "x".repeat(98)
    );
    let (none, complete) = store.load_steps_up_to(&job.lease, 100).await.unwrap();
    assert!(
        none.is_empty() && !complete,
        "the first alone is past the bound"
    );
    let (all, complete) = store.load_steps_up_to(&job.lease, 303).await.unwrap();
    assert_eq!((all.len(), complete), (3, true));
    let c = store.load_step(&job.lease, "c").await.unwrap().unwrap();
    assert_eq!(serde_json::from_str::<String>(&c).unwrap(), "x".repeat(98));
    assert_eq!(store.load_step(&job.lease, "d").await.unwrap(), None);
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

/// The refusal inside `error`: a refused store error holding a [`StepLimit`].
fn step_limit(error: &job_core::StoreError) -> &StepLimit {
    assert!(error.is_refused(), "refused, not passing: {error}");
    error
        .inner()
        .downcast_ref::<StepLimit>()
        .unwrap_or_else(|| panic!("a StepLimit: {error}"))
}

/// A job records at most [`MAX_STEPS_TOTAL`] bytes of step outputs: a new step that would
/// pass them is refused, however small, and nothing is recorded.
pub async fn a_new_step_past_the_jobs_output_bytes_is_refused<S: Store>(store: S) {
    let job = running(&store).await;
    // The largest output a store takes from any writer: 2 MiB of JSON text.
    let output = format!("\"{}\"", "x".repeat(2 * 1024 * 1024 - 2));
    let fill = MAX_STEPS_TOTAL / output.len();
    for i in 0..fill {
        let saved = store
            .save_step(&job.lease, &format!("big-{i}"), &output)
            .await
            .unwrap();
        assert_eq!(saved, Finalized::Applied, "step {i}");
    }
    let refused = store
        .save_step(&job.lease, "one-more", "1")
        .await
        .expect_err("a step past the bytes is refused");
    let limit = step_limit(&refused);
    assert_eq!(
        (limit.steps, limit.bytes, limit.output),
        (fill as u64, (fill * output.len()) as u64, 1)
    );
    assert!(
        refused.to_string().contains("job::MAX_STEPS_TOTAL"),
        "{refused}"
    );
    let recorded = store.load_step(&job.lease, "one-more").await.unwrap();
    assert_eq!(recorded, None);
}
