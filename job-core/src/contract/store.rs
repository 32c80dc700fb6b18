//! The storage contract. A backend (PostgreSQL today) implements [`Store`]; the worker runtime
//! uses nothing else. The conformance suite in `job-testkit` defines what each method must do.

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::contract::report::{Report, ReportRequest};
use crate::model::error::{EnqueueError, StoreError};
use crate::model::job::JobId;
use crate::model::new_job::NewJob;
use crate::model::outcome::Outcome;
use crate::model::state::JobState;

/// The proof that a worker holds a job: its id and the token written by the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The job's id.
    pub id: JobId,
    /// The token the claim wrote; every guarded write matches on it.
    pub token: Uuid,
}

/// One kind a worker can run, as the claim sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimKind {
    /// The kind's name.
    pub kind: String,
    /// The newest payload version this worker decodes; newer rows are left alone.
    pub max_version: i32,
    /// The lease a claim of this kind takes.
    pub lease: Duration,
    /// The most jobs of this kind running at once across every worker (`None`: no limit).
    pub concurrency: Option<u32>,
    /// The most attempts of this kind starting per period across every worker (`None`: no
    /// limit). A claim counts each job it takes as a start.
    pub rate: Option<crate::RateLimit>,
}

/// The attempts of one kind that ended since its circuit breaker was last told
/// ([`Store::record_breakers`]), with the breaker's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakerCount {
    /// The kind.
    pub kind: String,
    /// Its breaker, as the worker has it (every worker of a kind must agree).
    pub breaker: crate::Breaker,
    /// Attempts that ended with an outcome written.
    pub attempts: u32,
    /// Of those, how many failed (a retry or a discard).
    pub failures: u32,
}

/// A circuit breaker that tripped: its kind is paused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tripped {
    /// The kind paused.
    pub kind: String,
    /// The reason stored with the pause.
    pub reason: String,
    /// When its cool-down ends.
    pub resume_at: DateTime<Utc>,
}

/// What to claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// The queue to claim from.
    pub queue: String,
    /// The kinds this worker has registered; rows of other kinds are never claimed.
    pub kinds: Vec<ClaimKind>,
    /// At most this many jobs.
    pub limit: u32,
    /// Recorded in `locked_by`.
    pub worker_id: String,
}

impl ClaimRequest {
    /// Refuses a request with a lease no store can take ([`InvalidClaim`], as a
    /// [refused](StoreError::is_refused) error): each kind's lease must be 1 ms (the finest
    /// PostgreSQL keeps) to [`MAX_DURATION`](crate::MAX_DURATION). A lease of less would claim
    /// jobs whose lease has already run out, for the rescuer to give back; one of more cannot be
    /// stored. Every store calls it before it claims; a worker's requests always pass
    /// (`WorkerBuilder::build` refuses leases under 30 ms or over `MAX_DURATION`).
    pub fn check(&self) -> Result<(), StoreError> {
        for kind in &self.kinds {
            if kind.lease < Duration::from_millis(1) || kind.lease > crate::MAX_DURATION {
                return Err(StoreError::refused(InvalidClaim {
                    kind: kind.kind.clone(),
                    lease: kind.lease,
                }));
            }
        }
        Ok(())
    }
}

/// A [`ClaimRequest`] a store refused ([`ClaimRequest::check`]); nothing was claimed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid claim request: the lease of kind `{kind}` must be 1ms to 100 years \
     (MAX_DURATION), got {lease:?}"
)]
pub struct InvalidClaim {
    /// The kind whose lease is out of bounds (the first such, in the request's order).
    pub kind: String,
    /// Its lease.
    pub lease: Duration,
}

/// A job the claim handed to this worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedJob {
    /// The lease now held.
    pub lease: Lease,
    /// The job's kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// Its priority.
    pub priority: i16,
    /// The payload as JSON text.
    pub payload: String,
    /// The version the payload was written with.
    pub payload_version: i32,
    /// This attempt's number, counting from 1.
    pub attempt: i32,
    /// Attempts in all.
    pub max_attempts: i32,
    /// Snoozes so far (a snooze does not count an attempt).
    pub snoozes: i32,
    /// How long it had been due (since its `run_at`) when the claim took it, by the
    /// database's clock: the first part of its queue wait.
    pub waited: Duration,
    /// The W3C `traceparent` it was enqueued under: its attempts join that trace.
    pub traceparent: Option<String>,
}

/// A lease to renew and how long to extend it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renewal {
    /// The lease held.
    pub lease: Lease,
    /// The new lease length from the database's now.
    pub extend_by: Duration,
    /// The execution has outlived its timeout (or being told to stop) by the worker's
    /// `stuck_after`: the store records since when (`JobRow::stuck_since`), for operators.
    pub stuck: bool,
}

impl Renewal {
    /// Refuses a renewal no store can take ([`InvalidRenewal`], as a
    /// [refused](StoreError::is_refused) error): `extend_by` must be 1 ms (the finest
    /// PostgreSQL keeps) to [`MAX_DURATION`](crate::MAX_DURATION), as a claim's lease must
    /// ([`ClaimRequest::check`]). One of less would renew nothing (a renewal never shortens a
    /// lease); one of more cannot be stored. Every store checks each renewal of a heartbeat
    /// before it renews any; a worker's always pass (its leases are a kind's lease, which
    /// `WorkerBuilder::build` bounds).
    pub fn check(&self) -> Result<(), StoreError> {
        if self.extend_by < Duration::from_millis(1) || self.extend_by > crate::MAX_DURATION {
            return Err(StoreError::refused(InvalidRenewal {
                lease: self.lease,
                extend_by: self.extend_by,
            }));
        }
        Ok(())
    }
}

/// A [`Renewal`] a store refused ([`Renewal::check`]); no lease of its heartbeat was renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid renewal of the lease of job {}: `extend_by` must be 1ms to 100 years \
     (MAX_DURATION), got {extend_by:?}",
    lease.id
)]
pub struct InvalidRenewal {
    /// The lease whose renewal is out of bounds (the first such, in the heartbeat's order).
    pub lease: Lease,
    /// Its `extend_by`.
    pub extend_by: Duration,
}

/// A lease given back without an outcome (see [`Store::release`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    /// The lease held.
    pub lease: Lease,
    /// How long the job's handler ran before the worker stopped it (a shutdown), or `None`
    /// when it never started (a prefetched job given back). An execution that ran leaves an
    /// entry of class `released` in the job's history, not counted as an attempt (a bounded
    /// number of times: see [`Store::release`]).
    pub ran_for: Option<Duration>,
}

impl Release {
    /// A claimed job whose handler never started.
    pub fn unstarted(lease: Lease) -> Self {
        Release {
            lease,
            ran_for: None,
        }
    }

    /// An execution that ran for `ran_for` and was stopped.
    pub fn interrupted(lease: Lease, ran_for: Duration) -> Self {
        Release {
            lease,
            ran_for: Some(ran_for),
        }
    }
}

/// How long a [`Store::heartbeat`] may wait, in all, for rows another transaction holds a
/// moment (recording a step, a finalize) before it reports them [`busy`](HeartbeatReport::busy).
/// The lease keeper gives each heartbeat its period plus this, so that such a wait never
/// costs the leases the heartbeat did renew, however short the period.
pub const HEARTBEAT_BUSY_WAIT: Duration = Duration::from_millis(50);

/// What a heartbeat found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeartbeatReport {
    /// Leases that could not be renewed: the job was rescued, released or finalized elsewhere.
    /// Each names its token as well as its job: of two leases of one job that a worker sends
    /// (a give-back whose answer was lost, then the job claimed again), only the older is lost.
    pub lost: Vec<Lease>,
    /// Leases neither renewed nor found lost, because another transaction held the job's row
    /// longer than the heartbeat waits for it ([`HEARTBEAT_BUSY_WAIT`] in all, enough for a
    /// step being recorded or a finalize): typically the handler's own
    /// `job_postgres::complete_in` transaction before its commit. A heartbeat does not wait
    /// longer, so one open transaction cannot hold up the other leases of the worker; the next
    /// heartbeat asks again, and self-fencing stops the execution if its lease cannot be
    /// renewed in time. Stores that cannot tell (SQLite, whose writers queue on one lock)
    /// leave it empty.
    pub busy: Vec<Lease>,
    /// Leases renewed whose job's cancellation was requested.
    pub cancel_requested: Vec<Lease>,
}

/// A guarded finalize: apply `outcome` only while `lease` is still held.
#[derive(Debug, Clone, PartialEq)]
pub struct Finalize {
    /// The lease the outcome was produced under.
    pub lease: Lease,
    /// What happened.
    pub outcome: Outcome,
    /// The job's result as compact JSON (see `JobContext::set_result`), stored when the
    /// outcome is [`Outcome::Complete`] and ignored otherwise.
    pub result: Option<String>,
}

impl Finalize {
    /// `outcome` for the job under `lease`, without a result.
    pub fn new(lease: Lease, outcome: Outcome) -> Self {
        Finalize {
            lease,
            outcome,
            result: None,
        }
    }
}

/// What a guarded finalize did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finalized {
    /// The outcome was written.
    Applied,
    /// The outcome, a discard, was written as a cancellation: an operator had asked for the
    /// job to be cancelled (a worker hears of a request only at its next heartbeat), and a
    /// dead letter would fire the compensation the cancel did not ask for and wait for a
    /// redrive. Written, as `Applied` is; counted as cancelled.
    Cancelled,
    /// The lease had been lost: nothing was written.
    LeaseLost,
    /// Another transaction holds the job's row (an application's or an operator's, left
    /// open): nothing was written, the lease is still this worker's, and the outcome is to
    /// be written again later. A store never waits for such a row, so that one held row
    /// holds up no other outcome.
    Busy,
}

impl Finalized {
    /// Whether the outcome was written (as given, or as a cancellation).
    pub fn written(&self) -> bool {
        matches!(self, Finalized::Applied | Finalized::Cancelled)
    }
}

/// What a rescue pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rescued {
    /// Expired leases put back to `retryable`.
    pub retried: u64,
    /// Expired leases whose attempts were exhausted, now `discarded`.
    pub discarded: u64,
    /// The jobs rescued, each once, in the order the store rescued them (by id within one
    /// statement): as many as `retried + discarded`.
    pub jobs: Vec<RescuedJob>,
}

/// One job a rescue took back from a lease that had expired.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RescuedJob {
    /// The job.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// The worker whose lease expired (its `locked_by`), when the claim recorded one.
    pub worker: Option<String>,
    /// The state it went to: [`JobState::Retryable`], or [`JobState::Discarded`] when its
    /// attempts were exhausted.
    pub state: JobState,
}

impl Rescued {
    /// Adds another statement's rescue to this one.
    pub fn add(&mut self, other: Rescued) {
        self.retried += other.retried;
        self.discarded += other.discarded;
        self.jobs.extend(other.jobs);
    }
}

/// A store's schema without migrations this build's statements are written for
/// ([`Store::schema_lag`]): a database not yet migrated to this release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaLag {
    /// This build's first migration the database has not recorded: its version.
    pub first_missing: u32,
    /// That migration's name.
    pub first_missing_name: String,
    /// How many of this build's migrations the database has not recorded.
    pub missing: usize,
    /// The latest migration the database has recorded (0: none).
    pub recorded: u32,
}

impl SchemaLag {
    /// The lag of a database that recorded the migrations `recorded` behind a build whose
    /// migrations are `build` (version and name, in order); `None` when it has them all.
    /// Versions the build does not know (a newer release's) are no lag.
    pub fn between<'a>(
        build: impl IntoIterator<Item = (u32, &'a str)>,
        recorded: &[u32],
    ) -> Option<SchemaLag> {
        let mut missing = build.into_iter().filter(|(v, _)| !recorded.contains(v));
        let (first_missing, name) = missing.next()?;
        Some(SchemaLag {
            first_missing,
            first_missing_name: name.to_owned(),
            missing: 1 + missing.count(),
            recorded: recorded.iter().copied().max().unwrap_or(0),
        })
    }
}

impl std::fmt::Display for SchemaLag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the job schema lacks migration {} `{}`",
            self.first_missing, self.first_missing_name
        )?;
        if self.missing > 1 {
            write!(f, " and {} after it", self.missing - 1)?;
        }
        write!(
            f,
            " (latest recorded: {}), which this build's statements are written for",
            self.recorded
        )
    }
}

/// One recorded failure of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptError {
    /// The attempt that failed.
    pub attempt: i32,
    /// When it was recorded (database time).
    pub at: DateTime<Utc>,
    /// How it was classified (`error`, `timeout`, `panic`, `terminal`, `poison`, ...).
    pub class: String,
    /// The error's message.
    pub message: String,
}

/// One bounded prune statement: see [`Store::prune`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneRequest {
    /// Completed jobs finished longer ago than this are deleted.
    pub completed_retention: Duration,
    /// Cancelled jobs finished longer ago than this are deleted.
    pub cancelled_retention: Duration,
    /// At most this many rows.
    pub batch: u32,
}

/// What one expire statement did: see [`Store::expire`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Expired {
    /// Waiting jobs past their deadline, now `discarded`.
    pub discarded: u64,
    /// Waiting jobs whose cancellation was requested, now `cancelled`.
    pub cancelled: u64,
}

/// A job row as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    /// Its id.
    pub id: JobId,
    /// Its kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// Its priority.
    pub priority: i16,
    /// Its state.
    pub state: JobState,
    /// The payload as JSON. A stored value serde_json cannot read (nested past its 128
    /// levels, which the Rust doors refuse but SQL can store) reads as its text, in a JSON
    /// string, so that its row and every listing holding it stay readable; likewise
    /// `progress` and `result`.
    pub payload: serde_json::Value,
    /// The payload's version.
    pub payload_version: i32,
    /// Attempts started and counted.
    pub attempt: i32,
    /// Attempts in all.
    pub max_attempts: i32,
    /// When it may next run.
    pub run_at: DateTime<Utc>,
    /// The current lease's token, while running.
    pub lock_token: Option<Uuid>,
    /// When the current lease expires, while running.
    pub locked_until: Option<DateTime<Utc>>,
    /// The worker holding the lease, while running.
    pub locked_by: Option<String>,
    /// Whether cancellation was requested.
    pub cancel_requested: bool,
    /// Every failure so far, oldest first.
    pub errors: Vec<AttemptError>,
    /// When it was enqueued.
    pub created_at: DateTime<Utc>,
    /// When it reached a terminal state.
    pub finalized_at: Option<DateTime<Utc>>,
    /// The latest start, if any.
    pub deadline: Option<DateTime<Utc>>,
    /// Its unique key, if any.
    pub unique_key: Option<String>,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its tenant.
    pub tenant: Option<String>,
    /// Since when its running execution has been reported stuck: it outlived its timeout
    /// (or being told to stop) by the worker's `stuck_after` and still holds its lease.
    pub stuck_since: Option<DateTime<Utc>>,
    /// The latest progress its handler reported (`JobContext::progress`), as JSON:
    /// `{"fraction": 0.4, "message": ".."}` or the value given to
    /// `JobContext::progress_value`. Written with a heartbeat, so it lags the handler by up
    /// to a third of the lease; kept when the job finishes.
    pub progress: Option<serde_json::Value>,
    /// When that progress was recorded (database time).
    pub progress_at: Option<DateTime<Utc>>,
    /// The W3C `traceparent` of the code that enqueued it.
    pub traceparent: Option<String>,
    /// The team that owns its kind (`#[job(owner = "..")]`), as recorded by the workers that
    /// run the kind.
    pub owner: Option<String>,
    /// What the attempt that completed it returned (`JobContext::set_result`, or a `#[job]`
    /// function's `Ok` value), as JSON; `None` until then, and for jobs that return `()`.
    pub result: Option<serde_json::Value>,
    /// Its ordering key, if any: jobs with the same key run one at a time, in enqueue order.
    pub ordering_key: Option<String>,
    /// Its rate key, if any (see [`NewJob::rate_key`](crate::NewJob::rate_key)).
    pub rate_key: Option<String>,
}

/// Wake-ups from the store: the name of a queue that has new work, or the empty name (which no
/// queue has) when the store cannot tell which queue: every queue then looks for work.
pub type Wakeups = mpsc::Receiver<String>;

/// The storage contract.
///
/// Every write that needs a lease is guarded by `(id, lock_token)` and says so; a lost lease
/// is a typed result, never an error. Times that decide leases are the database's, never the
/// worker's clock.
pub trait Store: Clone + Send + Sync + 'static {
    /// Inserts one job and returns its id.
    ///
    /// A job the store refuses is an [`EnqueueError`] naming why, and nothing is written:
    /// [`EnqueueError::InvalidOption`] or [`EnqueueError::PayloadTooLarge`] for a job that
    /// breaks the rules of [`NewJob::validate`], [`EnqueueError::Duplicate`] (with the
    /// holder's id) when an active job of the kind holds its unique key in its scope, decided
    /// by the database and never by a pre-check, and [`EnqueueError::Store`] when the store
    /// failed. With [`OnDuplicate::Replace`](crate::OnDuplicate::Replace) a waiting holder is
    /// replaced instead (its payload, run time and deadline) and its id returned.
    fn enqueue(&self, job: NewJob) -> impl Future<Output = Result<JobId, EnqueueError>> + Send;

    /// Inserts many jobs in one round trip and returns their ids in order; all or none.
    /// Jobs with unique keys are refused ([`EnqueueError::InvalidOption`] `unique_key`).
    fn enqueue_many(
        &self,
        jobs: Vec<NewJob>,
    ) -> impl Future<Output = Result<Vec<JobId>, EnqueueError>> + Send;

    /// Claims up to `request.limit` due jobs of the given kinds in one statement, ordered by
    /// priority, run time and id, skipping rows other claimers hold. Each claim counts an
    /// attempt and writes a fresh lease token. A `scheduled` or `retryable` job is due once
    /// its run time has come and, in a store that stages ([`stage_due`](Store::stage_due)),
    /// once it has been staged; an `available` job is due at once. A request with a lease
    /// out of bounds is refused before anything is read ([`ClaimRequest::check`]).
    fn claim(
        &self,
        request: &ClaimRequest,
    ) -> impl Future<Output = Result<Vec<ClaimedJob>, StoreError>> + Send;

    /// Renews many leases in one statement, guarded by `(id, lock_token)` and `running`, and
    /// records which of them are stuck ([`Renewal::stuck`]; cleared when not). A heartbeat
    /// with a renewal out of bounds is refused before anything is renewed
    /// ([`Renewal::check`]).
    fn heartbeat(
        &self,
        renewals: &[Renewal],
    ) -> impl Future<Output = Result<HeartbeatReport, StoreError>> + Send;

    /// Applies many outcomes in one statement, each guarded by `(id, lock_token)` and
    /// `running`. Returns one [`Finalized`] per item, in order. Each error message is stored
    /// as [`storable_text`](crate::storable_text) makes it (at most
    /// [`MAX_ERROR_MESSAGE`](crate::MAX_ERROR_MESSAGE) bytes, no NUL), and the history keeps
    /// its first and latest entries, [`MAX_ERROR_HISTORY`](crate::MAX_ERROR_HISTORY) in all.
    /// When the database refuses the batch for what one item holds, the error is
    /// [`StoreError::is_refused`], so the caller can write the items one at a time.
    fn finalize(
        &self,
        batch: &[Finalize],
    ) -> impl Future<Output = Result<Vec<Finalized>, StoreError>> + Send;

    /// Recovers up to `limit` jobs whose lease expired (`running` and `locked_until` before the
    /// database's now), and only those: back to `retryable` with the attempt counted, or to
    /// `discarded` when attempts are exhausted and the last one started (see
    /// [`record_start`](Store::record_start)): a last attempt that never started is retried,
    /// not counted, with no history entry and its `UntilStarted` key held again on a first
    /// attempt, as [`release`](Store::release) gives back an unstarted job. A rescued job
    /// keeps its `run_at` (it was due when it was claimed), so it does not queue behind jobs
    /// that became due after it.
    fn rescue_expired(
        &self,
        limit: u32,
    ) -> impl Future<Output = Result<Rescued, StoreError>> + Send;

    /// [`rescue_expired`](Store::rescue_expired) as the [`Rescuer`](crate::Rescuer) runs it:
    /// `checked_at` is this process's wall clock when the rescuer last found it had not jumped.
    /// A store whose time is this machine's wall clock (SQLite) rescues only leases that had
    /// expired by then as well, so that a jump of the clock after the check (while the rescue
    /// waited for the database's lock, or between its batches) cannot make a live lease look
    /// expired; a lease that ran out since is left for the next pass. A store with a clock of
    /// its own (PostgreSQL's server) need not look at it: the default ignores it.
    fn rescue_expired_checked(
        &self,
        limit: u32,
        checked_at: std::time::SystemTime,
    ) -> impl Future<Output = Result<Rescued, StoreError>> + Send {
        let _ = checked_at;
        self.rescue_expired(limit)
    }

    /// Makes up to `limit` due jobs claimable: `scheduled` and `retryable` jobs whose run time
    /// has come become `available`, keeping their run time (their place in the claim's
    /// order), and the queues they are in are woken. Returns how many it staged. A store
    /// whose claim reads only `available` jobs (so that what a claim reads follows what it
    /// returns) does this here; every worker calls it every poll interval (the stager). The
    /// default stages nothing, for a store whose claim takes due jobs of every waiting state.
    fn stage_due(&self, limit: u32) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let _ = limit;
        async { Ok(0) }
    }

    /// Records that the execution holding `lease` starts its handler now, guarded by
    /// `(id, lock_token)`, `running` and the lease's end; false when the lease is no longer
    /// held or has run out (the job must not run). The worker calls it before anything of a
    /// job's last attempt runs, so that [`rescue_expired`](Store::rescue_expired) discards an
    /// expired last attempt only when it started: one claimed and never started (a worker
    /// killed while the job waited in its prefetch buffer) goes back to `retryable` with its
    /// attempt not counted. The default records nothing and answers true, for a store whose
    /// rescuer counts every expired attempt.
    fn record_start(&self, lease: Lease) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let _ = lease;
        std::future::ready(Ok(true))
    }

    /// Which of this build's migrations the store's schema lacks, if any. A worker asks
    /// before it claims or runs its maintenance, and waits while the answer is a lag or an
    /// error (see [`Worker::start`](crate::Worker::start)): a worker deployed before the
    /// database was migrated would otherwise run statements written for columns and functions
    /// that are not there yet (its claims fail, or worse, a last attempt is given back again
    /// and again). A store that cannot tell (a role not granted the read of its books) answers
    /// none, so that it is not held for ever. The default answers none.
    fn schema_lag(&self) -> impl Future<Output = Result<Option<SchemaLag>, StoreError>> + Send {
        std::future::ready(Ok(None))
    }

    /// Gives leases back without an outcome, guarded by `(id, lock_token)`: the jobs become
    /// `available` at once (keeping their place: `run_at` is not moved later) and the attempt
    /// is not counted. A release of an execution that ran ([`Release::ran_for`]) appends an
    /// entry of class `released` to the job's history and counts an interruption; a job given
    /// back uncounted [`MAX_REFUNDED_INTERRUPTIONS`](crate::MAX_REFUNDED_INTERRUPTIONS) times
    /// since its enqueue or last redrive is not released after an execution that ran (its
    /// lease runs out, and the rescuer counts the attempt). Returns how many were released.
    fn release(&self, releases: &[Release])
        -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Records the latest progress (JSON text, at most [`MAX_PROGRESS`](crate::MAX_PROGRESS)
    /// bytes) of many running jobs in one statement, each guarded by `(id, lock_token)` and
    /// `running`, with the database's time; a lease lost meanwhile records nothing. Returns
    /// how many were recorded. The lease keeper calls it after a heartbeat when handlers
    /// reported progress since the last one. The default records nothing.
    fn save_progress(
        &self,
        progress: &[(Lease, String)],
    ) -> impl Future<Output = Result<u64, StoreError>> + Send {
        let _ = progress;
        std::future::ready(Ok(0))
    }

    /// One pass of the reporter of database-derived gauges, which one worker at a time plays:
    /// records `request.owners`, then takes the reporter's role for `request.holder` (or keeps
    /// it) until `request.hold_for` from the database's now, unless another holder has it and
    /// its time has not run out. When `holder` has the role, returns the [`Report`], read so
    /// that its cost does not grow with finished jobs; otherwise `None`. The default has no
    /// report.
    fn report(
        &self,
        request: &ReportRequest,
    ) -> impl Future<Output = Result<Option<Report>, StoreError>> + Send {
        let _ = request;
        std::future::ready(Ok(None))
    }

    /// Records what the database must know of the kinds a worker runs before it claims them:
    /// each kind's compensating job, or that it has none ([`JobOptions::compensate`]). The
    /// default records nothing (a store without compensation).
    ///
    /// [`JobOptions::compensate`]: crate::JobOptions::compensate
    fn register_kinds(
        &self,
        kinds: &[(String, Option<crate::Compensate>)],
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = kinds;
        std::future::ready(Ok(()))
    }

    /// Adds ended attempts to the kinds' circuit breakers, trips those whose failure rate over
    /// their window reached their threshold (pausing the kind with the reason until its
    /// cool-down ends, see [`Breaker`](crate::Breaker)), and returns the ones this call
    /// tripped. A store without breakers refuses (the default), and the worker refuses to start
    /// a kind with a breaker on it ([`Store::supports_flow_control`]).
    fn record_breakers(
        &self,
        counts: &[BreakerCount],
    ) -> impl Future<Output = Result<Vec<Tripped>, StoreError>> + Send {
        let _ = counts;
        std::future::ready(Err(StoreError::refused(
            "this store does not support circuit breakers",
        )))
    }

    /// Whether this store enforces [`ClaimKind::rate`] and
    /// [`record_breakers`](Self::record_breakers). The worker refuses to start a kind with a rate limit or a
    /// breaker on a store that does not. Defaults to false.
    fn supports_flow_control(&self) -> bool {
        false
    }

    /// Reads one job.
    fn get(&self, id: JobId) -> impl Future<Output = Result<Option<JobRow>, StoreError>> + Send;

    /// A handle on the same database that shares no connection with `self` or with any
    /// other handle: at most `connections` of its own, opened on first use on the Tokio
    /// runtime this is called from, named `purpose` where the database shows it (PostgreSQL:
    /// `application_name`). The worker runs its own statements through such handles, one for
    /// its lease keeper (on a thread of its own) and one for the rest, so that nothing a
    /// handler does with the application's connections can delay or corrupt them. A store
    /// without connections of its own returns a clone, the default.
    fn dedicated(&self, purpose: &str, connections: u32) -> Self {
        let _ = (purpose, connections);
        self.clone()
    }

    /// Closes the connections of a handle made by [`dedicated`](Self::dedicated), waiting for
    /// them to be given back; does nothing on any other handle (the default).
    fn close(&self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// Subscribes to new-work notifications. Wake-ups are hints: a worker also polls, so a
    /// backend without notifications may return a receiver that never yields.
    fn listen(&self) -> impl Future<Output = Result<Wakeups, StoreError>> + Send;

    /// How many connections [`listen`](Self::listen) holds apart from the handle's own (at
    /// most `connections` of [`dedicated`](Self::dedicated)): a worker counts them in its
    /// budget, and gives its dedicated handle that many fewer. None by default.
    fn listen_connections(&self) -> u32 {
        0
    }

    // --- lifecycle: unique jobs, cancellation, dead letters, pausing, pruning, stats ---

    /// Deletes up to `request.batch` jobs finished longer ago than their state's retention
    /// (`completed`, `cancelled`; never `discarded`, kept until purged). Returns how many.
    fn prune(&self, request: &PruneRequest)
        -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Ends up to `limit` waiting jobs that must not run: past their deadline → `discarded`
    /// with an `expired` error naming it; cancellation requested (a running job that was then
    /// retried, snoozed or rescued) → `cancelled`. Never touches a running job.
    fn expire(&self, limit: u32) -> impl Future<Output = Result<Expired, StoreError>> + Send;

    /// Reclaims the dead row versions that claims, finalizes and prunes leave behind, when the
    /// database would not do it by itself (PostgreSQL: autovacuum off for the server or the
    /// jobs table) and enough rows changed since the last time; refreshes the planner's
    /// statistics of a table the database does vacuum that grew far past the size they were
    /// taken at (PostgreSQL: `ANALYZE`, so that plans made on an emptier table are made
    /// again). Returns whether it ran either. The default does nothing.
    fn vacuum(&self) -> impl Future<Output = Result<bool, StoreError>> + Send {
        std::future::ready(Ok(false))
    }

    // --- execution: durable steps, completion in the caller's transaction ---

    /// Every step output recorded for the job of `lease`, by step name, as JSON text. A read:
    /// not guarded (the guard is on the write).
    fn load_steps(
        &self,
        lease: &Lease,
    ) -> impl Future<Output = Result<std::collections::HashMap<String, String>, StoreError>> + Send;

    /// The step outputs recorded for the job of `lease`, by step name, in name order until
    /// `max_bytes` of output text would be passed, and whether that is all of them (`false`:
    /// the others are read one at a time with [`load_step`](Self::load_step)). What an attempt
    /// keeps in memory ([`MAX_LOADED_STEPS`](crate::MAX_LOADED_STEPS)): a job may record many
    /// steps of up to 1 MiB each. The default loads every one through
    /// [`load_steps`](Self::load_steps).
    fn load_steps_up_to(
        &self,
        lease: &Lease,
        max_bytes: usize,
    ) -> impl Future<Output = Result<(std::collections::HashMap<String, String>, bool), StoreError>> + Send
    {
        let _ = max_bytes;
        async move { Ok((self.load_steps(lease).await?, true)) }
    }

    /// The output recorded for step `name` of the job of `lease`, if any. The default reads
    /// every step through [`load_steps`](Self::load_steps).
    fn load_step(
        &self,
        lease: &Lease,
        name: &str,
    ) -> impl Future<Output = Result<Option<String>, StoreError>> + Send {
        async move { Ok(self.load_steps(lease).await?.remove(name)) }
    }

    /// Records `output` (JSON text) as the step `name` of the job of `lease`, guarded by
    /// `(id, lock_token)` and `running`: [`Finalized::LeaseLost`] means nothing was recorded.
    /// A name already recorded keeps its first output (and is `Applied`).
    fn save_step(
        &self,
        lease: &Lease,
        name: &str,
        output: &str,
    ) -> impl Future<Output = Result<Finalized, StoreError>> + Send;
}

/// How long one attempt may take before its lease must have been renewed: used by tests
/// and stores alike to turn a `Duration` into whole milliseconds without overflow.
pub fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
