//! Runs one job's handler inline, with a real [`JobContext`], and classifies its end exactly as
//! a worker would: no database, no worker, no lease.

use std::sync::Arc;

use job_core::registry::decode;
use job_core::{run_attempt, AttemptInfo, Extensions, Job, JobContext, JobId, Lease, Outcome};
use tokio_util::sync::CancellationToken;

/// Settings for inline execution: application state and the attempt to pretend it is.
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
    seed: u64,
}

impl Default for Inline {
    fn default() -> Self {
        Inline {
            state: Extensions::new(),
            id: 1,
            attempt: 1,
            max_attempts: None,
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

    /// Seeds the backoff jitter of a retry outcome.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Serializes `job` as an enqueue would, decodes it as a worker would, runs its handler
    /// under its timeout and returns the outcome a worker would write. A payload that does
    /// not round-trip through JSON comes back as a poison `Discard`, as it would in production.
    pub async fn perform<J: Job>(&self, job: J) -> Outcome {
        let info = AttemptInfo {
            id: self.id,
            kind: J::KIND.to_owned(),
            queue: J::OPTIONS.queue.to_owned(),
            attempt: self.attempt,
            max_attempts: self.max_attempts.unwrap_or(J::OPTIONS.max_attempts),
        };
        let decoded = serde_json::to_string(&job)
            .map_err(|e| job_core::registry::Poison(format!("payload does not serialize: {e}")))
            .and_then(|json| decode::<J>(&json, J::VERSION));
        let job = match decoded {
            Ok(job) => job,
            Err(poison) => {
                return Outcome::Discard {
                    failure: job_core::Failure {
                        attempt: info.attempt,
                        class: job_core::ErrorClass::Poison,
                        message: poison.0,
                    },
                }
            }
        };
        let lease = Lease {
            id: self.id,
            token: uuid::Uuid::nil(),
        };
        let cancel = CancellationToken::new();
        let ctx = JobContext::new(info.clone(), lease, Arc::new(self.state.clone()), cancel);
        let end = run_attempt(Box::pin(job.perform(ctx)), J::OPTIONS.timeout).await;
        let mut rng = fastrand::Rng::with_seed(self.seed);
        Outcome::classify(end, &info, false, &J::OPTIONS.backoff, &mut rng)
    }
}

/// Runs `job` inline as attempt 1 with no application state; see [`Inline`].
pub async fn perform<J: Job>(job: J) -> Outcome {
    Inline::new().perform(job).await
}
