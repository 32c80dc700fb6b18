//! Enqueueing through any sqlx executor (a pool, a connection, or the caller's own
//! transaction, so a job commits or rolls back with the caller's rows), and the typed builder.

use std::marker::PhantomData;
use std::time::Duration;

use chrono::{DateTime, Utc};
use job_core::store::duration_millis;
use job_core::{EnqueueError, EnqueueOptions, Job, JobId, NewJob, RunAt, DEFAULT_PAYLOAD_LIMIT};
use sqlx::PgExecutor;

use crate::error::Error;
use crate::sql;

/// Inserts one job through `executor` and returns its id. The job is not checked here: build
/// it with [`NewJob::build`] or check it with [`NewJob::validate`].
///
/// Pass `&pool`, `&mut *tx` (a [`sqlx::Transaction`]) or `&mut conn`; inside a transaction the
/// job exists only if the transaction commits.
pub async fn enqueue<'e, E: PgExecutor<'e>>(
    executor: E,
    job: &NewJob,
) -> Result<JobId, EnqueueError> {
    let (run_at, delay_ms) = split_run_at(job.run_at);
    let id = sqlx::query_scalar(sql::ENQUEUE)
        .bind(&job.kind)
        .bind(&job.queue)
        .bind(job.priority)
        .bind(&job.payload)
        .bind(job.payload_version)
        .bind(job.max_attempts)
        .bind(run_at)
        .bind(delay_ms)
        .fetch_one(executor)
        .await
        .map_err(Error::query("enqueue"))?;
    Ok(id)
}

/// Inserts many jobs through `executor` in one statement and returns their ids in input order.
/// The jobs are not checked here (see [`enqueue`]).
pub async fn enqueue_many<'e, E: PgExecutor<'e>>(
    executor: E,
    jobs: &[NewJob],
) -> Result<Vec<JobId>, EnqueueError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let n = jobs.len();
    let mut kinds = Vec::with_capacity(n);
    let mut queues = Vec::with_capacity(n);
    let mut priorities = Vec::with_capacity(n);
    let mut payloads = Vec::with_capacity(n);
    let mut versions = Vec::with_capacity(n);
    let mut max_attempts = Vec::with_capacity(n);
    let mut run_ats = Vec::with_capacity(n);
    let mut delays = Vec::with_capacity(n);
    for job in jobs {
        let (run_at, delay_ms) = split_run_at(job.run_at);
        kinds.push(job.kind.as_str());
        queues.push(job.queue.as_str());
        priorities.push(job.priority);
        payloads.push(job.payload.as_str());
        versions.push(job.payload_version);
        max_attempts.push(job.max_attempts);
        run_ats.push(run_at);
        delays.push(delay_ms);
    }
    let mut ids: Vec<JobId> = sqlx::query_scalar(sql::ENQUEUE_MANY)
        .bind(kinds)
        .bind(queues)
        .bind(priorities)
        .bind(payloads)
        .bind(versions)
        .bind(max_attempts)
        .bind(run_ats)
        .bind(delays)
        .fetch_all(executor)
        .await
        .map_err(Error::query("enqueue_many"))?;
    // Rows are inserted in input order, so their identity ids ascend in input order; sorting
    // makes the answer independent of the order RETURNING happens to emit them in.
    ids.sort_unstable();
    Ok(ids)
}

/// `run_at` as the two binds of the insert statements: an absolute time, or a delay in
/// milliseconds from the database's now.
fn split_run_at(run_at: RunAt) -> (Option<DateTime<Utc>>, i64) {
    match run_at {
        RunAt::Now => (None, 0),
        RunAt::In(delay) => (None, duration_millis(delay)),
        RunAt::At(at) => (Some(at), 0),
    }
}

/// A typed enqueue of one job, with its options over the job's defaults.
///
/// ```no_run
/// # use job_core::{Job, JobContext, JobError};
/// # use job_postgres::Enqueue;
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct SendInvoice { invoice_id: i64 }
/// # impl Job for SendInvoice {
/// #     const KIND: &'static str = "billing.send_invoice";
/// #     async fn perform(self, _: JobContext) -> Result<(), JobError> { Ok(()) }
/// # }
/// # async fn run(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
/// let mut tx = pool.begin().await?;
/// // ... the caller's own writes through &mut *tx ...
/// let id = Enqueue::new(SendInvoice { invoice_id: 7 })
///     .queue("mail")
///     .schedule_in(std::time::Duration::from_secs(60))
///     .enqueue(&mut *tx)
///     .await?;
/// tx.commit().await?; // the job exists only now
/// # let _ = id; Ok(()) }
/// ```
#[derive(Debug, Clone)]
#[must_use = "an Enqueue does nothing until `.enqueue(executor)` is awaited"]
pub struct Enqueue<J: Job> {
    job: J,
    options: EnqueueOptions,
    payload_limit: usize,
}

impl<J: Job> Enqueue<J> {
    /// Starts an enqueue of `job` with its kind's defaults.
    pub fn new(job: J) -> Self {
        Enqueue {
            job,
            options: EnqueueOptions::default(),
            payload_limit: DEFAULT_PAYLOAD_LIMIT,
        }
    }

    /// Puts the job on `queue` instead of its kind's default queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.options.queue = Some(queue.into());
        self
    }

    /// Sets its priority (lower runs first; 0 or more).
    pub fn priority(mut self, priority: i16) -> Self {
        self.options.priority = Some(priority);
        self
    }

    /// Sets the attempts in all (1 or more).
    pub fn max_attempts(mut self, max_attempts: i32) -> Self {
        self.options.max_attempts = Some(max_attempts);
        self
    }

    /// Lets the job start only after `delay`, measured on the database's clock.
    pub fn schedule_in(mut self, delay: Duration) -> Self {
        self.options.run_at = RunAt::In(delay);
        self
    }

    /// Lets the job start only at `at`.
    pub fn run_at(mut self, at: DateTime<Utc>) -> Self {
        self.options.run_at = RunAt::At(at);
        self
    }

    /// Refuses payloads over `limit` bytes of JSON. Defaults to
    /// [`DEFAULT_PAYLOAD_LIMIT`].
    pub fn payload_limit(mut self, limit: usize) -> Self {
        self.payload_limit = limit;
        self
    }

    /// The row this enqueue would insert, checked.
    pub fn build(&self) -> Result<NewJob, EnqueueError> {
        NewJob::build(&self.job, self.options.clone(), self.payload_limit)
    }

    /// Checks the options and inserts the job through `executor` (`&pool`, `&mut *tx` or
    /// `&mut conn`). Nothing is written when an option is refused.
    pub async fn enqueue<'e, E: PgExecutor<'e>>(self, executor: E) -> Result<JobId, EnqueueError> {
        let new = self.build()?;
        enqueue(executor, &new).await
    }

    /// Inserts many jobs of this kind with its defaults in one statement through `executor`,
    /// and returns their ids in order. Nothing is written when any job is refused.
    pub async fn many<'e, E, I>(executor: E, jobs: I) -> Result<Vec<JobId>, EnqueueError>
    where
        E: PgExecutor<'e>,
        I: IntoIterator<Item = J>,
    {
        EnqueueMany::new().enqueue(executor, jobs).await
    }
}

/// A typed bulk enqueue: many jobs of one kind sharing one set of options.
#[derive(Debug, Clone)]
#[must_use = "an EnqueueMany does nothing until `.enqueue(executor, jobs)` is awaited"]
pub struct EnqueueMany<J: Job> {
    options: EnqueueOptions,
    payload_limit: usize,
    _job: PhantomData<fn(J)>,
}

impl<J: Job> Default for EnqueueMany<J> {
    fn default() -> Self {
        Self::new()
    }
}

impl<J: Job> EnqueueMany<J> {
    /// Starts a bulk enqueue with the kind's defaults.
    pub fn new() -> Self {
        EnqueueMany {
            options: EnqueueOptions::default(),
            payload_limit: DEFAULT_PAYLOAD_LIMIT,
            _job: PhantomData,
        }
    }

    /// Applies these options to every job.
    pub fn options(mut self, options: EnqueueOptions) -> Self {
        self.options = options;
        self
    }

    /// Refuses payloads over `limit` bytes of JSON. Defaults to [`DEFAULT_PAYLOAD_LIMIT`].
    pub fn payload_limit(mut self, limit: usize) -> Self {
        self.payload_limit = limit;
        self
    }

    /// Checks and inserts `jobs` in one statement through `executor`; ids come back in order.
    pub async fn enqueue<'e, E, I>(self, executor: E, jobs: I) -> Result<Vec<JobId>, EnqueueError>
    where
        E: PgExecutor<'e>,
        I: IntoIterator<Item = J>,
    {
        let rows = jobs
            .into_iter()
            .map(|job| NewJob::build(&job, self.options.clone(), self.payload_limit))
            .collect::<Result<Vec<_>, _>>()?;
        enqueue_many(executor, &rows).await
    }
}
