//! Shutdown keeps its bound while the database hangs: every wait on the store has a deadline,
//! and what could not be written is left to lease expiry, which loses no job.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use job::{
    BoxFuture, Call, Job, JobContext, JobError, JobId, JobOptions, JobState, Layered, Prefetch,
    Returned, StoreError, StoreLayer, WorkerConfig, WorkerHandle, RELEASE_TIMEOUT,
};
use serde::{Deserialize, Serialize};

use crate::common::*;

/// The lease of every job here: short, so that what a hung shutdown leaves comes back soon,
/// and long enough that no lease runs out while a test sets up the state it shuts down in.
const LEASE: Duration = Duration::from_secs(4);
const DRAIN: Duration = Duration::from_millis(200);
const GRACE: Duration = Duration::from_millis(200);
/// What `shutdown()` promises: drain, grace and `RELEASE_TIMEOUT`, and 2 s to close.
const BOUND: Duration = Duration::from_millis(200 + 200 + 2000).saturating_add(RELEASE_TIMEOUT);
/// Past this, shutdown is taken to hang: a generous multiple of the promise, not a timing.
const HANGS: Duration = BOUND.saturating_add(Duration::from_secs(10));

/// A database that stops answering: once switched on, every call waits forever. A claim
/// commits first (its answer is lost on the way back); any other call is stuck before it
/// runs. Counts the calls it holds, by name.
#[derive(Clone, Default)]
struct HungDatabase {
    all: Arc<AtomicBool>,
    releases: Arc<AtomicBool>,
    held: Arc<Mutex<HashMap<&'static str, usize>>>,
}

impl HungDatabase {
    /// From now on, nothing answers.
    fn hang(&self) {
        self.all.store(true, Ordering::SeqCst);
    }

    /// From now on, releases never answer.
    fn hang_releases(&self) {
        self.releases.store(true, Ordering::SeqCst);
    }

    /// How many `name` calls it holds.
    fn holds(&self, name: &str) -> usize {
        self.held.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

impl StoreLayer for HungDatabase {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let hangs = self.all.load(Ordering::SeqCst)
            || (call.name == "release" && self.releases.load(Ordering::SeqCst));
        Box::pin(async move {
            if !hangs {
                return run.await;
            }
            if call.name == "claim" {
                let _ = run.await;
            }
            *self.held.lock().unwrap().entry(call.name).or_default() += 1;
            std::future::pending().await
        })
    }
}

/// Opened by a test to let [`Finisher`] jobs complete.
#[derive(Clone)]
struct FinishLine(Arc<tokio::sync::Semaphore>);

impl Default for FinishLine {
    fn default() -> Self {
        FinishLine(Arc::new(tokio::sync::Semaphore::new(0)))
    }
}

impl FinishLine {
    fn open(&self) {
        self.0.add_permits(1_000_000);
    }
}

/// Completes when its [`FinishLine`] opens (a [`Parked`] job waits on its own [`Gate`]).
#[derive(Debug, Serialize, Deserialize)]
struct Finisher {}

impl Job for Finisher {
    const KIND: &'static str = "test.finisher";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>()?.record(&ctx);
        let line = ctx.state::<FinishLine>()?.0.clone();
        tokio::select! {
            _ = line.acquire() => Ok(()),
            _ = ctx.cancelled() => Err(JobError::retryable("stopped")),
        }
    }
}

/// A worker over `db` with `concurrency` slots and a fixed prefetch, short leases, and a
/// drain and grace of a moment; its [`Finisher`] jobs complete when `line` opens.
fn worker(
    h: &Harness,
    db: &HungDatabase,
    line: &FinishLine,
    concurrency: usize,
    prefetch: usize,
    prefetch_ttl: Duration,
) -> WorkerHandle {
    let mut config = WorkerConfig::default();
    config.prefetch = Prefetch::Fixed(prefetch);
    config.prefetch_ttl = prefetch_ttl;
    config.poll_interval = Duration::from_millis(20);
    config.drain_timeout = DRAIN;
    config.shutdown_grace = GRACE;
    config.lease = Some(LEASE);
    // Renewed often, so that no lease comes near its end while a test sets up.
    config.heartbeat_interval = Some(Duration::from_millis(200));
    job::Worker::builder(Layered::new(h.store.clone(), db.clone()))
        .register::<Parked>()
        .register::<Finisher>()
        .queue("default", concurrency)
        .config(config)
        .state(h.ledger.clone())
        .state(Gate::default())
        .state(line.clone())
        .build()
        .unwrap()
        .start()
}

/// Shuts `worker` down, failing the test if that does not return long after its bound.
async fn shuts_down_in_time(worker: WorkerHandle) -> job::DrainReport {
    tokio::time::timeout(HANGS, worker.shutdown())
        .await
        .unwrap_or_else(|_| panic!("shutdown still waiting {HANGS:?} after it was called"))
}

/// A worker on the real store, with the same leases, on which every job completes at once.
fn recovering_worker(h: &Harness) -> WorkerHandle {
    let gate = Gate::default();
    gate.open();
    let line = FinishLine::default();
    line.open();
    let mut config = WorkerConfig::default();
    config.poll_interval = Duration::from_millis(20);
    config.lease = Some(LEASE);
    job::Worker::builder(h.store.clone())
        .register::<Parked>()
        .register::<Finisher>()
        .queue("default", 10)
        .config(config)
        .state(h.ledger.clone())
        .state(gate)
        .state(line)
        .build()
        .unwrap()
        .start()
}

/// Every job of `ids` completes on a worker over the real store: none was lost.
async fn all_complete(h: &Harness, ids: &[JobId]) {
    let second = recovering_worker(h);
    for id in ids {
        h.reaches(*id, JobState::Completed).await;
    }
    second.shutdown().await;
}

#[tokio::test]
async fn shutdown_returns_in_time_while_the_database_hangs_and_loses_no_job() {
    let h = Harness::new().await;
    let db = HungDatabase::default();
    let line = FinishLine::default();
    let worker = worker(&h, &db, &line, 2, 2, Duration::from_secs(600));
    // Two slots: one job parked, one that finishes when told.
    let parked = enqueue(&h.store, Parked { n: 0 }).await;
    let finisher = enqueue(&h.store, Finisher {}).await;
    eventually("both jobs to start", || async {
        (h.ledger.runs(parked) == 1 && h.ledger.runs(finisher) == 1).then_some(())
    })
    .await;
    // Two more are prefetched (claimed, waiting for a slot); two stay in the table, the
    // queue having no room left.
    let mut prefetched = Vec::new();
    for n in 1..=2 {
        prefetched.push(enqueue(&h.store, Parked { n }).await);
    }
    for id in &prefetched {
        h.reaches(*id, JobState::Running).await;
    }
    eventually("the worker to hold four leases", || async {
        (worker.in_flight() == 4).then_some(())
    })
    .await;
    let mut left = Vec::new();
    for n in 3..=4 {
        left.push(enqueue(&h.store, Parked { n }).await);
    }

    db.hang();
    // The finisher's outcome goes to a write that never answers; its slot goes to a
    // prefetched job, and the room it leaves to a claim that takes a job and never answers.
    line.open();
    let claimed = eventually(
        "a finalize and a claim to hang, and a prefetched job to start",
        || async {
            let started = prefetched
                .iter()
                .filter(|id| h.ledger.runs(**id) == 1)
                .count();
            let mut claimed = None;
            for id in &left {
                if h.row(*id).await.state == JobState::Running {
                    claimed = Some(*id);
                }
            }
            (db.holds("finalize") >= 1 && db.holds("claim") >= 1 && started == 1)
                .then_some(claimed)
                .flatten()
        },
    )
    .await;
    let waiting = prefetched
        .iter()
        .copied()
        .find(|id| h.ledger.runs(*id) == 0)
        .unwrap();

    let report = shuts_down_in_time(worker).await;
    assert_eq!(report.released, 0, "no release was answered");
    assert_eq!(
        h.ledger.runs(claimed),
        0,
        "a job whose claim never answered never started"
    );
    assert_eq!(h.ledger.runs(waiting), 0, "a prefetched job never started");

    // Nothing was written for them: their leases expire, the rescuer takes them, and every
    // job completes.
    let mut ids = vec![parked, finisher];
    ids.extend(&prefetched);
    ids.extend(&left);
    all_complete(&h, &ids).await;
    assert_eq!(
        h.row(finisher).await.attempt,
        2,
        "the finisher's outcome was never written: it ran again"
    );
}

#[tokio::test]
async fn shutdown_returns_in_time_while_a_give_back_hangs() {
    // One slot, parked; the prefetched job waits out its ttl and is given back, and that
    // release never answers: the dispatcher is waiting on it when shutdown comes.
    let h = Harness::new().await;
    let db = HungDatabase::default();
    db.hang_releases();
    let worker = worker(
        &h,
        &db,
        &FinishLine::default(),
        1,
        1,
        Duration::from_millis(200),
    );
    let mut ids = Vec::new();
    for n in 0..2 {
        ids.push(enqueue(&h.store, Parked { n }).await);
    }
    eventually("the prefetched job's give-back to hang", || async {
        (db.holds("release") >= 1).then_some(())
    })
    .await;
    let waiting = ids
        .iter()
        .copied()
        .find(|id| h.ledger.runs(*id) == 0)
        .unwrap();

    let report = shuts_down_in_time(worker).await;
    assert!(!report.finished_in_time, "the parked job never finishes");
    assert_eq!(report.released, 0, "no release was answered");
    assert_eq!(
        h.ledger.runs(waiting),
        0,
        "a job being given back never starts"
    );
    all_complete(&h, &ids).await;
}
