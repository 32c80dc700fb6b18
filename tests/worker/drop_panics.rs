//! A handler's error whose `Drop` panics, returned after its timeout or after a shutdown told
//! it to stop: dropped outside the executor's guards, the panic once ended the execution, and
//! the job waited out its whole lease (30 s) to be rescued as `lease_expired`, neither a
//! timeout nor given back. Each test reads the row as soon as the worker has let the execution
//! go, so a row left for the rescuer fails at once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{Job, JobContext, JobError, JobOptions, JobState};
use serde::{Deserialize, Serialize};

use crate::common::{enqueue, eventually, Harness, SLOW_BACKOFF};

/// An error whose `Drop` panics.
#[derive(Debug)]
pub(crate) struct PanicOnDrop;

impl std::fmt::Display for PanicOnDrop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an error whose drop panics")
    }
}

impl std::error::Error for PanicOnDrop {}

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("dropping the handler's error panicked");
    }
}

/// Spins 800 ms past its 300 ms timeout without awaiting, then returns a [`PanicOnDrop`].
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct OverrunsThenPanicsOnDrop {}

impl Job for OverrunsThenPanicsOnDrop {
    const KIND: &'static str = "test.overruns_then_panics_on_drop";
    const OPTIONS: JobOptions = JobOptions {
        timeout: Duration::from_millis(300),
        // The retry waits seconds: the row stays `retryable` while the test reads it.
        backoff: SLOW_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        std::thread::sleep(Duration::from_millis(1100));
        Err(JobError::Retryable(Box::new(PanicOnDrop)))
    }
}

/// Set by [`StopsThenPanicsOnDrop`] once it runs.
#[derive(Clone, Default)]
pub(crate) struct Started(Arc<AtomicBool>);

/// Polls `is_cancelled()` without awaiting until a shutdown stops it, then returns a
/// [`PanicOnDrop`].
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct StopsThenPanicsOnDrop {}

impl Job for StopsThenPanicsOnDrop {
    const KIND: &'static str = "test.stops_then_panics_on_drop";
    const OPTIONS: JobOptions = JobOptions {
        timeout: Duration::from_secs(60),
        backoff: SLOW_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Started>()?.0.store(true, Ordering::SeqCst);
        while !ctx.is_cancelled() {
            std::thread::sleep(Duration::from_millis(5));
        }
        Err(JobError::Retryable(Box::new(PanicOnDrop)))
    }
}

fn worker(h: &Harness, started: Started) -> job::WorkerHandle {
    h.worker()
        .register::<OverrunsThenPanicsOnDrop>()
        .register::<StopsThenPanicsOnDrop>()
        .state(started)
        .drain_timeout(Duration::from_millis(200))
        .build()
        .unwrap()
        .start()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_attempt_whose_error_panics_on_drop_is_written_as_a_timeout() {
    let h = Harness::new().await;
    let worker = worker(&h, Started::default());
    let id = enqueue(&h.store, OverrunsThenPanicsOnDrop {}).await;
    // The execution is over once its outcome is written, or once the worker gave up on it.
    eventually("the worker to claim the job and let it go", || async {
        (worker.stats().claimed == 1 && worker.in_flight() == 0).then_some(())
    })
    .await;
    let row = h.row(id).await;
    let stats = worker.stats();
    assert_eq!(row.state, JobState::Retryable, "{row:?}");
    let classes: Vec<_> = row.errors.iter().map(|e| e.class.as_str()).collect();
    assert_eq!(classes, ["timeout"], "{:?}", row.errors);
    assert_eq!((stats.timeouts, stats.panics), (1, 0), "{stats:?}");
    assert_eq!(stats.retried, 1, "{stats:?}");
    worker.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_attempt_whose_error_panics_on_drop_is_given_back_at_shutdown() {
    let h = Harness::new().await;
    let started = Started::default();
    let worker = worker(&h, started.clone());
    let id = enqueue(&h.store, StopsThenPanicsOnDrop {}).await;
    eventually("the handler to start", || async {
        started.0.load(Ordering::SeqCst).then_some(())
    })
    .await;
    let report = worker.shutdown().await;
    let row = h.row(id).await;
    assert_eq!(
        (report.released, report.abandoned),
        (1, 0),
        "the drain gives the stopped execution's lease back: {report:?}"
    );
    assert_eq!(row.state, JobState::Available, "{row:?}");
    assert_eq!(
        row.attempt, 0,
        "the attempt is given back uncounted: {row:?}"
    );
    assert_eq!(row.lock_token, None);
    let last = row.errors.last().expect("a history entry");
    assert_eq!(last.class, "released", "{:?}", row.errors);
}
