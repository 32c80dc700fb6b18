//! Application code that runs outside the handler's own task: the payload's decoding and the
//! upgrade hook, the handler's error shown as text, and a context moved into a task that
//! outlives its handler. A panic there once unwound the executor and left its job held (its
//! lease renewed for ever, never rescued); late work ran beside the job's next attempt.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use job::{Job, JobContext, JobError, JobOptions, JobState};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::common::{enqueue, Harness, FAST_BACKOFF};

/// Version 2; its upgrade hook panics on a version-1 payload.
#[derive(Debug, Serialize, Deserialize)]
pub struct UpgradePanics {}

impl Job for UpgradePanics {
    const KIND: &'static str = "isolation.upgrade_panics";
    const VERSION: i32 = 2;

    fn upgrade(_: i32, old: serde_json::Value) -> Result<serde_json::Value, JobError> {
        let field = old["missing"].as_str().unwrap();
        Ok(serde_json::json!({ "field": field }))
    }

    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// An error whose `Display` panics.
#[derive(Debug)]
pub struct Unprintable;

impl std::fmt::Display for Unprintable {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        panic!("this error cannot be shown")
    }
}

impl std::error::Error for Unprintable {}

/// Fails once with an [`Unprintable`] error.
#[derive(Debug, Serialize, Deserialize)]
pub struct FailsUnprintably {}

impl Job for FailsUnprintably {
    const KIND: &'static str = "isolation.fails_unprintably";
    const OPTIONS: JobOptions = JobOptions {
        max_attempts: 1,
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Err(Unprintable.into())
    }
}

/// What the late work of a [`LeavesWorkBehind`] job did: (what, whether it was refused, whether
/// its closure or effect ran).
#[derive(Clone)]
pub struct Late(mpsc::UnboundedSender<(&'static str, bool, bool)>);

/// Returns at once, leaving a task that uses its context once the attempt is over.
#[derive(Debug, Serialize, Deserialize)]
pub struct LeavesWorkBehind {}

impl Job for LeavesWorkBehind {
    const KIND: &'static str = "isolation.leaves_work_behind";

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let late = ctx.state::<Late>()?.clone();
        tokio::spawn(async move {
            // Until the worker has written the outcome and forgotten the execution.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let ran = Arc::new(Mutex::new(false));
            let flag = ran.clone();
            let blocking = futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(
                ctx.blocking(move || *flag.lock().unwrap() = true),
            ))
            .await;
            let _ = late
                .0
                .send(("blocking", blocking.is_err(), *ran.lock().unwrap()));
            let effect = Arc::new(Mutex::new(false));
            let flag = effect.clone();
            let step = ctx
                .step("late", || async move {
                    *flag.lock().unwrap() = true;
                    Ok(1)
                })
                .await;
            let _ = late
                .0
                .send(("step", step.is_err(), *effect.lock().unwrap()));
        });
        Ok(())
    }
}

fn worker(h: &Harness, late: Late) -> job::WorkerHandle {
    job::Worker::builder(h.store.clone())
        .register::<UpgradePanics>()
        .register::<FailsUnprintably>()
        .register::<LeavesWorkBehind>()
        .queue("default", 4)
        .poll_interval(Duration::from_millis(20))
        .state(late)
        .build()
        .unwrap()
        .start()
}

#[tokio::test]
async fn a_panicking_upgrade_hook_discards_the_job_as_poison() {
    let h = Harness::new().await;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO job.jobs (kind, payload, payload_version) VALUES ($1, '{}', 1) RETURNING id",
    )
    .bind(UpgradePanics::KIND)
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    let worker = worker(&h, Late(mpsc::unbounded_channel().0));
    let row = h.reaches(id, JobState::Discarded).await;
    let stats = worker.shutdown().await.stats;
    let last = row.errors.last().expect("an error");
    assert_eq!(last.class, "poison");
    assert!(
        last.message.contains("panicked") && last.message.contains("unwrap"),
        "{}",
        last.message
    );
    assert_eq!(row.lock_token, None);
    assert_eq!(stats.discarded, 1, "{stats:?}");
}

#[tokio::test]
async fn an_error_whose_display_panics_fails_the_attempt_as_a_panic() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, FailsUnprintably {}).await;
    let worker = worker(&h, Late(mpsc::unbounded_channel().0));
    let row = h.reaches(id, JobState::Discarded).await;
    worker.shutdown().await;
    let last = row.errors.last().expect("an error");
    assert_eq!(last.class, "panic", "{last:?}");
    assert!(
        last.message
            .contains("showing the handler's error panicked")
            && last.message.contains("this error cannot be shown"),
        "{}",
        last.message
    );
}

#[tokio::test]
async fn a_context_used_after_its_attempt_ended_runs_no_blocking_work_and_no_step() {
    let h = Harness::new().await;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let worker = worker(&h, Late(tx));
    let id = enqueue(&h.store, LeavesWorkBehind {}).await;
    h.reaches(id, JobState::Completed).await;
    for what in ["blocking", "step"] {
        let (said, refused, ran) = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the late task reports")
            .expect("a report");
        assert_eq!((said, refused, ran), (what, true, false));
    }
    worker.shutdown().await;
}
