//! What a handler knows about the attempt it runs.

use std::any::{type_name, Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::attempt::step::{AttemptHooks, StepCache};
use crate::contract::store::Lease;
use crate::model::attempt_info::{AttemptInfo, StopReason};
use crate::model::error::JobError;
use crate::model::job::JobId;

/// Application state registered on a worker (`WorkerBuilder::state`), looked up by type.
#[derive(Default, Clone)]
pub struct Extensions {
    map: HashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl Extensions {
    /// An empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a value, replacing any earlier one of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) {
        self.map.insert(TypeId::of::<T>(), Arc::new(value));
    }

    /// The value of type `T`, if one was added.
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.map
            .get(&TypeId::of::<T>())
            .and_then(|v| v.downcast_ref::<T>())
    }
}

/// Sets what a `#[job]` function returned as the job's result; `()` sets none. Used by the
/// macro's generated code; not a public API.
#[doc(hidden)]
pub fn __set_returned_result<T: serde::Serialize + 'static>(
    ctx: &JobContext,
    value: &T,
) -> Result<(), JobError> {
    if TypeId::of::<T>() == TypeId::of::<()>() {
        return Ok(());
    }
    ctx.set_result(value)
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.map.len())
            .finish()
    }
}

/// What tells an execution to stop, and why: shared by its context and the runtime.
///
/// Behind one `Arc`: it is cloned and dropped several times per job, and a cancellation
/// token's own clone and drop each take a lock.
#[derive(Debug, Clone, Default)]
pub(crate) struct StopSignal(Arc<Stop>);

#[derive(Debug, Default)]
struct Stop {
    token: CancellationToken,
    reason: OnceLock<StopReason>,
}

impl StopSignal {
    fn with_token(token: CancellationToken) -> Self {
        StopSignal(Arc::new(Stop {
            token,
            reason: OnceLock::new(),
        }))
    }

    /// Tells the execution to stop, for `reason` unless an earlier stop gave one.
    pub(crate) fn stop(&self, reason: StopReason) {
        let _ = self.0.reason.set(reason);
        self.0.token.cancel();
    }
}

/// Handed to every handler: the job's identity, a cancellation signal and application state.
#[derive(Clone)]
pub struct JobContext {
    info: Arc<AttemptInfo>,
    lease: Lease,
    state: Arc<Extensions>,
    stop: StopSignal,
    hooks: Option<Arc<dyn AttemptHooks>>,
    steps: Arc<StepCache>,
    /// Blocking work started through [`JobContext::blocking`], which the execution outlasts.
    work: TaskTracker,
    /// Set when a durable step's output could not be stored: the attempt's outcome is then a
    /// discard of class `step_unstorable` with this message, whatever the handler returns.
    unstorable_step: Arc<OnceLock<String>>,
    /// The attempt's result and what it logged (one allocation for both).
    notes: Arc<Notes>,
}

/// What an attempt's handler left with its context.
#[derive(Debug, Default)]
struct Notes {
    /// The attempt's result as compact JSON, set by [`JobContext::set_result`].
    result: Mutex<Option<String>>,
    /// Whether a progress report not stored was logged at WARN this attempt: the next ones
    /// are logged at DEBUG (a handler reporting every row logged a warning per row).
    progress_warned: AtomicBool,
    /// Set by [`JobContext::finalized_in_transaction`]: a durable step that would have to run
    /// is refused from then on (see [`JobContext::step`]).
    finalized_in_transaction: AtomicBool,
}

impl JobContext {
    /// A context for one attempt. The worker builds these; the testkit builds them for inline
    /// execution.
    pub fn new(
        info: AttemptInfo,
        lease: Lease,
        state: Arc<Extensions>,
        cancel: CancellationToken,
    ) -> Self {
        JobContext {
            info: Arc::new(info),
            lease,
            state,
            stop: StopSignal::with_token(cancel),
            hooks: None,
            steps: Arc::new(StepCache::new()),
            work: TaskTracker::new(),
            unstorable_step: Arc::default(),
            notes: Arc::default(),
        }
    }

    /// The worker's context for one attempt: as [`JobContext::new`], but sharing the worker's
    /// `info` rather than a copy of it, and sharing `stop` with the runtime, which fires it
    /// (with a reason) to stop the execution (no token of its own built only to be replaced:
    /// allocations saved on every job).
    pub(crate) fn for_worker(
        info: Arc<AttemptInfo>,
        lease: Lease,
        state: Arc<Extensions>,
        stop: StopSignal,
    ) -> Self {
        JobContext {
            info,
            lease,
            state,
            stop,
            hooks: None,
            steps: Arc::new(StepCache::new()),
            work: TaskTracker::new(),
            unstorable_step: Arc::default(),
            notes: Arc::default(),
        }
    }

    /// The facts of this attempt.
    pub(crate) fn info(&self) -> &AttemptInfo {
        &self.info
    }

    /// The signal that stops this execution, for the runtime to fire.
    pub(crate) fn stop_signal(&self) -> &StopSignal {
        &self.stop
    }

    /// Ends the attempt, whatever the handler returns, as a discard of class
    /// `step_unstorable` with `message` (the first one given counts).
    pub(crate) fn mark_step_unstorable(&self, message: String) {
        let _ = self.unstorable_step.set(message);
    }

    /// The message of a step whose output could not be stored, if one could not.
    pub(crate) fn unstorable_step(&self) -> Option<&str> {
        self.unstorable_step.get().map(String::as_str)
    }

    /// Connects the context to the runtime: where durable steps are recorded, fault points,
    /// and the news a handler gives (see [`AttemptHooks`]). The worker does this; the
    /// testkit's inline `perform` connects an in-memory version.
    pub fn with_hooks(mut self, hooks: Arc<dyn AttemptHooks>) -> Self {
        self.hooks = Some(hooks);
        self
    }

    pub(crate) fn hooks(&self) -> Option<&dyn AttemptHooks> {
        self.hooks.as_deref()
    }

    pub(crate) fn steps(&self) -> &StepCache {
        &self.steps
    }

    /// The blocking work this attempt started through [`JobContext::blocking`].
    pub(crate) fn work(&self) -> &TaskTracker {
        &self.work
    }

    /// Runs blocking code (synchronous I/O, a CPU-heavy computation, a C library) on Tokio's
    /// blocking thread pool and returns its result, leaving the runtime's threads free.
    ///
    /// The attempt's lease covers the closure to its very end: when the attempt times out,
    /// loses its lease, is cancelled or is stopped by a shutdown, the handler is dropped, but
    /// the worker keeps the lease held (and renewed) and the slot taken until every closure
    /// started here has returned, and writes the attempt's outcome only then. So a retry of
    /// the job never runs beside blocking work of an earlier attempt. A closure cannot be
    /// interrupted: check [`is_cancelled`](Self::is_cancelled) (on a clone of the context)
    /// between pieces of long work. One still running its attempt's timeout plus the
    /// worker's `stuck_after` past is reported stuck.
    ///
    /// A panic in the closure resumes in the handler (the attempt fails as a panic). Called
    /// after the attempt ended (from a task the handler spawned, holding a clone of the
    /// context), it panics without running the closure.
    ///
    /// ```
    /// # use job_core::{JobContext, JobError};
    /// # fn render_pdf(_: i64) -> Vec<u8> { Vec::new() }
    /// async fn perform(ctx: JobContext, invoice: i64) -> Result<(), JobError> {
    ///     let pdf = ctx.blocking(move || render_pdf(invoice)).await;
    ///     # let _ = pdf;
    ///     Ok(())
    /// }
    /// ```
    pub async fn blocking<F, R>(&self, f: F) -> R
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        // Counted before the check, so that the executor, which closes the tracker and then
        // waits for what it holds, either waits for this closure or has closed it out.
        let token = self.work.token();
        if self.work.is_closed() {
            drop(token);
            panic!(
                "JobContext::blocking called after attempt {} of job {} ended (a context moved \
                 into a task that outlived its handler): the closure would run beside the job's \
                 next attempt, so it is not run",
                self.info.attempt, self.info.id
            );
        }
        // In the attempt's span: what the closure logs carries the job's kind, id, attempt and
        // queue, and what it enqueues joins the job's trace.
        let span = tracing::Span::current();
        let task = tokio::task::spawn_blocking(move || {
            let _running = token;
            span.in_scope(f)
        });
        match task.await {
            Ok(value) => value,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("blocking work of job {} could not run: {e}", self.info.id),
        }
    }

    /// Sets the job's result: stored with the job when this attempt completes it (and only
    /// then), readable through `Admin` (`JobRow::result`) and by the application. A `#[job]`
    /// function that returns `Result<T, E>` with a `T` other than `()` sets it from its return
    /// value; a handler may also call this itself. The last value set before the handler
    /// returns counts.
    ///
    /// The value is stored as compact JSON, at most [`MAX_RESULT`](crate::MAX_RESULT) bytes,
    /// without a NUL character or, in raw JSON text (a `serde_json::value::RawValue`), a lone
    /// surrogate escape such as `"\ud800"` (neither of which PostgreSQL's `jsonb` can hold),
    /// and nested at most [`MAX_JSON_DEPTH`](crate::MAX_JSON_DEPTH) levels (serde_json reads
    /// no deeper, so no one could read it back). A value that does not serialize or breaks a rule is refused
    /// with a terminal [`JobError`] naming it:
    /// returned with `?`, the job is discarded with that message rather than retried, since
    /// its effects have happened.
    ///
    /// ```
    /// # use job_core::{JobContext, JobError};
    /// async fn perform(ctx: JobContext, invoice: i64) -> Result<(), JobError> {
    ///     ctx.set_result(&serde_json::json!({ "invoice": invoice, "charged_cents": 1250 }))?;
    ///     Ok(())
    /// }
    /// ```
    pub fn set_result<T: serde::Serialize + ?Sized>(&self, value: &T) -> Result<(), JobError> {
        let json = crate::model::result::result_json(value).map_err(JobError::terminal)?;
        *self.notes.result.lock().unwrap_or_else(|e| e.into_inner()) = Some(json);
        Ok(())
    }

    /// Whether the handler finalized this job in its own transaction
    /// ([`finalized_in_transaction`](Self::finalized_in_transaction)).
    pub(crate) fn finalized_by_handler(&self) -> bool {
        self.notes
            .finalized_in_transaction
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// The result set by [`set_result`](Self::set_result), as compact JSON.
    pub fn result(&self) -> Option<String> {
        self.notes
            .result
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Tells the runtime that the handler finalized this job in its own transaction, guarded
    /// by [`lease`](Self::lease) (`job_postgres::complete_in` calls this once its guarded
    /// update matched). The worker still sends the handler's outcome, in case that
    /// transaction rolls back; when it finds the lease gone it is not counted as lost, and
    /// neither is a heartbeat that finds the job finished.
    pub fn finalized_in_transaction(&self) {
        self.notes
            .finalized_in_transaction
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(hooks) = &self.hooks {
            hooks.finalized_in_transaction();
        }
    }

    /// Reports how far the attempt got: a `fraction` from 0 to 1 (clamped; NaN for none) and
    /// a short `message` (cut to [`MAX_PROGRESS_MESSAGE`](crate::MAX_PROGRESS_MESSAGE)
    /// bytes). Stored with the job as `{"fraction": .., "message": ..}` and readable through
    /// `Admin` (`JobRow::progress`). Cheap enough to call every second or more often: the
    /// worker keeps the latest report in memory and writes it with its next heartbeat (every
    /// third of the lease), one statement for all of its jobs. Outside a worker it does
    /// nothing.
    ///
    /// ```
    /// # use job_core::{JobContext, JobError};
    /// async fn reindex(ctx: JobContext, pages: u32) -> Result<(), JobError> {
    ///     for page in 0..pages {
    ///         // ... index one page ...
    ///         ctx.progress(f64::from(page + 1) / f64::from(pages), &format!("page {}", page + 1));
    ///     }
    ///     Ok(())
    /// }
    /// ```
    pub fn progress(&self, fraction: f64, message: &str) {
        if let Some(hooks) = &self.hooks {
            hooks.progress(crate::telemetry::fraction_json(fraction, message));
        }
    }

    /// Reports progress as any small JSON value (at most [`MAX_PROGRESS`](crate::MAX_PROGRESS)
    /// bytes of compact JSON, nested at most [`MAX_JSON_DEPTH`](crate::MAX_JSON_DEPTH) levels;
    /// a larger or deeper one, or one holding a NUL character, is not stored, the previous
    /// report stays, and a warning saying why is logged), stored as it is. See
    /// [`progress`](Self::progress).
    pub fn progress_value(&self, value: &serde_json::Value) {
        let Some(hooks) = &self.hooks else { return };
        match crate::telemetry::value_json(value) {
            Ok(json) => hooks.progress(json),
            Err(reason) if !self.notes.progress_warned.swap(true, Ordering::Relaxed) => {
                tracing::warn!(
                    id = self.info.id,
                    kind = %self.info.kind,
                    %reason,
                    "progress not stored (the next reports of this attempt not stored are logged at \
                     DEBUG)"
                )
            }
            Err(reason) => tracing::debug!(id = self.info.id, %reason, "progress not stored"),
        }
    }

    /// The job's id.
    pub fn id(&self) -> JobId {
        self.info.id
    }

    /// The job's kind.
    pub fn kind(&self) -> &str {
        &self.info.kind
    }

    /// The queue it was claimed from.
    pub fn queue(&self) -> &str {
        &self.info.queue
    }

    /// This attempt's number, counting from 1.
    pub fn attempt(&self) -> i32 {
        self.info.attempt
    }

    /// Attempts in all.
    pub fn max_attempts(&self) -> i32 {
        self.info.max_attempts
    }

    /// The lease this attempt holds: the guard for writes made in its name.
    pub fn lease(&self) -> Lease {
        self.lease
    }

    /// Application state of type `T` registered on the worker. A missing type is a terminal
    /// error: retrying cannot register it.
    pub fn state<T: Send + Sync + 'static>(&self) -> Result<&T, JobError> {
        self.state.get::<T>().ok_or_else(|| {
            JobError::terminal(format!(
                "no state of type `{}` is registered on this worker: add one with \
                 `.state(value)` on the worker's builder (in tests: `Inline::state`, \
                 `Drain::state`)",
                readable_type_name(type_name::<T>())
            ))
        })
    }

    /// Whether this execution has been told to stop (cancel requested, timeout, lease lost,
    /// shutdown). Check it before each expensive step, and between pieces of work inside
    /// [`blocking`](Self::blocking) closures, which nothing else can stop.
    pub fn is_cancelled(&self) -> bool {
        self.stop.0.token.is_cancelled()
    }

    /// Completes when this execution is told to stop.
    pub async fn cancelled(&self) {
        self.stop.0.token.cancelled().await
    }

    /// Why this execution was told to stop, once it was: an operator's cancel request, its
    /// timeout, a lost lease or a shutdown. `None` while it runs on, or when the stop came
    /// from outside the runtime (a context built by hand).
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop.0.reason.get().copied()
    }
}

/// A type's name without its module paths (`sqlx_core::pool::Pool<sqlx_postgres::..::Postgres>`
/// is `Pool<Postgres>`), and the name a program writes for the common ones (`PgPool`).
fn readable_type_name(full: &str) -> String {
    let mut out = String::with_capacity(full.len());
    let mut word = String::new();
    for c in full.chars().chain(std::iter::once('\0')) {
        if c.is_alphanumeric() || c == '_' || c == ':' {
            word.push(c);
            continue;
        }
        out.push_str(word.rsplit("::").next().unwrap_or(&word));
        word.clear();
        if c != '\0' {
            out.push(c);
        }
    }
    match out.as_str() {
        "Pool<Postgres>" => "PgPool".to_owned(),
        "Arc<Pool<Postgres>>" => "Arc<PgPool>".to_owned(),
        _ => out,
    }
}

impl fmt::Debug for JobContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobContext")
            .field("id", &self.info.id)
            .field("kind", &self.info.kind)
            .field("queue", &self.info.queue)
            .field("attempt", &self.info.attempt)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::readable_type_name;

    #[test]
    fn type_names_are_shown_as_a_program_writes_them() {
        assert_eq!(
            readable_type_name("sqlx_core::pool::Pool<sqlx_postgres::database::Postgres>"),
            "PgPool"
        );
        assert_eq!(
            readable_type_name("alloc::sync::Arc<shop::Mailer>"),
            "Arc<Mailer>"
        );
        assert_eq!(
            readable_type_name("core::option::Option<(u8, alloc::string::String)>"),
            "Option<(u8, String)>"
        );
    }
}
