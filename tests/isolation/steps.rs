//! A durable step whose output cannot be stored ends the job with class `step_unstorable`,
//! naming the step: its effect happened once and must not run again on its own.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{Job, JobContext, JobError, JobOptions, JobState};
use serde::{Deserialize, Serialize};

use crate::common::{enqueue, Harness, FAST_BACKOFF};

/// What the step returns.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Bad {
    /// A string with a NUL character.
    Nul,
    /// NaN, which JSON writes as `null`.
    Nan,
    /// 2 MiB of JSON.
    Huge,
}

/// Sends (counts an effect) through a step whose output cannot be stored, then ignores the
/// step's error and returns `Ok`.
#[derive(Debug, Serialize, Deserialize)]
pub struct SendsBadOutput {
    pub bad: Bad,
}

#[derive(Clone, Default)]
pub struct Sent(Arc<AtomicU32>);

impl Job for SendsBadOutput {
    const KIND: &'static str = "isolation.sends_bad_output";
    const OPTIONS: JobOptions = JobOptions {
        max_attempts: 3,
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let sent = ctx.state::<Sent>()?;
        let step = match self.bad {
            Bad::Nul => ctx
                .step("send", || async {
                    sent.0.fetch_add(1, Ordering::SeqCst);
                    Ok(serde_json::json!({ "receipt": "a\0b" }))
                })
                .await
                .map(drop),
            Bad::Nan => ctx
                .step("send", || async {
                    sent.0.fetch_add(1, Ordering::SeqCst);
                    Ok(f64::NAN)
                })
                .await
                .map(drop),
            Bad::Huge => ctx
                .step("send", || async {
                    sent.0.fetch_add(1, Ordering::SeqCst);
                    Ok("z".repeat(2 * 1024 * 1024))
                })
                .await
                .map(drop),
        };
        assert!(matches!(step, Err(JobError::Terminal(_))), "{step:?}");
        Ok(())
    }
}

#[tokio::test]
async fn a_step_output_that_cannot_be_stored_ends_the_job_and_its_effect_runs_once() {
    for bad in [Bad::Nul, Bad::Nan, Bad::Huge] {
        let h = Harness::new().await;
        let sent = Sent::default();
        let id = enqueue(&h.store, SendsBadOutput { bad }).await;
        let worker = job::Worker::builder(h.store.clone())
            .register::<SendsBadOutput>()
            .queue("default", 1)
            .poll_interval(Duration::from_millis(20))
            .state(sent.clone())
            .build()
            .unwrap()
            .start();
        let row = h.reaches(id, JobState::Discarded).await;
        worker.shutdown().await;
        assert_eq!(row.attempt, 1, "{bad:?}: not retried");
        assert_eq!(row.errors.len(), 1, "{bad:?}: {:?}", row.errors);
        assert_eq!(row.errors[0].class, "step_unstorable", "{bad:?}");
        assert!(
            row.errors[0]
                .message
                .starts_with("the output of step `send` cannot be stored"),
            "{bad:?}: {}",
            row.errors[0].message
        );
        assert_eq!(
            sent.0.load(Ordering::SeqCst),
            1,
            "{bad:?}: the effect ran once"
        );
    }
}
