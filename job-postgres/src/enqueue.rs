//! Enqueueing through any sqlx executor (a pool, a connection, or the caller's own
//! transaction, so a job commits or rolls back with the caller's rows), and the typed builder.

use std::marker::PhantomData;
use std::time::Duration;

use chrono::{DateTime, Utc};
use job_core::duration_millis;
use job_core::{
    Deadline, EnqueueError, EnqueueOptions, Job, JobId, NewJob, OnDuplicate, RunAt, UniqueScope,
};
use sqlx::postgres::PgDatabaseError;
use sqlx::PgExecutor;

use crate::error::Error;
use crate::sql;

/// Inserts one job through `executor` and returns its id. The job is not checked here: build
/// it with [`NewJob::build`] or check it with [`NewJob::validate`]. The database checks it in
/// any case (the payload limit of `job.settings`, names, the payload's shape, times): what it
/// refuses comes back as [`EnqueueError::PayloadTooLarge`] or [`EnqueueError::InvalidOption`]
/// naming the field, and nothing is written.
///
/// Pass `&pool`, `&mut *tx` (a [`sqlx::Transaction`]) or `&mut conn`; inside a transaction the
/// job exists only if the transaction commits.
///
/// A job with a unique key is decided by the database's unique index, never by a pre-check:
/// when an active job of the kind holds the key, nothing is inserted and the answer is
/// [`EnqueueError::Duplicate`] with that job's id, unless the job asks for
/// [`OnDuplicate::Replace`] and the holder is waiting: then the holder's payload, run time and
/// deadline are replaced and its id returned. (Inside a `REPEATABLE READ` or `SERIALIZABLE`
/// transaction a duplicate committed concurrently is a serialization failure instead.)
pub async fn enqueue<'e, E: PgExecutor<'e>>(
    executor: E,
    job: &NewJob,
) -> Result<JobId, EnqueueError> {
    let (run_at, delay_ms) = split_run_at(job.run_at);
    let (deadline_at, deadline_ms) = split_deadline(job.deadline);
    let query = match &job.unique {
        None => sql::ENQUEUE,
        Some(_) => sql::ENQUEUE_UNIQUE,
    };
    let mut query = sqlx::query_as::<_, (JobId, Option<String>)>(query)
        .bind(&job.kind)
        .bind(&job.queue)
        .bind(job.priority)
        .bind(&job.payload)
        .bind(job.payload_version)
        .bind(job.max_attempts)
        .bind(run_at)
        .bind(delay_ms)
        .bind(deadline_at)
        .bind(deadline_ms)
        .bind(&job.tags)
        .bind(&job.tenant);
    if let Some(unique) = &job.unique {
        query = query
            .bind(&unique.key)
            .bind(unique.scope.as_str())
            .bind(unique.on_duplicate == OnDuplicate::Replace);
    }
    // $13 in enqueue.sql, $16 in enqueue_unique.sql: after the unique key's binds.
    let query = query.bind(&job.traceparent);
    let (id, outcome) = query
        .fetch_one(executor)
        .await
        .map_err(|e| refused(Some(&job.kind), "enqueue", e))?;
    match (&job.unique, outcome.as_deref()) {
        (Some(unique), Some("duplicate")) => Err(EnqueueError::Duplicate {
            kind: job.kind.clone(),
            key: unique.key.clone(),
            existing: id,
        }),
        _ => {
            job_core::record_enqueued(job);
            Ok(id)
        }
    }
}

/// Inserts many jobs through `executor` in one statement and returns their ids in input order.
/// The jobs are not checked here (see [`enqueue`]).
///
/// Jobs with a unique key are refused ([`EnqueueError::InvalidOption`] `unique_key`): each
/// duplicate needs its own answer, so enqueue them one by one.
pub async fn enqueue_many<'e, E: PgExecutor<'e>>(
    executor: E,
    jobs: &[NewJob],
) -> Result<Vec<JobId>, EnqueueError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    if jobs.iter().any(|j| j.unique.is_some()) {
        return Err(EnqueueError::InvalidOption {
            option: "unique_key",
            reason: "jobs with unique keys cannot be enqueued in bulk; enqueue them one by one"
                .into(),
        });
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
    let mut deadline_ats = Vec::with_capacity(n);
    let mut deadline_mss = Vec::with_capacity(n);
    let mut tags = Vec::with_capacity(n);
    let mut tenants = Vec::with_capacity(n);
    let mut traces = Vec::with_capacity(n);
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
        let (deadline_at, deadline_ms) = split_deadline(job.deadline);
        deadline_ats.push(deadline_at);
        deadline_mss.push(deadline_ms);
        tags.push(
            (!job.tags.is_empty()).then(|| serde_json::to_string(&job.tags).unwrap_or_default()),
        );
        tenants.push(job.tenant.as_deref());
        traces.push(job.traceparent.as_deref());
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
        .bind(deadline_ats)
        .bind(deadline_mss)
        .bind(tags)
        .bind(tenants)
        .bind(traces)
        .fetch_all(executor)
        .await
        .map_err(|e| refused(None, "enqueue_many", e))?;
    for job in jobs {
        job_core::record_enqueued(job);
    }
    // Rows are inserted in input order, so their identity ids ascend in input order; sorting
    // makes the answer independent of the order RETURNING happens to emit them in.
    ids.sort_unstable();
    Ok(ids)
}

/// What the database said when it refused a job: a refusal of the table's rules (the
/// `jobs_admission` trigger and the `jobs_*_check` constraints, SQLSTATE 23514) names its
/// column, and becomes the same error the Rust-side check gives; anything else is a storage
/// error. `kind` is the job's, when there is one job.
fn refused(kind: Option<&str>, statement: &'static str, error: sqlx::Error) -> EnqueueError {
    let pg = match &error {
        sqlx::Error::Database(db) => db.try_downcast_ref::<PgDatabaseError>(),
        _ => None,
    };
    // A time outside PostgreSQL's own range does not even bind: the parameter is named.
    if let Some(pg) = pg.filter(|pg| pg.code() == "22008") {
        let option = match pg.r#where() {
            Some(w) if w.ends_with("parameter $7") => Some("run_at"),
            Some(w) if w.ends_with("parameter $9") => Some("deadline"),
            _ => None,
        };
        if let Some(option) = option {
            return EnqueueError::InvalidOption {
                option,
                reason: format!("{} (PostgreSQL's own range)", pg.message()),
            };
        }
    }
    let Some(pg) = pg.filter(|pg| pg.code() == "23514") else {
        return Error::query(statement)(error).into();
    };
    let column = pg.column().map(str::to_owned).or_else(|| {
        pg.constraint()
            .and_then(|c| c.strip_prefix("jobs_")?.strip_suffix("_check"))
            .map(str::to_owned)
    });
    let option = match column.as_deref() {
        Some("kind") => "kind",
        Some("queue") => "queue",
        Some("payload") => "payload",
        Some("tags") => "tags",
        Some("tenant") => "tenant",
        Some("unique_key") => "unique_key",
        Some("run_at") => "run_at",
        Some("deadline") => "deadline",
        Some("priority") => "priority",
        Some("max_attempts") => "max_attempts",
        Some("payload_version") => "payload_version",
        _ => return Error::query(statement)(error).into(),
    };
    // "job row refused: `payload` is 5 bytes, over the limit of 4 bytes"
    let message = pg.message();
    let reason = message
        .split_once(&format!("`{option}` "))
        .map_or(message, |(_, reason)| reason);
    if let (Some(kind), "payload") = (kind, option) {
        let numbers: Vec<usize> = reason
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        if let ([size, limit], true) = (numbers.as_slice(), reason.contains("over the limit")) {
            return EnqueueError::PayloadTooLarge {
                kind: kind.to_owned(),
                size: *size,
                limit: *limit,
            };
        }
    }
    EnqueueError::InvalidOption {
        option,
        reason: reason.to_owned(),
    }
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

/// A deadline as the two binds of the insert statements: an absolute time, or a delay in
/// milliseconds from the database's now; both null for none.
fn split_deadline(deadline: Option<Deadline>) -> (Option<DateTime<Utc>>, Option<i64>) {
    match deadline {
        None => (None, None),
        Some(Deadline::At(at)) => (Some(at), None),
        Some(Deadline::In(delay)) => (None, Some(duration_millis(delay))),
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
    /// database's limit (`job.settings.payload_limit`, 1 MiB unless changed there) applies in
    /// any case; this one can only be tighter. None by default.
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
    /// [`job_core::current_traceparent`]).
    pub fn traceparent(mut self, traceparent: impl Into<String>) -> Self {
        self.options.traceparent = Some(traceparent.into());
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
    pub async fn enqueue<'e, E, I>(self, executor: E, jobs: I) -> Result<Vec<JobId>, EnqueueError>
    where
        E: PgExecutor<'e>,
        I: IntoIterator<Item = J>,
    {
        let rows = jobs
            .into_iter()
            .map(|job| {
                let limit = self.payload_limit.unwrap_or(usize::MAX);
                NewJob::build(&job, self.options.clone(), limit)
            })
            .collect::<Result<Vec<_>, _>>()?;
        enqueue_many(executor, &rows).await
    }
}
