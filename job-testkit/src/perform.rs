//! Runs one job's handler inline, with a real [`JobContext`], and classifies its end exactly as
//! a worker would: no database, no worker, no lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use job_core::{
    perform_attempt, AttemptHooks, AttemptInfo, BoxFuture, Extensions, Finalized, Job, JobContext,
    JobId, Lease, Outcome, Registry, StepLimit, StoreError,
};
use tokio_util::sync::CancellationToken;

/// One job's recorded durable steps, in memory: what `ctx.step(..)` records during inline
/// execution. Pass the same memory to several [`Inline::steps`] runs to play a retry that
/// finds earlier steps done; clones share it.
///
/// ```
/// # use job_core::{Job, JobContext, JobError, Outcome};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Charge {}
/// # impl Job for Charge { const KIND: &'static str = "charge";
/// #   async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
/// #     let id: String = ctx.step("charge", || async { Ok("ch_1".to_string()) }).await?;
/// #     if ctx.attempt() == 1 { return Err(JobError::retryable("email bounced")); }
/// #     Ok(()) } }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use job_testkit::{Inline, StepMemory};
///
/// let steps = StepMemory::new();
/// let first = Inline::new().steps(steps.clone()).perform(Charge {}).await;
/// assert_eq!(first.name(), "retry");
/// assert_eq!(steps.get::<String>("charge").as_deref(), Some("ch_1"));
/// let second = Inline::new().steps(steps.clone()).attempt(2).perform(Charge {}).await;
/// assert_eq!(second, Outcome::Complete);
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct StepMemory(Arc<Mutex<HashMap<String, String>>>);

impl StepMemory {
    /// No step recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// The recorded output of step `name`, decoded as `T`.
    ///
    /// # Panics
    ///
    /// When the recorded output does not decode as `T`.
    pub fn get<T: serde::de::DeserializeOwned>(&self, name: &str) -> Option<T> {
        let json = self.lock().get(name).cloned()?;
        Some(serde_json::from_str(&json).unwrap_or_else(|e| {
            panic!("step `{name}` recorded {json}, which does not decode: {e}")
        }))
    }

    /// Records `output` as step `name`, as if an earlier attempt had run it.
    ///
    /// # Panics
    ///
    /// When `output` does not serialize.
    pub fn record<T: serde::Serialize>(&self, name: &str, output: &T) {
        let json = serde_json::to_string(output).expect("a step output serializes");
        self.lock().insert(name.to_owned(), json);
    }

    /// The names of the recorded steps, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.lock().keys().cloned().collect();
        names.sort();
        names
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl StepMemory {
    /// Records step `name` of job `job` as the stores do: a name already recorded keeps its
    /// first output, and a new step past the job's limits ([`MAX_STEPS`](job_core::MAX_STEPS)
    /// steps, [`MAX_STEPS_TOTAL`](job_core::MAX_STEPS_TOTAL) bytes of output) is refused
    /// with a [`StepLimit`], nothing recorded, so that a handler meets the limit inline as it
    /// would in production.
    fn save(&self, job: JobId, name: &str, output: &str) -> Result<Finalized, StoreError> {
        let mut steps = self.lock();
        if steps.contains_key(name) {
            return Ok(Finalized::Applied);
        }
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let recorded = count(steps.len());
        let bytes = steps.values().map(|o| count(o.len())).sum::<u64>();
        let size = count(output.len());
        if !StepLimit::allows(recorded, bytes, size) {
            return Err(StoreError::refused(StepLimit::new(
                job, name, recorded, bytes, size,
            )));
        }
        steps.insert(name.to_owned(), output.to_owned());
        Ok(Finalized::Applied)
    }
}

/// A [`StepMemory`] given to one inline attempt of job `job`: the id the store's refusal of
/// a step past the limits names.
struct InlineSteps {
    memory: StepMemory,
    job: JobId,
}

impl AttemptHooks for InlineSteps {
    fn load_steps(&self) -> BoxFuture<'_, Result<HashMap<String, String>, StoreError>> {
        let steps = self.memory.lock().clone();
        Box::pin(async move { Ok(steps) })
    }

    fn save_step<'a>(
        &'a self,
        name: &'a str,
        output: &'a str,
    ) -> BoxFuture<'a, Result<Finalized, StoreError>> {
        let saved = self.memory.save(self.job, name, output);
        Box::pin(async move { saved })
    }
}

/// Settings for inline execution: application state and the attempt to pretend it is.
///
/// One `Inline` plays one job's life: the durable steps its performs record are kept (in
/// memory, shared by its clones), so performing attempt 2 after attempt 1 skips the steps
/// attempt 1 recorded, as a worker's retry would. Use a new `Inline` for another job.
///
/// There is no database and no lease: a handler that completes its job in its own transaction
/// (`job_postgres::complete_in`) finds no lease to complete, and its attempt is a retry. Test
/// such a handler with [`Drain`](crate::Drain) or a worker.
///
/// ```
/// # use job_core::{Job, JobContext, JobError, Outcome};
/// # use std::sync::atomic::{AtomicU32, Ordering};
/// # static SENT: AtomicU32 = AtomicU32::new(0);
/// # #[derive(serde::Serialize, serde::Deserialize)] struct Confirm { order: i64 }
/// # impl Job for Confirm { const KIND: &'static str = "confirm";
/// #   async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
/// #     ctx.step("email", || async { SENT.fetch_add(1, Ordering::SeqCst); Ok(()) }).await?;
/// #     if ctx.attempt() == 1 { return Err(JobError::retryable("crm down")); }
/// #     Ok(()) } }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use job_testkit::Inline;
///
/// let job = Inline::new();
/// assert_eq!(job.perform(Confirm { order: 7 }).await.name(), "retry");
/// let retry = job.clone().attempt(2).perform(Confirm { order: 7 }).await;
/// assert_eq!(retry, Outcome::Complete);
/// assert_eq!(SENT.load(Ordering::SeqCst), 1, "the email step ran once");
/// # }
/// ```
///
/// ```
/// # use job_core::{Job, JobContext, JobError, Outcome};
/// # #[derive(serde::Serialize, serde::Deserialize)] struct SendInvoice { invoice_id: i64 }
/// # impl Job for SendInvoice { const KIND: &'static str = "send_invoice";
/// #   async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
/// #     let prefix = ctx.state::<String>()?; assert_eq!(prefix, "INV"); Ok(()) } }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use job_testkit::{perform, Inline};
///
/// // Without the state it needs, the handler fails terminally: the job would be discarded.
/// assert_eq!(perform(SendInvoice { invoice_id: 1 }).await.name(), "discard");
/// let outcome = Inline::new().state("INV".to_string()).perform(SendInvoice { invoice_id: 1 }).await;
/// assert_eq!(outcome, Outcome::Complete);
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Inline {
    state: Extensions,
    id: JobId,
    attempt: i32,
    max_attempts: Option<i32>,
    snoozes: i32,
    steps: StepMemory,
    seed: u64,
}

impl Default for Inline {
    fn default() -> Self {
        Inline {
            state: Extensions::new(),
            id: 1,
            attempt: 1,
            max_attempts: None,
            snoozes: 0,
            steps: StepMemory::new(),
            seed: 0,
        }
    }
}

impl Inline {
    /// Attempt 1 of job id 1, no state, seed 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `value` available through `ctx.state::<T>()`.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// Runs as attempt `n` (1-based).
    pub fn attempt(mut self, n: i32) -> Self {
        self.attempt = n;
        self
    }

    /// Overrides the job's attempts in all.
    pub fn max_attempts(mut self, n: i32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// The job id the context reports.
    pub fn id(mut self, id: JobId) -> Self {
        self.id = id;
        self
    }

    /// Pretends the job already snoozed `n` times, for the snooze bound
    /// ([`DEFAULT_MAX_SNOOZES`](job_core::DEFAULT_MAX_SNOOZES)).
    pub fn snoozes(mut self, n: i32) -> Self {
        self.snoozes = n;
        self
    }

    /// Records durable steps in `memory` (and skips those already there), instead of this
    /// `Inline`'s own memory.
    pub fn steps(mut self, memory: StepMemory) -> Self {
        self.steps = memory;
        self
    }

    /// The durable steps its performs recorded.
    pub fn recorded_steps(&self) -> &StepMemory {
        &self.steps
    }

    /// Seeds the backoff jitter of a retry outcome.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Serializes `job` as an enqueue would, decodes it as a worker would, runs its handler
    /// under its timeout and returns the outcome a worker would write. A payload that every
    /// enqueue would refuse (it does not serialize, holds a NaN or a NUL, nests too deep, is
    /// over the default payload limit) comes back as a poison `Discard` saying why, and one that
    /// does not decode as it would in production.
    pub async fn perform<J: Job>(&self, job: J) -> Outcome {
        let info = AttemptInfo {
            id: self.id,
            kind: J::KIND.to_owned(),
            queue: J::OPTIONS.queue.to_owned(),
            attempt: self.attempt,
            max_attempts: self.max_attempts.unwrap_or(J::OPTIONS.max_attempts),
        };
        // The enqueue's own serialization and checks (a NaN, a NUL, too deep, too large): a
        // payload every enqueue refuses does not run here either.
        let built = job_core::NewJob::build(
            &job,
            job_core::EnqueueOptions::default(),
            job_core::DEFAULT_PAYLOAD_LIMIT,
        );
        let payload = match built {
            Ok(new) => new.payload,
            Err(e) => {
                return Outcome::Discard {
                    failure: job_core::Failure {
                        attempt: info.attempt,
                        class: job_core::ErrorClass::Poison,
                        message: format!("the payload would be refused at enqueue: {e}"),
                    },
                }
            }
        };
        let mut registry = Registry::new();
        registry.register::<J>();
        let handler = registry.get(J::KIND).expect("just registered");
        let lease = Lease {
            id: self.id,
            token: uuid::Uuid::nil(),
        };
        let steps = InlineSteps {
            memory: self.steps.clone(),
            job: self.id,
        };
        let ctx = JobContext::new(
            info,
            lease,
            Arc::new(self.state.clone()),
            CancellationToken::new(),
        )
        .with_hooks(Arc::new(steps));
        let mut rng = fastrand::Rng::with_seed(self.seed);
        // The worker's own pipeline: decode, run under the timeout, conclude.
        perform_attempt(
            &**handler,
            &payload,
            J::VERSION,
            ctx,
            self.snoozes,
            &mut rng,
        )
        .await
    }
}

/// Runs `job` inline as attempt 1 with no application state; see [`Inline`].
pub async fn perform<J: Job>(job: J) -> Outcome {
    Inline::new().perform(job).await
}
