//! Snoozes do not use attempts, so they are bounded: past the limit the job is discarded.

use std::time::Duration;

use job::{Job, JobContext, JobError, JobOptions, JobState, DEFAULT_MAX_SNOOZES};
use serde::{Deserialize, Serialize};

use crate::common::*;
use crate::support::*;

/// Never ready: snoozes for a millisecond every time.
#[derive(Debug, Serialize, Deserialize)]
pub struct NeverReady {}

impl Job for NeverReady {
    const KIND: &'static str = "steps.never_ready";
    const OPTIONS: JobOptions = JobOptions {
        max_attempts: 2,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Effects>()?.executed(ctx.id());
        Err(JobError::snooze(Duration::from_millis(1)))
    }
}

#[tokio::test]
async fn a_job_that_always_snoozes_is_discarded_once_it_reaches_the_snooze_limit() {
    let h = Harness::new().await;
    let effects = Effects::default();
    let id = enqueue(&h.store, NeverReady {}).await;
    let worker = steps_worker(&h.store, &effects)
        .register::<NeverReady>()
        .build()
        .unwrap()
        .start();
    let row = h.reaches(id, JobState::Discarded).await;
    let stats = worker.shutdown().await.stats;
    let snoozes: i32 = sqlx::query_scalar("SELECT snoozes FROM job.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(h.store.pool())
        .await
        .unwrap();
    assert_eq!(snoozes, DEFAULT_MAX_SNOOZES);
    assert_eq!(
        effects.executions(id),
        DEFAULT_MAX_SNOOZES as u32 + 1,
        "every snooze ran the handler once, and one more run asked past the limit"
    );
    assert_eq!(
        row.attempt, 1,
        "snoozes used no attempt (max_attempts is 2)"
    );
    assert_eq!(row.errors.len(), 1);
    assert_eq!(row.errors[0].class, "snooze_limit");
    assert!(
        row.errors[0].message.starts_with(&format!(
            "snoozed {DEFAULT_MAX_SNOOZES} times, the limit is {DEFAULT_MAX_SNOOZES}"
        )),
        "{}",
        row.errors[0].message
    );
    assert_eq!(
        (stats.snoozed, stats.discarded),
        (DEFAULT_MAX_SNOOZES as u64, 1)
    );
}
