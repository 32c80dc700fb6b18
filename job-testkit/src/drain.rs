//! Runs every due job of a queue to the end, in the test's own task, and reports each outcome:
//! the way to test "what happens after enqueue" without a background worker.

use std::sync::Arc;
use std::time::Duration;

use job_core::{
    perform_attempt, AttemptInfo, ClaimRequest, Extensions, Finalize, Finalized, Job, JobContext,
    JobFilter, JobId, JobState, Outcome, Registry, StoreSteps,
};

use crate::backend::TestStore;
use tokio_util::sync::CancellationToken;

/// One attempt that [`Drain::run`] performed.
#[derive(Debug, Clone, PartialEq)]
pub struct Drained {
    /// The job's id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// The attempt's number.
    pub attempt: i32,
    /// What the attempt led to.
    pub outcome: Outcome,
    /// Whether the outcome was written (it always is unless something else took the lease).
    /// A job its handler completed in its own transaction (`job_postgres::complete_in`) is
    /// `Applied`: that transaction wrote it.
    pub written: Finalized,
    /// The result stored with the job when the attempt completed it: the one the attempt set
    /// (`JobContext::set_result`, or a `#[job]` function's `Ok` value), or, when the handler
    /// completed the job in its own transaction, what that transaction stored (a `#[job]`
    /// function's `Ok` value comes after its commit, so it is not stored there: call
    /// `set_result` before `complete_in` to keep one).
    pub result: Option<serde_json::Value>,
}

/// Drains a queue: claims due jobs of the registered kinds, runs each handler, writes each
/// outcome, and repeats until nothing is due.
///
/// ```no_run
/// # async fn demo(store: job_postgres::PgStore) {
/// # #[derive(serde::Serialize, serde::Deserialize)] struct SendInvoice { invoice_id: i64 }
/// # impl job_core::Job for SendInvoice { const KIND: &'static str = "send_invoice";
/// #   async fn perform(self, _: job_core::JobContext) -> Result<(), job_core::JobError> { Ok(()) } }
/// use job_testkit::Drain;
///
/// let report = Drain::new().register::<SendInvoice>().run(&store, "default").await;
/// assert!(report.iter().all(|d| d.outcome == job_core::Outcome::Complete));
/// # }
/// ```
#[derive(Clone)]
pub struct Drain {
    registry: Registry,
    state: Arc<Extensions>,
    with_scheduled: bool,
    max_attempts_run: usize,
    attempt_timeout: Duration,
    seed: u64,
}

/// How long one attempt of a drain may run unless told otherwise.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

impl Default for Drain {
    fn default() -> Self {
        Drain {
            registry: Registry::new(),
            state: Arc::new(Extensions::new()),
            with_scheduled: false,
            max_attempts_run: 10_000,
            attempt_timeout: ATTEMPT_TIMEOUT,
            seed: 0,
        }
    }
}

impl Drain {
    /// A drain that knows no kinds yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs jobs of type `J`.
    pub fn register<J: Job>(mut self) -> Self {
        self.registry.register::<J>();
        self
    }

    /// Makes `value` available through `ctx.state::<T>()`.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        Arc::make_mut(&mut self.state).insert(value);
        self
    }

    /// Also runs jobs that are not due yet: scheduled ones, retries waiting out their backoff,
    /// and snoozed ones, by making them due before each pass. Off by default.
    pub fn with_scheduled(mut self, yes: bool) -> Self {
        self.with_scheduled = yes;
        self
    }

    /// Stops after this many attempts (no claim takes more than are left), so a job that
    /// snoozes forever ends the drain instead of hanging the test. Defaults to 10,000.
    pub fn max_attempts_run(mut self, n: usize) -> Self {
        self.max_attempts_run = n;
        self
    }

    /// Fails the drain when one attempt's handler has not returned after `timeout` (it waits
    /// on something the test never provides, or loops), naming the job. Defaults to 10 s, as
    /// [`WAIT`](crate::WAIT). A handler that blocks its thread without an `.await` cannot be
    /// stopped by it.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// Seeds the backoff jitter of retry outcomes. Defaults to 0.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Drains `queue` of `store` (a `PgStore` or a `SqliteStore`) and returns every attempt,
    /// in the order they ran.
    ///
    /// # Panics
    /// When no kind is registered, the database fails, or an attempt does not return within
    /// [`attempt_timeout`](Self::attempt_timeout): a test should hear about each.
    pub async fn run<S: TestStore>(&self, store: &S, queue: &str) -> Vec<Drained> {
        self.registry
            .check()
            .expect("register at least one job kind");
        let request = ClaimRequest {
            queue: queue.to_owned(),
            kinds: self
                .registry
                .claim_kinds()
                .into_iter()
                .map(|mut k| {
                    k.lease = Duration::from_secs(600);
                    k
                })
                .collect(),
            limit: 100,
            worker_id: "job-testkit-drain".to_owned(),
        };
        // As a worker does before its first claim: a discard then enqueues the kind's
        // compensating job.
        let kinds: Vec<(String, Option<job_core::Compensate>)> = self
            .registry
            .handlers()
            .map(|h| (h.kind().to_owned(), h.options().compensate))
            .collect();
        store
            .register_kinds(&kinds)
            .await
            .expect("register the kinds' compensating jobs");
        let mut rng = fastrand::Rng::with_seed(self.seed);
        let mut report = Vec::new();
        while report.len() < self.max_attempts_run {
            let mut request = request.clone();
            // Never past the bound: a claim takes up to 100 jobs, and all it takes run.
            request.limit = request
                .limit
                .min(u32::try_from(self.max_attempts_run - report.len()).unwrap_or(u32::MAX));
            if self.with_scheduled {
                store.make_due(queue).await;
            }
            // Due scheduled jobs and retries become claimable, as a worker's stager does.
            store.stage_due(u32::MAX).await.expect("stage due jobs");
            let claimed = store.claim(&request).await.expect("claim");
            if claimed.is_empty() {
                if report.is_empty() {
                    self.warn_if_jobs_wait_elsewhere(store, queue).await;
                } else {
                    self.warn_if_due_jobs_are_left(store, queue).await;
                }
                if let Some(said) = self.unregistered_kinds_due(store, queue).await {
                    eprintln!("{said}");
                }
                break;
            }
            for job in claimed {
                let handler = self
                    .registry
                    .get(&job.kind)
                    .expect("claimed a registered kind");
                let info = AttemptInfo {
                    id: job.lease.id,
                    kind: job.kind.clone(),
                    queue: job.queue.clone(),
                    attempt: job.attempt,
                    max_attempts: job.max_attempts,
                };
                let ctx = JobContext::new(
                    info.clone(),
                    job.lease,
                    self.state.clone(),
                    CancellationToken::new(),
                )
                .with_hooks(Arc::new(StoreSteps::new(store.clone(), job.lease)));
                let view = ctx.clone();
                // The worker's own pipeline, the snooze bound included.
                let attempt = perform_attempt(
                    &**handler,
                    &job.payload,
                    job.payload_version,
                    ctx,
                    job.snoozes,
                    &mut rng,
                );
                let Ok(outcome) = tokio::time::timeout(self.attempt_timeout, attempt).await else {
                    panic!(
                        "job-testkit Drain: job {} (kind `{}`, attempt {}) did not return \
                         within {:?}: its handler hangs, or waits for something the test \
                         does not provide (`.attempt_timeout(..)` sets the bound)",
                        info.id, info.kind, info.attempt, self.attempt_timeout
                    );
                };
                let result = match outcome {
                    Outcome::Complete => view.result(),
                    _ => None,
                };
                let mut written = store
                    .finalize(&[Finalize {
                        result: result.clone(),
                        lease: job.lease,
                        outcome: outcome.clone(),
                    }])
                    .await
                    .expect("finalize")[0];
                let mut result: Option<serde_json::Value> = result.map(|json| {
                    serde_json::from_str(&json).expect("a result is JSON it wrote itself")
                });
                if written == Finalized::LeaseLost && outcome == Outcome::Complete {
                    // Nothing else takes a lease the drain holds: a completed row is the
                    // handler's own `complete_in`, whose commit wrote the outcome and its
                    // result; the drain's finalize found it done.
                    let row = store.get(info.id).await.expect("read the job");
                    if let Some(row) = row.filter(|r| r.state == JobState::Completed) {
                        written = Finalized::Applied;
                        result = row.result;
                    }
                }
                report.push(Drained {
                    id: info.id,
                    kind: info.kind,
                    attempt: info.attempt,
                    outcome,
                    written,
                    result,
                });
            }
        }
        report
    }

    /// Says on stderr how many due jobs of the registered kinds are still available in `queue`
    /// when the claim took no more: a rate or concurrency limit, a paused kind or queue, or a
    /// payload version newer than the one registered holds them, and the drain's report does
    /// not hold them.
    async fn warn_if_due_jobs_are_left<S: TestStore>(&self, store: &S, queue: &str) {
        let now = chrono::Utc::now();
        let mut left = 0usize;
        for kind in self.registry.claim_kinds() {
            let filter = JobFilter {
                kind: Some(kind.kind),
                queue: Some(queue.to_owned()),
                states: vec![JobState::Available],
                limit: Some(10_000),
                ..JobFilter::default()
            };
            let rows = store.list(&filter).await.unwrap_or_default();
            left += rows.iter().filter(|r| r.run_at <= now).count();
        }
        if left > 0 {
            eprintln!(
                "job-testkit Drain: stopped with {left} due job(s) of the registered kinds still \
                 available in queue `{queue}`: the claim took none of them (a rate or \
                 concurrency limit, a paused kind or queue, or a payload version newer than \
                 registered); they are not in the report"
            );
        }
    }

    /// What to say when due jobs of kinds the drain does not run wait in `queue`: a kind not
    /// registered (`.register::<J>()` forgotten) leaves its jobs there, and the report has
    /// nothing of them.
    async fn unregistered_kinds_due<S: TestStore>(&self, store: &S, queue: &str) -> Option<String> {
        let now = chrono::Utc::now();
        let filter = JobFilter {
            queue: Some(queue.to_owned()),
            states: vec![
                JobState::Scheduled,
                JobState::Available,
                JobState::Retryable,
            ],
            limit: Some(10_000),
            ..JobFilter::default()
        };
        let mut kinds: Vec<(String, usize)> = Vec::new();
        for row in store.list(&filter).await.unwrap_or_default() {
            if row.run_at > now || self.registry.get(&row.kind).is_some() {
                continue;
            }
            match kinds.iter_mut().find(|(k, _)| *k == row.kind) {
                Some((_, n)) => *n += 1,
                None => kinds.push((row.kind, 1)),
            }
        }
        if kinds.is_empty() {
            return None;
        }
        kinds.sort();
        let found: Vec<String> = kinds.iter().map(|(k, n)| format!("`{k}` ({n})")).collect();
        Some(format!(
            "job-testkit Drain: due jobs of kinds this drain does not run wait in queue \
             `{queue}`: {}; they are not in the report (register their types: \
             `.register::<J>()`)",
            found.join(", ")
        ))
    }

    /// Says on stderr where jobs of the registered kinds wait, when a drain found nothing due
    /// in its queue: a test draining the wrong queue, or a job scheduled for later, learns it
    /// here rather than from an empty report.
    async fn warn_if_jobs_wait_elsewhere<S: TestStore>(&self, store: &S, queue: &str) {
        let now = chrono::Utc::now();
        // (queue, state, due, count), by queue, state and whether due.
        let mut waiting: Vec<(String, String, bool, i64)> = Vec::new();
        for kind in self.registry.claim_kinds() {
            let filter = JobFilter {
                kind: Some(kind.kind),
                states: vec![
                    JobState::Scheduled,
                    JobState::Available,
                    JobState::Retryable,
                ],
                limit: Some(10_000),
                ..JobFilter::default()
            };
            for row in store.list(&filter).await.unwrap_or_default() {
                let key = (row.queue, row.state.as_str().to_owned(), row.run_at <= now);
                match waiting
                    .iter_mut()
                    .find(|w| (&w.0, &w.1, w.2) == (&key.0, &key.1, key.2))
                {
                    Some(w) => w.3 += 1,
                    None => waiting.push((key.0, key.1, key.2, 1)),
                }
            }
        }
        waiting.sort();
        if !waiting.is_empty() {
            let found: Vec<String> = waiting
                .iter()
                .map(|(q, state, due, n)| {
                    let when = if *due { "due" } else { "not due yet" };
                    format!("{n} {state} ({when}) in queue `{q}`")
                })
                .collect();
            eprintln!(
                "job-testkit Drain: nothing was due in queue `{queue}`, but jobs of the \
                 registered kinds wait: {} (drain their queue, or use .with_scheduled(true))",
                found.join(", ")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TestSqlite;
    use job_core::{JobError, NewJob, Store};

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Receipt {}

    impl Job for Receipt {
        const KIND: &'static str = "receipt";
        async fn perform(self, _: JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Hangs {}

    impl Job for Hangs {
        const KIND: &'static str = "hangs";
        async fn perform(self, _: JobContext) -> Result<(), JobError> {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn a_handler_that_never_returns_fails_the_drain_naming_its_job() {
        let db = TestSqlite::new().await;
        let store = db.store();
        store.enqueue(NewJob::new("receipt", "{}")).await.unwrap();
        let id = store.enqueue(NewJob::new("hangs", "{}")).await.unwrap();
        let drain = Drain::new()
            .register::<Receipt>()
            .register::<Hangs>()
            .attempt_timeout(Duration::from_millis(100));
        // Far past the drain's bound: a drain that ignores it fails here instead of hanging.
        let drained = tokio::spawn(async move { drain.run(&store, "default").await });
        let panic = tokio::time::timeout(Duration::from_secs(20), drained)
            .await
            .expect("the drain ends by its attempt_timeout")
            .expect_err("the drain fails")
            .into_panic();
        let said = panic.downcast_ref::<String>().unwrap();
        assert!(
            said.contains(&format!(
                "job {id} (kind `hangs`, attempt 1) did not return within 100ms"
            )),
            "{said}"
        );
        db.close().await;
    }

    #[tokio::test]
    async fn a_drain_names_the_due_kinds_it_does_not_run() {
        let db = TestSqlite::new().await;
        let store = db.store();
        for kind in ["receipt", "invoice", "invoice", "refund"] {
            store.enqueue(NewJob::new(kind, "{}")).await.unwrap();
        }
        let drain = Drain::new().register::<Receipt>();
        let report = drain.run(&store, "default").await;
        assert_eq!(report.len(), 1);
        assert_eq!(
            drain
                .unregistered_kinds_due(&store, "default")
                .await
                .as_deref(),
            Some(
                "job-testkit Drain: due jobs of kinds this drain does not run wait in queue \
                 `default`: `invoice` (2), `refund` (1); they are not in the report (register \
                 their types: `.register::<J>()`)"
            )
        );
        // Another queue, or nothing left: nothing to say.
        assert_eq!(drain.unregistered_kinds_due(&store, "mail").await, None);
        db.close().await;
    }
}
