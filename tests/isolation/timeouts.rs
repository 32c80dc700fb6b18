//! Work that outlives its timeout: a handler that spins without awaiting, and one that awaits
//! blocking work started through `JobContext::blocking`. The attempt times out, but the
//! execution ends only when its code ends: the lease stays held until then, and the retry is
//! written (and runs) only after.

use std::time::{Duration, Instant};

use job::{Job, JobContext, JobError, JobOptions, JobState};
use serde::{Deserialize, Serialize};

use crate::common::{enqueue, Harness, FAST_BACKOFF};
use crate::support::Timeline;

/// Overruns its 300 ms timeout on attempt 1, as `how` says; attempt 2 completes at once.
#[derive(Debug, Serialize, Deserialize)]
pub struct Overrun {
    pub how: How,
}

/// How an [`Overrun`] outlives its timeout.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum How {
    /// A busy loop without `.await` for 1.5 s.
    Spin,
    /// `ctx.blocking(..)` of a 1.5 s sleep.
    Blocking,
}

impl Job for Overrun {
    const KIND: &'static str = "isolation.overrun";
    const OPTIONS: JobOptions = JobOptions {
        timeout: Duration::from_millis(300),
        max_attempts: 2,
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let timeline = ctx.state::<Timeline>()?.clone();
        let run = timeline.start(&ctx, "any");
        if ctx.attempt() > 1 {
            timeline.end(run);
            return Ok(());
        }
        match self.how {
            How::Spin => {
                let until = Instant::now() + Duration::from_millis(1500);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                timeline.end(run);
            }
            How::Blocking => {
                ctx.blocking(move || {
                    std::thread::sleep(Duration::from_millis(1500));
                    timeline.end(run);
                })
                .await;
            }
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn work_past_its_timeout_holds_the_job_until_it_ends_and_the_retry_comes_after() {
    let h = Harness::new().await;
    let timeline = Timeline::default();
    let mut ids = Vec::new();
    for how in [How::Spin, How::Blocking, How::Spin, How::Blocking] {
        ids.push(enqueue(&h.store, Overrun { how }).await);
    }
    let worker = |name: &str| {
        job::Worker::builder(h.store.clone())
            .register::<Overrun>()
            .queue("default", 2)
            .id(name)
            .poll_interval(Duration::from_millis(20))
            .state(timeline.clone())
            .build()
            .unwrap()
            .start()
    };
    let (a, b) = (worker("a"), worker("b"));
    let mut rows = Vec::new();
    for id in &ids {
        rows.push(h.reaches(*id, JobState::Completed).await);
    }
    let stats = [a.shutdown().await.stats, b.shutdown().await.stats];
    timeline.assert_never_overlapping();
    for row in &rows {
        assert_eq!(row.attempt, 2, "job {}", row.id);
        assert_eq!(row.errors.len(), 1, "job {}: {:?}", row.id, row.errors);
        assert_eq!(row.errors[0].class, "timeout");
        let runs = timeline.runs_of(row.id);
        assert_eq!(runs.len(), 2, "job {}: {runs:?}", row.id);
        assert!(
            runs[0].ended.unwrap() <= runs[1].started,
            "job {}: the retry started before the timed-out work ended",
            row.id
        );
    }
    assert_eq!(stats.iter().map(|s| s.timeouts).sum::<u64>(), 4);
    assert_eq!(stats.iter().map(|s| s.lease_lost).sum::<u64>(), 0);
}
