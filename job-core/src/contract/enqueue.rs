//! Enqueueing through any backend: the typed builders ([`Enqueue`], [`EnqueueMany`]) and the
//! trait a backend implements for its pools, connections and transactions
//! ([`EnqueueExecutor`]), so a job commits or rolls back with the caller's own rows.

use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::error::EnqueueError;
use crate::model::job::{Job, JobId};
use crate::model::new_job::{
    Deadline, Dependency, DependencyMode, DependsOn, EnqueueOptions, NewJob, OnDuplicate, RunAt,
    UniqueScope,
};

/// Something jobs can be inserted through: a backend's pool, or a connection (the caller's
/// open transaction, `&mut *tx`). `B` is the backend's marker type
/// (`job_postgres::PgBackend`, `job_sqlite::SqliteBackend`); it lets each backend implement
/// this trait for its database's types, and is inferred from the executor.
///
/// Inserting through a connection inside a transaction makes the job part of it: it exists
/// only once the transaction commits.
pub trait EnqueueExecutor<B>: Send + Sized {
    /// Inserts one job, already checked ([`NewJob::build`]), and returns its id. A duplicate
    /// unique key is [`EnqueueError::Duplicate`], as [`Store::enqueue`](crate::Store::enqueue)
    /// answers it.
    fn enqueue_job(self, job: &NewJob) -> impl Future<Output = Result<JobId, EnqueueError>> + Send;

    /// Inserts many jobs, already checked, all or none, and returns their ids in input order.
    /// Jobs with unique keys are refused ([`EnqueueError::InvalidOption`] `unique_key`).
    fn enqueue_jobs(
        self,
        jobs: &[NewJob],
    ) -> impl Future<Output = Result<Vec<JobId>, EnqueueError>> + Send;
}

/// A typed enqueue of one job, with its options over the job's defaults.
///
/// It inserts through any backend's [`EnqueueExecutor`]: with job-postgres `&pool` or
/// `&mut *tx` of a `sqlx::PgPool`, with job-sqlite the same of a `sqlx::SqlitePool`, so the job
/// commits or rolls back with the caller's own rows.
///
/// ```no_run
/// # use job_core::{Enqueue, EnqueueExecutor, Job, JobContext, JobError};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct SendInvoice { invoice_id: i64 }
/// # impl Job for SendInvoice {
/// #     const KIND: &'static str = "billing.send_invoice";
/// #     async fn perform(self, _: JobContext) -> Result<(), JobError> { Ok(()) }
/// # }
/// // `tx` is `&mut *tx` of the caller's open transaction, on either backend.
/// async fn bill<B>(tx: impl EnqueueExecutor<B>) -> Result<(), job_core::EnqueueError> {
///     Enqueue::new(SendInvoice { invoice_id: 7 })
///         .queue("mail")
///         .schedule_in(std::time::Duration::from_secs(60))
///         .enqueue(tx)
///         .await?;
///     Ok(()) // the job exists once the caller commits
/// }
/// ```
#[derive(Debug, Clone)]
#[must_use = "an Enqueue does nothing until `.enqueue(executor)` is awaited"]
pub struct Enqueue<J: Job> {
    job: J,
    options: EnqueueOptions,
    payload_limit: Option<usize>,
}

impl<J: Job> Enqueue<J> {
    /// Starts an enqueue of `job` with its kind's defaults.
    pub fn new(job: J) -> Self {
        Enqueue {
            job,
            options: EnqueueOptions::default(),
            payload_limit: None,
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

    /// Refuses payloads over `limit` bytes of compact JSON before anything is sent. The
    /// database's own limit (PostgreSQL's `job.settings.payload_limit`, 1 MiB unless changed
    /// there) applies in any case; this one can only be tighter. None by default.
    pub fn payload_limit(mut self, limit: usize) -> Self {
        self.payload_limit = Some(limit);
        self
    }

    /// Makes the job unique by `key` among the active jobs of its kind, overriding the key the
    /// job derives from its payload (`#[job(unique = "...")]`). A duplicate is refused with
    /// [`EnqueueError::Duplicate`] carrying the existing job's id (HTTP: 409 Conflict).
    pub fn unique_key(mut self, key: impl Into<String>) -> Self {
        self.options.unique_key = Some(key.into());
        self
    }

    /// Orders the job by `key`, overriding the key the job derives from its payload
    /// (`#[job(ordering = "...")]`): jobs with the same key, of any kind, run one at a time in
    /// enqueue order across every worker; while an earlier one is unfinished the job is
    /// `pending`. 1 to 512 bytes.
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.options.ordering_key = Some(key.into());
        self
    }

    /// Rate-limits the job under `key`, overriding the key the job derives from its payload
    /// (`#[job(rate_key = "...")]`): with its kind's rate limit (`#[job(rate = "10/s")]`),
    /// each key has a window of its own (one tenant's quota does not slow another's). Refused
    /// for a kind without a rate limit. 1 to 512 bytes.
    pub fn rate_key(mut self, key: impl Into<String>) -> Self {
        self.options.rate_key = Some(key.into());
        self
    }

    /// Which states the unique key counts. Defaults to [`UniqueScope::UntilFinished`].
    pub fn unique_scope(mut self, scope: UniqueScope) -> Self {
        self.options.unique_scope = scope;
        self
    }

    /// On a duplicate, replaces the waiting job's payload, run time and deadline and returns
    /// its id, instead of refusing; a running duplicate is still refused.
    pub fn replace_duplicate(mut self) -> Self {
        self.options.on_duplicate = OnDuplicate::Replace;
        self
    }

    /// Never starts the job after `at`: past it the job is not claimed, and is discarded as
    /// `expired`.
    pub fn deadline(mut self, at: DateTime<Utc>) -> Self {
        self.options.deadline = Some(Deadline::At(at));
        self
    }

    /// Never starts the job later than `within` after the insert (database clock).
    pub fn deadline_in(mut self, within: Duration) -> Self {
        self.options.deadline = Some(Deadline::In(within));
        self
    }

    /// Labels the job; listings and stats filter by tag.
    pub fn tags<I, T>(mut self, tags: I) -> Self
    where
        I: IntoIterator<Item = T>,
        T: Into<String>,
    {
        self.options.tags.extend(tags.into_iter().map(Into::into));
        self
    }

    /// Records the tenant the job belongs to; listings and stats filter by tenant.
    pub fn tenant(mut self, tenant: impl Into<String>) -> Self {
        self.options.tenant = Some(tenant.into());
        self
    }

    /// Joins the job's attempts to the trace of this W3C `traceparent` (from an incoming
    /// request's header, say) instead of the current span's (see
    /// [`current_traceparent`](crate::current_traceparent)).
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.options.traceparent = Some(traceparent.into());
        self
    }

    /// Runs the job only after each of `jobs` has completed; when one ends cancelled or
    /// discarded instead, this job is discarded with class `dependency` and never runs. It is
    /// `pending` meanwhile. PostgreSQL only for now.
    pub fn depends_on(mut self, jobs: impl IntoIterator<Item = JobId>) -> Self {
        self.options
            .depends_on
            .extend(jobs.into_iter().map(|id| Dependency {
                on: DependsOn::Job(id),
                mode: DependencyMode::Completed,
            }));
        self
    }

    /// Runs the job once each of `jobs` has finished, however it ended (completed, cancelled
    /// or discarded): a callback. PostgreSQL only for now.
    pub fn after_all(mut self, jobs: impl IntoIterator<Item = JobId>) -> Self {
        self.options
            .depends_on
            .extend(jobs.into_iter().map(|id| Dependency {
                on: DependsOn::Job(id),
                mode: DependencyMode::Finished,
            }));
        self
    }

    /// The row this enqueue would insert, checked.
    pub fn build(&self) -> Result<NewJob, EnqueueError> {
        NewJob::build(
            &self.job,
            self.options.clone(),
            self.payload_limit.unwrap_or(usize::MAX),
        )
    }

    /// Checks the options and inserts the job through `executor` (`&pool`, `&mut *tx` or
    /// `&mut conn` of either backend). Nothing is written when an option is refused.
    pub async fn enqueue<B, E: EnqueueExecutor<B>>(
        self,
        executor: E,
    ) -> Result<JobId, EnqueueError> {
        let new = self.build()?;
        executor.enqueue_job(&new).await
    }

    /// Inserts many jobs of this kind with its defaults in one statement through `executor`,
    /// and returns their ids in order. Nothing is written when any job is refused.
    pub async fn many<B, E, I>(executor: E, jobs: I) -> Result<Vec<JobId>, EnqueueError>
    where
        E: EnqueueExecutor<B>,
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
    payload_limit: Option<usize>,
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
            payload_limit: None,
            _job: PhantomData,
        }
    }

    /// Applies these options to every job.
    pub fn options(mut self, options: EnqueueOptions) -> Self {
        self.options = options;
        self
    }

    /// Refuses payloads over `limit` bytes of compact JSON before anything is sent (see
    /// [`Enqueue::payload_limit`]). None by default: the database's limit decides.
    pub fn payload_limit(mut self, limit: usize) -> Self {
        self.payload_limit = Some(limit);
        self
    }

    /// Checks and inserts `jobs` in one statement through `executor`; ids come back in order.
    pub async fn enqueue<B, E, I>(self, executor: E, jobs: I) -> Result<Vec<JobId>, EnqueueError>
    where
        E: EnqueueExecutor<B>,
        I: IntoIterator<Item = J>,
    {
        let rows = jobs
            .into_iter()
            .map(|job| {
                let limit = self.payload_limit.unwrap_or(usize::MAX);
                NewJob::build(&job, self.options.clone(), limit)
            })
            .collect::<Result<Vec<_>, _>>()?;
        executor.enqueue_jobs(&rows).await
    }
}

/// A batch: member jobs, and a callback job that runs once when every member has finished,
/// however each ended, all inserted in one statement (so in the caller's transaction, or not
/// at all). The callback reads the members' outcomes and results through
/// `PgStore::dependencies(ctx.id())`. PostgreSQL only for now.
///
/// ```no_run
/// # use job_core::{Batch, EnqueueExecutor, Enqueue, Job, JobContext, JobError};
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)] struct Resize { image: i64 }
/// # impl Job for Resize { const KIND: &'static str = "resize";
/// #   async fn perform(self, _: JobContext) -> Result<(), JobError> { Ok(()) } }
/// # #[derive(Serialize, Deserialize)] struct AlbumReady { album: i64 }
/// # impl Job for AlbumReady { const KIND: &'static str = "album_ready";
/// #   async fn perform(self, _: JobContext) -> Result<(), JobError> { Ok(()) } }
/// # async fn demo<B, E: EnqueueExecutor<B>>(tx: E) -> Result<(), job_core::EnqueueError> {
/// let ids = Batch::new()
///     .member(Enqueue::new(Resize { image: 1 }))
///     .member(Enqueue::new(Resize { image: 2 }))
///     .callback(Enqueue::new(AlbumReady { album: 7 }))
///     .enqueue(tx)
///     .await?;
/// # let _ = ids; Ok(()) }
/// ```
#[derive(Debug, Default)]
#[must_use = "a Batch does nothing until `.enqueue(executor)` is awaited"]
pub struct Batch {
    members: Vec<Result<NewJob, EnqueueError>>,
    callback: Option<Result<NewJob, EnqueueError>>,
}

/// The ids a [`Batch`] was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchIds {
    /// The members', in the order they were added.
    pub members: Vec<JobId>,
    /// The callback's.
    pub callback: JobId,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Batch::default()
    }

    /// Adds a member (with its own options).
    pub fn member<J: Job>(mut self, member: Enqueue<J>) -> Self {
        self.members.push(member.build());
        self
    }

    /// Sets the job that runs once every member has finished.
    pub fn callback<J: Job>(mut self, callback: Enqueue<J>) -> Self {
        self.callback = Some(callback.build());
        self
    }

    /// Checks every job and inserts members and callback in one statement through
    /// `executor`. Nothing is written when any of them is refused; a batch needs at least one
    /// member and a callback.
    pub async fn enqueue<B, E: EnqueueExecutor<B>>(
        self,
        executor: E,
    ) -> Result<BatchIds, EnqueueError> {
        let invalid = |reason: &str| EnqueueError::InvalidOption {
            option: "batch",
            reason: reason.into(),
        };
        let mut callback = self
            .callback
            .ok_or_else(|| invalid("has no callback: call .callback(..) before .enqueue"))??;
        if self.members.is_empty() {
            return Err(invalid("has no member: add at least one"));
        }
        let mut jobs = self.members.into_iter().collect::<Result<Vec<_>, _>>()?;
        let n = jobs.len();
        callback.depends_on.extend((0..n).map(|index| Dependency {
            on: DependsOn::Batch(index),
            mode: DependencyMode::Finished,
        }));
        callback.validate(usize::MAX)?;
        jobs.push(callback);
        let mut ids = executor.enqueue_jobs(&jobs).await?;
        let callback = ids.pop().expect("one id per job");
        Ok(BatchIds {
            members: ids,
            callback,
        })
    }
}
