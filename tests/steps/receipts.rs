//! Durable steps under crashes and stale leases: a recorded step never runs again, an
//! unrecorded one does, and a step whose lease is gone records nothing.

use job::{JobState, Store};
use job_testkit::{Faults, Outage, OutageStore, Point};

use crate::common::*;
use crate::support::*;

/// Runs one `Checkout` under `faults` until it completes; returns its id, the worker's
/// lease losses and crashes.
async fn checkout_under(faults: Faults) -> (Harness, Effects, job::JobId, job::WorkerStats) {
    let h = Harness::new().await;
    let effects = Effects::default();
    let id = enqueue(&h.store, Checkout { order: 7 }).await;
    let worker = steps_worker(&h.store, &effects)
        .register::<Checkout>()
        .faults(faults.clone())
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Completed).await;
    let stats = worker.shutdown().await.stats;
    assert_eq!(faults.crashes().len(), 1, "the fault fired once");
    (h, effects, id, stats)
}

#[tokio::test]
async fn a_crash_after_a_step_skips_that_step_on_the_retry() {
    let faults = Faults::new()
        .crash_after(Point::Step)
        .step("charge")
        .attempt(1);
    let (h, effects, id, stats) = checkout_under(faults).await;
    assert_eq!(effects.executions(id), 2, "the crash cost one execution");
    assert_eq!(effects.count(id, "charge"), 1, "the card is charged once");
    assert_eq!(effects.count(id, "email"), 1);
    assert_eq!(
        effects.seen(id),
        ["attempt 2: ch_7, 1"],
        "the retry got the recorded charge back"
    );
    let row = h.row(id).await;
    assert_eq!(row.attempt, 2);
    assert_eq!(row.errors[0].class, "lease_expired");
    assert_eq!(
        recorded_steps(h.store.pool(), id).await,
        [
            ("charge".to_owned(), "\"ch_7\"".to_owned(), 1),
            ("email".to_owned(), "1".to_owned(), 2)
        ]
    );
    assert_eq!((stats.crashed, stats.lease_lost), (1, 0));
}

#[tokio::test]
async fn a_crash_after_perform_runs_no_recorded_step_again() {
    let faults = Faults::new().crash_after(Point::Perform).attempt(1);
    let (h, effects, id, _) = checkout_under(faults).await;
    assert_eq!(effects.executions(id), 2, "the handler itself ran twice");
    assert_eq!(effects.count(id, "charge"), 1);
    assert_eq!(effects.count(id, "email"), 1);
    assert_eq!(
        effects.seen(id),
        ["attempt 1: ch_7, 1", "attempt 2: ch_7, 1"]
    );
    let attempts: Vec<i32> = recorded_steps(h.store.pool(), id)
        .await
        .into_iter()
        .map(|(_, _, attempt)| attempt)
        .collect();
    assert_eq!(attempts, [1, 1], "both steps were recorded by attempt 1");
}

#[tokio::test]
async fn a_crash_before_a_step_runs_that_step_on_the_retry() {
    let faults = Faults::new()
        .crash_before(Point::Step)
        .step("email")
        .attempt(1);
    let (h, effects, id, _) = checkout_under(faults).await;
    assert_eq!(effects.count(id, "charge"), 1);
    assert_eq!(
        effects.count(id, "email"),
        1,
        "the email never ran on attempt 1, and ran on attempt 2"
    );
    let steps = recorded_steps(h.store.pool(), id).await;
    assert_eq!(steps[0].2, 1, "charge was recorded by attempt 1");
    assert_eq!(steps[1].2, 2, "email was recorded by attempt 2");
}

#[tokio::test]
async fn a_step_whose_lease_was_taken_records_nothing_and_finalizes_nothing() {
    let h = Harness::new().await;
    let effects = Effects::default();
    let id = enqueue(&h.store, StaleCharge {}).await;
    let worker = steps_worker(&h.store, &effects)
        .register::<StaleCharge>()
        .build()
        .unwrap()
        .start();
    let seen = eventually("the stale step to return", || async {
        effects.seen(id).pop()
    })
    .await;
    assert!(
        seen.contains("lease lost: the output of step `charge` was not recorded"),
        "{seen}"
    );
    eventually("the worker to count the lost lease", || async {
        (worker.stats().lease_lost == 1 && worker.in_flight() == 0).then_some(())
    })
    .await;
    worker.shutdown().await;
    assert_eq!(effects.count(id, "charge"), 1, "the closure ran");
    assert!(recorded_steps(h.store.pool(), id).await.is_empty());
    let row = h.row(id).await;
    assert_eq!(
        row.state,
        JobState::Running,
        "nothing was finalized or released under the stale lease: the new owner has it"
    );
    assert!(row.errors.is_empty());
}

#[tokio::test]
async fn deleting_a_job_deletes_its_recorded_steps() {
    let h = Harness::new().await;
    let effects = Effects::default();
    let id = enqueue(&h.store, Checkout { order: 1 }).await;
    let worker = steps_worker(&h.store, &effects)
        .register::<Checkout>()
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(recorded_steps(h.store.pool(), id).await.len(), 2);
    sqlx::query("DELETE FROM job.jobs WHERE id = $1")
        .bind(id)
        .execute(h.store.pool())
        .await
        .unwrap();
    assert!(recorded_steps(h.store.pool(), id).await.is_empty());
    assert_eq!(h.store.get(id).await.unwrap(), None);
}

/// Charges, and on attempt 1 cuts the store off for 200 ms right after the charge, before its
/// output can be recorded.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct ChargeThenOutage {}

impl job::Job for ChargeThenOutage {
    const KIND: &'static str = "steps.charge_then_outage";
    const OPTIONS: job::JobOptions = job::JobOptions {
        backoff: FAST_BACKOFF,
        ..job::JobOptions::DEFAULT
    };

    async fn perform(self, ctx: job::JobContext) -> Result<(), job::JobError> {
        let effects = ctx.state::<Effects>()?;
        let outage = ctx.state::<OutageStore<job::PgStore>>()?;
        let id = ctx.id();
        ctx.step("charge", || async {
            effects.happen(id, "charge");
            if ctx.attempt() == 1 {
                outage
                    .layer()
                    .fail_for(std::time::Duration::from_millis(200));
            }
            Ok(())
        })
        .await
    }
}

#[tokio::test]
async fn a_step_output_the_store_cannot_record_for_a_moment_is_recorded_once_it_is_back() {
    let h = Harness::new().await;
    let effects = Effects::default();
    let outage = OutageStore::new(h.store.clone(), Outage::default());
    let id = enqueue(&h.store, ChargeThenOutage {}).await;
    let worker = steps_worker_over(outage.clone(), &h.store, &effects)
        .register::<ChargeThenOutage>()
        .state(outage.clone())
        .build()
        .unwrap()
        .start();
    let row = h.reaches(id, JobState::Completed).await;
    let stats = worker.shutdown().await.stats;
    assert!(
        outage.layer().calls_refused() > 0,
        "the record met the outage"
    );
    assert_eq!(row.attempt, 1, "the attempt was not abandoned");
    assert_eq!(row.errors, vec![]);
    assert_eq!(
        effects.count(id, "charge"),
        1,
        "the record is retried under the lease, so the effect does not run again"
    );
    assert_eq!(recorded_steps(h.store.pool(), id).await[0].2, 1);
    assert_eq!(stats.lease_lost, 0);
}
