//! Code that will not end: reported stuck while it keeps its slot and lease, and abandoned by a
//! shutdown that must return.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use job::{Admin, Job, JobContext, JobError, JobFilter, JobOptions, JobState};
use serde::{Deserialize, Serialize};

use crate::common::{enqueue, eventually, Harness, FAST_BACKOFF};

/// A latch a test opens; blocking code waits on it, and says when it started waiting.
#[derive(Clone, Default)]
pub struct Latch(Arc<(Mutex<bool>, Condvar)>, Arc<AtomicBool>);

impl Latch {
    pub fn open(&self) {
        *self.0 .0.lock().unwrap() = true;
        self.0 .1.notify_all();
    }

    fn wait(&self) {
        self.1.store(true, Ordering::SeqCst);
        let mut open = self.0 .0.lock().unwrap();
        while !*open {
            open = self.0 .1.wait(open).unwrap();
        }
    }

    /// Whether the handler's code is waiting on it: a row `running` is only claimed (the job
    /// may still wait for its slot).
    fn entered(&self) -> bool {
        self.1.load(Ordering::SeqCst)
    }
}

/// Blocks in `ctx.blocking` until its latch opens, far past its 200 ms timeout.
#[derive(Debug, Serialize, Deserialize)]
pub struct WaitsForLatch {}

impl Job for WaitsForLatch {
    const KIND: &'static str = "isolation.waits_for_latch";
    const OPTIONS: JobOptions = JobOptions {
        timeout: Duration::from_millis(200),
        // Well over the 500 ms it takes to be reported stuck (its timeout, then `stuck_after`),
        // and long enough that a loaded run's late heartbeat fences nothing (see `blocking.rs`).
        lease: Duration::from_millis(1800),
        max_attempts: 1,
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let latch = ctx.state::<Latch>()?.clone();
        ctx.blocking(move || latch.wait()).await;
        Ok(())
    }
}

fn worker(h: &Harness, latch: &Latch) -> job::WorkerBuilder<job::PgStore> {
    let mut config = job::WorkerConfig::default();
    config.stuck_after = Duration::from_millis(300);
    config.poll_interval = Duration::from_millis(20);
    config.rescuer.interval = Duration::from_millis(100);
    job::Worker::builder(h.store.clone())
        .register::<WaitsForLatch>()
        .queue("default", 1)
        .config(config)
        .state(latch.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_that_outlives_its_timeout_is_reported_stuck_and_keeps_its_lease() {
    let h = Harness::new().await;
    let latch = Latch::default();
    let id = enqueue(&h.store, WaitsForLatch {}).await;
    let worker = worker(&h, &latch).build().unwrap().start();
    let running = h.reaches(id, JobState::Running).await;
    eventually("the execution to be reported stuck", || async {
        (worker.stats().stuck == 1).then_some(())
    })
    .await;
    let row = eventually("the row to say since when it is stuck", || async {
        let row = h.row(id).await;
        row.stuck_since.is_some().then_some(row)
    })
    .await;
    assert_eq!(row.state, JobState::Running);
    assert_eq!(
        row.lock_token, running.lock_token,
        "the same lease, renewed"
    );
    assert!(row.locked_until > running.locked_until, "renewed");
    assert_eq!(h.store.stats(&JobFilter::default()).await.unwrap().stuck, 1);
    assert_eq!((worker.stats().stuck_now, worker.in_flight()), (1, 1));

    latch.open();
    let row = h.reaches(id, JobState::Discarded).await;
    assert_eq!(row.errors[0].class, "timeout");
    assert_eq!(row.stuck_since, None);
    let stats = worker.shutdown().await.stats;
    assert_eq!((stats.stuck, stats.stuck_now, stats.lease_lost), (1, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_in_its_bound_and_abandons_code_that_will_not_end() {
    let h = Harness::new().await;
    let latch = Latch::default();
    let id = enqueue(&h.store, WaitsForLatch {}).await;
    let worker = worker(&h, &latch)
        .drain_timeout(Duration::from_millis(100))
        .config({
            let mut config = job::WorkerConfig::default();
            config.stuck_after = Duration::from_millis(300);
            config.shutdown_grace = Duration::from_millis(300);
            config.drain_timeout = Duration::from_millis(100);
            config
        })
        .build()
        .unwrap()
        .start();
    let running = h.reaches(id, JobState::Running).await;
    // Its code runs (not only its claim: a job waiting for its slot is given back, not
    // abandoned).
    eventually("the handler to start", || async {
        latch.entered().then_some(())
    })
    .await;
    let report = tokio::time::timeout(Duration::from_secs(10), worker.shutdown())
        .await
        .expect("shutdown returns although the handler never does");
    assert!(!report.finished_in_time);
    assert_eq!((report.abandoned, report.released), (1, 0));
    let row = h.row(id).await;
    assert_eq!(
        (row.state, row.lock_token),
        (JobState::Running, running.lock_token),
        "an abandoned lease is not released while its code may run: it expires"
    );
    latch.open();
}

/// Records that a heartbeat answered with a lease lost.
#[derive(Clone, Default)]
struct SeesLoss(Arc<std::sync::atomic::AtomicBool>);

impl job::StoreLayer for SeesLoss {
    fn call<'a, T: job::Returned + Send + 'a>(
        &'a self,
        call: job::Call,
        run: job::BoxFuture<'a, Result<T, job::StoreError>>,
    ) -> job::BoxFuture<'a, Result<T, job::StoreError>> {
        Box::pin(async move {
            let answer = run.await;
            if call.name == "heartbeat" && answer.as_ref().is_ok_and(|r| r.rows() > 0) {
                self.0.store(true, std::sync::atomic::Ordering::SeqCst);
            }
            answer
        })
    }
}

/// Opens its latch when dropped, so that a failed assertion does not leave the blocking code
/// holding the test's runtime for ever.
struct OpenOnDrop(Latch);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// Code still running at the end of a shutdown whose lease was lost meanwhile (another worker
/// may run the job now) is counted abandoned too: it is what most needs the process to exit.
/// It was left out of `DrainReport::abandoned`, which counted only leases still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_whose_lease_was_lost_is_counted_abandoned() {
    let h = Harness::new().await;
    let latch = Latch::default();
    let _open = OpenOnDrop(latch.clone());
    let id = enqueue(&h.store, WaitsForLatch {}).await;
    let seen = SeesLoss::default();
    let mut config = job::WorkerConfig::default();
    config.poll_interval = Duration::from_millis(20);
    config.shutdown_grace = Duration::from_millis(300);
    config.drain_timeout = Duration::from_millis(100);
    let worker = job::Worker::builder(job::Layered::new(h.store.clone(), seen.clone()))
        .register::<WaitsForLatch>()
        .queue("default", 1)
        .config(config)
        .state(latch.clone())
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Running).await;
    // Its code runs: a row `running` is only claimed, and a lease taken away before the code
    // starts (the last attempt's recorded start is guarded by it) is never run: the job goes
    // back and is claimed again under a new lease, which no heartbeat finds lost.
    eventually("the handler's code to run", || async {
        latch.entered().then_some(())
    })
    .await;
    // Taken over: the lease's token is another's now.
    sqlx::query("UPDATE job.jobs SET lock_token = gen_random_uuid() WHERE id = $1")
        .bind(id)
        .execute(h.store.pool())
        .await
        .unwrap();
    eventually("a heartbeat to find the lease lost", || async {
        seen.0
            .load(std::sync::atomic::Ordering::SeqCst)
            .then_some(())
    })
    .await;
    let report = tokio::time::timeout(Duration::from_secs(10), worker.shutdown())
        .await
        .expect("shutdown returns although the handler never does");
    assert_eq!((report.abandoned, report.released), (1, 0));
}
