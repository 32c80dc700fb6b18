//! Jobs and helpers shared by the end-to-end tests.
#![allow(dead_code, missing_docs, unreachable_pub)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use job::{
    Admin, Backoff, Job, JobContext, JobError, JobFilter, JobId, JobOptions, JobRow, JobState,
    PgStore, Store,
};
use job_core::WorkerBuilder;
use job_core::{EnqueueOptions, NewJob, DEFAULT_PAYLOAD_LIMIT};
use serde::{Deserialize, Serialize};

/// Every execution each job had, by id: the attempt numbers seen.
#[derive(Clone, Default)]
pub struct Ledger(Arc<Mutex<HashMap<JobId, Vec<i32>>>>);

impl Ledger {
    pub fn record(&self, ctx: &JobContext) {
        self.0
            .lock()
            .unwrap()
            .entry(ctx.id())
            .or_default()
            .push(ctx.attempt());
    }

    pub fn runs(&self, id: JobId) -> usize {
        self.0.lock().unwrap().get(&id).map_or(0, Vec::len)
    }

    pub fn total(&self) -> usize {
        self.0.lock().unwrap().values().map(Vec::len).sum()
    }

    pub fn snapshot(&self) -> HashMap<JobId, Vec<i32>> {
        self.0.lock().unwrap().clone()
    }
}

pub const FAST_BACKOFF: Backoff =
    Backoff::new(Duration::from_millis(10), Duration::from_millis(80));

/// Completes at once.
#[derive(Debug, Serialize, Deserialize)]
pub struct Noop {
    pub n: u32,
}

impl Job for Noop {
    const KIND: &'static str = "test.noop";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>()?.record(&ctx);
        Ok(())
    }
}

/// Fails the way it is told, for the first `failures` attempts, then completes.
#[derive(Debug, Serialize, Deserialize)]
pub struct Flaky {
    pub failures: i32,
    pub how: How,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum How {
    Error,
    Terminal,
    Panic,
    Timeout,
    Cancel,
    Snooze,
}

impl Job for Flaky {
    const KIND: &'static str = "test.flaky";
    const OPTIONS: JobOptions = JobOptions {
        max_attempts: 3,
        timeout: Duration::from_millis(300),
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>()?.record(&ctx);
        if ctx.attempt() > self.failures {
            return Ok(());
        }
        match self.how {
            How::Error => Err(std::io::Error::other(format!(
                "flaky failure {}",
                ctx.attempt()
            )))?,
            How::Terminal => Err(JobError::terminal("the invoice does not exist")),
            How::Panic => panic!("flaky panic {}", ctx.attempt()),
            How::Timeout => {
                std::future::pending::<()>().await;
                Ok(())
            }
            How::Cancel => Err(JobError::cancel("customer closed the account")),
            How::Snooze => Err(JobError::snooze(Duration::from_millis(20))),
        }
    }
}

/// Runs until it is told to stop (a [`Gate`] opens) or its context is cancelled.
#[derive(Debug, Serialize, Deserialize)]
pub struct Parked {
    pub n: u32,
}

/// Opened by a test to let [`Parked`] jobs finish.
#[derive(Clone)]
pub struct Gate(Arc<tokio::sync::Semaphore>);

impl Default for Gate {
    fn default() -> Self {
        Gate(Arc::new(tokio::sync::Semaphore::new(0)))
    }
}

impl Gate {
    pub fn open(&self) {
        self.0.add_permits(1_000_000);
    }

    /// Returns once the gate is open.
    pub async fn passed(&self) {
        let _ = self.0.acquire().await;
    }
}

impl Job for Parked {
    const KIND: &'static str = "test.parked";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_millis(900),
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>()?.record(&ctx);
        let gate = ctx.state::<Gate>()?.0.clone();
        tokio::select! {
            _ = gate.acquire() => Ok(()),
            _ = ctx.cancelled() => Err(JobError::retryable("stopped")),
        }
    }
}

/// Takes a few milliseconds, like real work.
#[derive(Debug, Serialize, Deserialize)]
pub struct Sleepy {
    pub ms: u64,
}

impl Job for Sleepy {
    const KIND: &'static str = "test.sleepy";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>()?.record(&ctx);
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        Ok(())
    }
}

/// Kinds a worker built by [`worker`] runs.
pub fn worker<S: Store>(store: &S, ledger: &Ledger) -> WorkerBuilder<S> {
    job::Worker::builder(store.clone())
        .register::<Noop>()
        .register::<Flaky>()
        .register::<Parked>()
        .register::<Sleepy>()
        .queue("default", 10)
        .poll_interval(Duration::from_millis(50))
        .drain_timeout(Duration::from_secs(5))
        .state(ledger.clone())
        .state(Gate::default())
}

pub async fn enqueue<S: Store, J: Job>(store: &S, job: J) -> JobId {
    enqueue_with(store, job, EnqueueOptions::default()).await
}

pub async fn enqueue_with<S: Store, J: Job>(store: &S, job: J, options: EnqueueOptions) -> JobId {
    let new = NewJob::build(&job, options, DEFAULT_PAYLOAD_LIMIT).expect("valid job");
    store.enqueue(new).await.expect("enqueue")
}

pub async fn row<S: Store>(store: &S, id: JobId) -> JobRow {
    store.get(id).await.expect("get").expect("job exists")
}

/// Polls `check` every 10 ms until it returns `Some`, failing the test with `what` after 30 s.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if tokio::time::Instant::now() > deadline {
            panic!("timed out after 30s waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until job `id` is in `state` and returns its row.
pub async fn reaches<S: Store>(store: &S, id: JobId, state: JobState) -> JobRow {
    eventually(&format!("job {id} to be {state}"), || async {
        let r = row(store, id).await;
        (r.state == state).then_some(r)
    })
    .await
}

/// Counts jobs per state, from the database (`Admin::stats`).
pub async fn count_in<S: Store + Admin>(store: &S, state: JobState) -> i64 {
    let stats = store.stats(&JobFilter::default()).await.expect("stats");
    i64::try_from(stats.in_state(state)).expect("a count")
}

/// Always fails, with a backoff slow enough that a test can read its retry time.
#[derive(Debug, Serialize, Deserialize)]
pub struct SlowRetry {}

pub const SLOW_BACKOFF: Backoff = Backoff::new(Duration::from_secs(5), Duration::from_secs(10));

impl Job for SlowRetry {
    const KIND: &'static str = "test.slow_retry";
    const OPTIONS: JobOptions = JobOptions {
        backoff: SLOW_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>()?.record(&ctx);
        Err(JobError::retryable("still broken"))
    }
}

/// Starts a worker over a fresh database and returns everything a test needs.
pub struct Harness {
    pub db: job_testkit::TestDb,
    pub store: PgStore,
    pub ledger: Ledger,
}

impl Harness {
    pub async fn new() -> Harness {
        let db = job_testkit::TestDb::new().await;
        let store = db.store();
        Harness {
            db,
            store,
            ledger: Ledger::default(),
        }
    }

    pub fn worker(&self) -> WorkerBuilder<PgStore> {
        worker(&self.store, &self.ledger).register::<SlowRetry>()
    }

    pub async fn row(&self, id: JobId) -> JobRow {
        row(&self.store, id).await
    }

    pub async fn reaches(&self, id: JobId, state: JobState) -> JobRow {
        reaches(&self.store, id, state).await
    }
}
