//! A handler that completes its job in its own transaction holds the job's row until that
//! transaction ends. Held past two thirds of the lease, the lease cannot be renewed and the
//! worker stops the execution: the attempt counts (class `lease_held`), so a transaction always
//! held that long ends in a dead letter, never in a retry for ever. And a durable step after
//! `complete_in`, whose output could never be recorded, is refused before its effect runs.

use std::time::Duration;

use job::{Job, JobContext, JobError, JobOptions, JobState};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::common::*;
use crate::support::*;

/// What [`HoldRow`] does after `complete_in`, before its commit.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Hold {
    /// Waits 2.5 s: past two thirds of its 1.5 s lease.
    Wait,
    /// Runs a durable step (its effect counted), then commits.
    Step,
    /// Commits, then runs a durable step.
    StepAfterCommit,
}

/// Completes itself in its transaction, then does what `hold` says.
#[derive(Debug, Serialize, Deserialize)]
pub struct HoldRow {
    pub hold: Hold,
}

impl Job for HoldRow {
    const KIND: &'static str = "steps.hold_row";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_millis(1500),
        max_attempts: 2,
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        let pool = ctx.state::<PgPool>()?;
        let id = ctx.id();
        effects.executed(id);
        let mut tx = pool.begin().await?;
        job_postgres::complete_in(&mut tx, &ctx).await?;
        let notify = || async {
            effects.happen(id, "notify");
            Ok(())
        };
        match self.hold {
            Hold::Wait => tokio::time::sleep(Duration::from_millis(2500)).await,
            Hold::Step => {
                let stepped = ctx.step("notify", notify).await;
                effects.saw(id, format!("{stepped:?}"));
                stepped?;
            }
            Hold::StepAfterCommit => {}
        }
        tx.commit().await?;
        if let Hold::StepAfterCommit = self.hold {
            let stepped = ctx.step("notify", notify).await;
            effects.saw(id, format!("{stepped:?}"));
        }
        Ok(())
    }
}

fn classes(row: &job::JobRow) -> Vec<String> {
    row.errors.iter().map(|e| e.class.clone()).collect()
}

#[tokio::test]
async fn a_complete_in_transaction_held_past_its_lease_counts_its_attempts_to_a_dead_letter() {
    let h = Harness::new().await;
    let effects = Effects::default();
    let id = enqueue(&h.store, HoldRow { hold: Hold::Wait }).await;
    let worker = steps_worker(&h.store, &effects)
        .register::<HoldRow>()
        .build()
        .unwrap()
        .start();
    let row = h.reaches(id, JobState::Discarded).await;
    worker.shutdown().await;
    assert_eq!(effects.executions(id), 2, "one execution per attempt");
    assert_eq!(row.attempt, 2);
    // Written by the worker once the stopped code ended; on a loaded machine the rescuer may
    // come first, which counts the attempt as well.
    let found = classes(&row);
    assert!(
        found.len() == 2
            && found
                .iter()
                .all(|c| c == "lease_held" || c == "lease_expired")
            && found.iter().any(|c| c == "lease_held"),
        "{found:?}"
    );
    let held = row.errors.iter().find(|e| e.class == "lease_held").unwrap();
    assert!(held.message.contains("complete_in"), "{}", held.message);
}

#[tokio::test]
async fn a_step_after_complete_in_is_refused_before_its_effect_runs() {
    let h = Harness::new().await;
    let effects = Effects::default();
    let before_commit = enqueue(&h.store, HoldRow { hold: Hold::Step }).await;
    let after_commit = enqueue(
        &h.store,
        HoldRow {
            hold: Hold::StepAfterCommit,
        },
    )
    .await;
    let worker = steps_worker(&h.store, &effects)
        .register::<HoldRow>()
        .build()
        .unwrap()
        .start();
    // Refused with a terminal error: the handler returned it, its transaction rolled back.
    let row = h.reaches(before_commit, JobState::Discarded).await;
    assert_eq!(classes(&row), ["terminal"]);
    assert!(
        row.errors[0].message.contains("after complete_in"),
        "{}",
        row.errors[0].message
    );
    // Committed: the job is completed, and the step refused all the same.
    h.reaches(after_commit, JobState::Completed).await;
    eventually("the step after the commit to answer", || async {
        effects.seen(after_commit).pop()
    })
    .await;
    let stats = worker.shutdown().await.stats;
    for id in [before_commit, after_commit] {
        assert_eq!(
            effects.count(id, "notify"),
            0,
            "job {id}: the effect never ran"
        );
        assert_eq!(effects.executions(id), 1, "job {id}");
        let seen = effects.seen(id);
        assert!(
            seen.len() == 1 && seen[0].contains("after complete_in"),
            "job {id}: {seen:?}"
        );
    }
    assert_eq!(stats.lease_lost, 0, "{stats:?}");
    assert!(recorded_steps(h.store.pool(), before_commit)
        .await
        .is_empty());
    assert!(recorded_steps(h.store.pool(), after_commit)
        .await
        .is_empty());
}

/// Completes itself in its transaction, says so ([`Effects::happen`] `locked`), then waits far
/// longer than its lease: a worker's Held fence stops it, which rolls the transaction back.
#[derive(Debug, Serialize, Deserialize)]
pub struct HoldThenRescued {}

impl Job for HoldThenRescued {
    const KIND: &'static str = "steps.hold_then_rescued";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_millis(1500),
        max_attempts: 1,
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        let pool = ctx.state::<PgPool>()?;
        let mut tx = pool.begin().await?;
        job_postgres::complete_in(&mut tx, &ctx).await?;
        effects.happen(ctx.id(), "locked");
        tokio::time::sleep(Duration::from_secs(30)).await;
        tx.commit().await?;
        Ok(())
    }
}

/// An attempt stopped by the `Held` fence had its transaction rolled back with it: when the
/// rescuer takes the expired lease before the `lease_held` retry is written, the job was
/// rescued (here discarded, `lease_expired`), and the worker counts the fence, not a
/// completion (`WorkerStats::completed`, `job_finished_total`, the breaker's success).
#[tokio::test]
async fn a_held_attempt_rescued_before_its_write_is_not_counted_completed() {
    use job::Store;
    use job_testkit::{Outage, OutageStore};
    let h = Harness::new().await;
    let effects = Effects::default();
    let store = OutageStore::new(h.store.clone(), Outage::default());
    let id = enqueue(&h.store, HoldThenRescued {}).await;
    let worker = steps_worker_over(store.clone(), &h.store, &effects)
        .register::<HoldThenRescued>()
        .configure(|c| c.heartbeat_interval = Some(Duration::from_millis(100)))
        .build()
        .unwrap()
        .start();
    eventually("complete_in to lock the row", || async {
        (effects.count(id, "locked") == 1).then_some(())
    })
    .await;
    // The worker loses the database (its outcome write waits); the Held fence stops the
    // handler, whose transaction rolls back on its own pool, and the lease runs out.
    store.layer().stall_for(Duration::from_secs(60));
    eventually("another rescuer to take the expired lease", || async {
        h.store.rescue_expired(10).await.unwrap();
        let row = h.row(id).await;
        (row.state == JobState::Discarded).then_some(())
    })
    .await;
    store.layer().restore();
    let report = worker.shutdown().await;
    let row = h.row(id).await;
    assert_eq!(row.state, JobState::Discarded);
    assert_eq!(classes(&row), ["lease_expired"]);
    // Fenced, counted once as such: its outcome's lost lease is no other loss.
    let stats = report.stats;
    assert_eq!(
        (stats.completed, stats.fenced, stats.lease_lost),
        (0, 1, 0),
        "the job was rescued and discarded, never completed: {stats:?}"
    );
}
