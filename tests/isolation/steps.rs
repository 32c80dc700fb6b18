//! A durable step whose output cannot be stored ends the job with class `step_unstorable`,
//! naming the step: its effect happened once and must not run again on its own.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{Job, JobContext, JobError, JobOptions, JobState};
use serde::{Deserialize, Serialize};

use crate::common::{enqueue, Harness, FAST_BACKOFF};

/// A worker for these tests: the default queue with `slots` slots, polled every 20 ms.
fn worker_over<S: job::Store>(store: S, slots: usize) -> job::WorkerBuilder<S> {
    job::Worker::builder(store)
        .queue("default", slots)
        .poll_interval(Duration::from_millis(20))
}

/// Waits until an [`UnstorableThenWaits`] handler's step has answered.
async fn step_answered(answered: &Answered) {
    crate::common::eventually("the step to answer", || async {
        (answered.0.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
}

/// What the step returns.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Bad {
    /// A string with a NUL character.
    Nul,
    /// NaN, which JSON writes as `null`.
    Nan,
    /// 2 MiB of JSON.
    Huge,
    /// A value whose `Serialize` panics.
    Panics,
}

/// A step output whose `Serialize` panics (a hand-written impl's bug, a `serialize_with` that
/// unwraps).
#[derive(Debug, Deserialize)]
pub struct PanicsOnSerialize(#[allow(dead_code)] u32);

impl Serialize for PanicsOnSerialize {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        panic!("cannot serialize this receipt")
    }
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
            Bad::Panics => ctx
                .step("send", || async {
                    sent.0.fetch_add(1, Ordering::SeqCst);
                    Ok(PanicsOnSerialize(7))
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
    for bad in [Bad::Nul, Bad::Nan, Bad::Huge, Bad::Panics] {
        let h = Harness::new().await;
        let sent = Sent::default();
        let id = enqueue(&h.store, SendsBadOutput { bad }).await;
        let worker = worker_over(h.store.clone(), 1)
            .register::<SendsBadOutput>()
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

/// Runs a step whose output cannot be stored, carries on (its error logged) until told to stop,
/// then ends with a retryable error, as a cooperative handler does on a shutdown.
#[derive(Debug, Serialize, Deserialize)]
pub struct UnstorableThenWaits {}

/// Set once [`UnstorableThenWaits`]'s step has answered.
#[derive(Clone, Default)]
pub struct Answered(Arc<AtomicU32>);

impl Job for UnstorableThenWaits {
    const KIND: &'static str = "isolation.unstorable_then_waits";
    const OPTIONS: JobOptions = JobOptions {
        max_attempts: 3,
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let sent = ctx.state::<Sent>()?;
        let step = ctx
            .step("send", || async {
                sent.0.fetch_add(1, Ordering::SeqCst);
                Ok("z".repeat(2 * 1024 * 1024))
            })
            .await;
        assert!(matches!(step, Err(JobError::Terminal(_))), "{step:?}");
        ctx.state::<Answered>()?.0.fetch_add(1, Ordering::SeqCst);
        ctx.cancelled().await;
        Err(JobError::retryable("stopped before the end"))
    }
}

#[tokio::test]
async fn a_shutdown_after_a_step_that_could_not_be_stored_ends_the_job_rather_than_giving_it_back()
{
    let h = Harness::new().await;
    let sent = Sent::default();
    let answered = Answered::default();
    let id = enqueue(&h.store, UnstorableThenWaits {}).await;
    let worker = worker_over(h.store.clone(), 1)
        .register::<UnstorableThenWaits>()
        .configure(|c| c.drain_timeout = Duration::from_millis(200))
        .state(sent.clone())
        .state(answered.clone())
        .build()
        .unwrap()
        .start();
    step_answered(&answered).await;
    worker.shutdown().await;
    // Given back, the job would be available again, and its next attempt would run the
    // step's effect again.
    let row = h.row(id).await;
    assert_eq!(row.state, JobState::Discarded, "{:?}", row.errors);
    assert_eq!(row.errors.len(), 1, "{:?}", row.errors);
    assert_eq!(row.errors[0].class, "step_unstorable");
    assert_eq!(sent.0.load(Ordering::SeqCst), 1);
}

/// Charges two items in parallel, each in a step run in a task of its own (`tokio::spawn`, then
/// `try_join_all`). On attempt 1 item `b` fails as soon as item `a`'s charge (300 ms) has
/// started, so the handler returns while that charge still runs in its task.
#[derive(Debug, Serialize, Deserialize)]
pub struct ParallelCharges {}

/// The attempt of every charge of item `a`.
#[derive(Clone, Default)]
pub struct Charges(Arc<std::sync::Mutex<Vec<i32>>>);

impl Job for ParallelCharges {
    const KIND: &'static str = "isolation.parallel_charges";
    const OPTIONS: JobOptions = JobOptions {
        max_attempts: 3,
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let charges = ctx.state::<Charges>()?.clone();
        let attempt = ctx.attempt();
        let tasks = ["a", "b"].map(|item| {
            let (ctx, charges) = (ctx.clone(), charges.clone());
            tokio::spawn(async move {
                ctx.step(&format!("charge-{item}"), || async move {
                    if item == "b" && attempt == 1 {
                        // Fails once item a's charge is under way.
                        while charges.0.lock().unwrap().is_empty() {
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        return Err(JobError::retryable("item b: card network busy"));
                    }
                    if item == "a" {
                        charges.0.lock().unwrap().push(attempt);
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                    Ok(format!("charged {item}"))
                })
                .await
            })
        });
        let joined = tasks.map(|task| async move {
            task.await
                .unwrap_or_else(|e| Err(JobError::retryable(e.to_string())))
        });
        futures_util::future::try_join_all(joined).await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_step_in_a_task_of_its_own_ends_before_the_next_attempt_starts() {
    let h = Harness::new().await;
    let charges = Charges::default();
    let id = enqueue(&h.store, ParallelCharges {}).await;
    let worker = worker_over(h.store.clone(), 2)
        .register::<ParallelCharges>()
        .state(charges.clone())
        .build()
        .unwrap()
        .start();
    let row = h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
    // Attempt 1 returned while its step `charge-a` ran; the attempt ended only with that step,
    // recorded, so attempt 2 got its output back instead of charging again beside it.
    assert_eq!(row.attempt, 2, "{:?}", row.errors);
    assert_eq!(*charges.0.lock().unwrap(), [1], "item a was charged once");
}

/// Polls a step once (its first store call under way) and then, before polling it again,
/// waits for the test's [`Gate`]: the shape of a `select!` over `&mut step` whose other branch
/// is awaited first.
#[derive(Debug, Serialize, Deserialize)]
pub struct ParksAStep {}

/// Counts [`ParksAStep`] handlers that have polled their step once.
#[derive(Clone, Default)]
pub struct Parking(Arc<AtomicU32>);

impl Job for ParksAStep {
    const KIND: &'static str = "isolation.parks_a_step";

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let mut step = std::pin::pin!(ctx.step("parked", || async { Ok(1) }));
        std::future::poll_fn(|cx| {
            let _ = std::future::Future::poll(step.as_mut(), cx);
            std::task::Poll::Ready(())
        })
        .await;
        ctx.state::<Parking>()?.0.fetch_add(1, Ordering::SeqCst);
        ctx.state::<crate::common::Gate>()?.passed().await;
        step.await?;
        Ok(())
    }
}

/// A job of another kind with a step.
#[derive(Debug, Serialize, Deserialize)]
pub struct QuickStep {}

impl Job for QuickStep {
    const KIND: &'static str = "isolation.quick_step";

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.step("quick", || async { Ok(1) }).await?;
        Ok(())
    }
}

#[tokio::test]
async fn a_step_its_handler_stopped_polling_holds_up_no_other_jobs_steps() {
    let h = Harness::new().await;
    let (parking, gate) = (Parking::default(), crate::common::Gate::default());
    let parked = enqueue(&h.store, ParksAStep {}).await;
    let worker = worker_over(h.store.clone(), 4)
        .register::<ParksAStep>()
        .register::<QuickStep>()
        .state(parking.clone())
        .state(gate.clone())
        .build()
        .unwrap()
        .start();
    crate::common::eventually("the parked step to be polled once", || async {
        (parking.0.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    // While that step waits to be polled again, the steps of other jobs run.
    let mut quick = Vec::new();
    for _ in 0..3 {
        quick.push(enqueue(&h.store, QuickStep {}).await);
    }
    for id in quick {
        h.reaches(id, JobState::Completed).await;
    }
    gate.open();
    h.reaches(parked, JobState::Completed).await;
    worker.shutdown().await;
}

/// [`UnstorableThenWaits`] with a lease of 3 s, for a fence.
#[derive(Debug, Serialize, Deserialize)]
pub struct UnstorableThenFenced {}

impl Job for UnstorableThenFenced {
    const KIND: &'static str = "isolation.unstorable_then_fenced";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_secs(3),
        max_attempts: 3,
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        UnstorableThenWaits {}.perform(ctx).await
    }
}

#[tokio::test]
async fn a_fence_after_a_step_that_could_not_be_stored_ends_the_job_rather_than_giving_it_back() {
    use job_testkit::{Outage, OutageStore};
    let h = Harness::new().await;
    let (sent, answered) = (Sent::default(), Answered::default());
    let store = OutageStore::new(h.store.clone(), Outage::default());
    let id = enqueue(&h.store, UnstorableThenFenced {}).await;
    let worker = worker_over(store.clone(), 1)
        .register::<UnstorableThenFenced>()
        .configure(|c| c.heartbeat_interval = Some(Duration::from_millis(100)))
        .state(sent.clone())
        .state(answered.clone())
        .build()
        .unwrap()
        .start();
    step_answered(&answered).await;
    // Heartbeats renewed the 3 s lease every 100 ms until now; a stall of 2.4 s makes the
    // worker fence the execution (two thirds of the lease unrenewed) before it ends, and ends
    // before the lease does in the database: the fenced execution's write then goes through.
    store.layer().stall_for(Duration::from_millis(2400));
    let row = h.reaches(id, JobState::Discarded).await;
    let report = worker.shutdown().await;
    assert_eq!(row.errors.len(), 1, "{:?}", row.errors);
    assert_eq!(row.errors[0].class, "step_unstorable");
    assert_eq!(sent.0.load(Ordering::SeqCst), 1, "the effect ran once");
    // Written past the completer, and counted as the completer counts what it writes
    // (`WorkerStats::discarded`, `job_finished_total`, the kind's breaker).
    assert_eq!(
        report.stats.discarded, 1,
        "this worker wrote the dead letter: {:?}",
        report.stats
    );
}
