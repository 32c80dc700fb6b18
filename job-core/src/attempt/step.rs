//! Durable steps (receipts): `ctx.step("charge", || async { .. })` runs its closure once per
//! job and records the output; a later attempt (after a crash, a retry or a snooze) gets the
//! recorded output back without running the closure again.
//!
//! The context reaches the store through [`AttemptHooks`], so this crate knows no SQL: the
//! worker builds the hooks from its [`Store`](crate::Store), the testkit from memory.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::attempt::context::JobContext;
use crate::attempt::fault::FaultPoint;
use crate::contract::store::{Finalized, Lease, Store};
use crate::model::error::{JobError, StoreError};

pub(crate) use crate::contract::layer::BoxFuture;

/// A step name's longest length in bytes.
pub const MAX_STEP_NAME: usize = 128;

/// The largest step output stored, in bytes of JSON with its numbers written out in full (as
/// the database stores them): 1 MiB. A larger output ends the job (see [`JobContext::step`]).
pub const MAX_STEP_OUTPUT: usize = 1024 * 1024;

/// How many bytes of recorded step outputs an attempt keeps in memory: 16 MiB. It loads the
/// job's steps at its first step, in name order, up to this much; a step recorded past it is
/// read by name when it is called. A job may record up to [`MAX_STEPS_TOTAL`] bytes of
/// outputs, and every attempt used to hold all of them at once.
pub const MAX_LOADED_STEPS: usize = 16 * 1024 * 1024;

/// The most steps one job records: 10,000. A new step past it ends the job as an output that
/// cannot be stored does (see [`JobContext::step`]): a handler that loops over items with a
/// step each would otherwise store without bound. Work over more items is split into jobs.
pub const MAX_STEPS: usize = 10_000;

/// The most bytes of step outputs one job records: 64 MiB of JSON text as the worker wrote it
/// (a step recorded before PostgreSQL's migration 0049 counts its stored size). A new step
/// whose output would pass it ends the job (see [`JobContext::step`]).
pub const MAX_STEPS_TOTAL: usize = 64 * 1024 * 1024;

/// A store refused to record a new step of a job because the job is at its limits
/// ([`MAX_STEPS`] steps, [`MAX_STEPS_TOTAL`] bytes of output): both stores return it inside a
/// refused [`StoreError`] from [`Store::save_step`](crate::Store::save_step), nothing recorded.
/// A step already recorded under its name is never refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "job {job} has recorded {steps} steps of {bytes} bytes of output, and a job records at \
     most {max_steps} steps and {max_bytes} bytes (job::MAX_STEPS, job::MAX_STEPS_TOTAL): \
     step `{step}` of {output} bytes is refused",
    max_steps = MAX_STEPS,
    max_bytes = MAX_STEPS_TOTAL
)]
#[non_exhaustive]
pub struct StepLimit {
    /// The job's id.
    pub job: crate::JobId,
    /// The step refused.
    pub step: String,
    /// How many steps the job has recorded.
    pub steps: u64,
    /// The bytes of output those steps hold.
    pub bytes: u64,
    /// The bytes of the refused step's output.
    pub output: u64,
}

impl StepLimit {
    /// The refusal of step `step` (`output` bytes) of job `job`, which has recorded `steps`
    /// steps of `bytes` bytes of output.
    pub fn new(job: crate::JobId, step: &str, steps: u64, bytes: u64, output: u64) -> Self {
        StepLimit {
            job,
            step: step.to_owned(),
            steps,
            bytes,
            output,
        }
    }

    /// Whether a job that has recorded `steps` steps of `bytes` bytes of output may record a
    /// new one of `output` bytes.
    pub fn allows(steps: u64, bytes: u64, output: u64) -> bool {
        steps < MAX_STEPS as u64 && bytes.saturating_add(output) <= MAX_STEPS_TOTAL as u64
    }
}

/// Recorded step outputs by step name (JSON text), and whether they are all of the job's
/// (see [`Store::load_steps_up_to`](crate::Store::load_steps_up_to)).
pub type LoadedSteps = (HashMap<String, String>, bool);

/// What one attempt's context asks of the runtime: the job's recorded steps, recording a new
/// one under the lease, fault points, and news the runtime must hear.
///
/// Object-safe (boxed futures) because `JobContext` is one type for every store, not generic
/// over it.
pub trait AttemptHooks: Send + Sync + 'static {
    /// Every step output recorded for this job, by step name, as JSON text.
    fn load_steps(&self) -> BoxFuture<'_, Result<HashMap<String, String>, StoreError>>;

    /// The step outputs recorded for this job, in name order up to `max_bytes` of output
    /// text, and whether that is all of them (see [`Store::load_steps_up_to`]). Defaults to
    /// [`load_steps`](Self::load_steps), all of them.
    ///
    /// [`Store::load_steps_up_to`]: crate::Store::load_steps_up_to
    fn load_steps_up_to(&self, max_bytes: usize) -> BoxFuture<'_, Result<LoadedSteps, StoreError>> {
        let _ = max_bytes;
        Box::pin(async move { Ok((self.load_steps().await?, true)) })
    }

    /// The output recorded for step `name`, if any: a step that
    /// [`load_steps_up_to`](Self::load_steps_up_to) left out. Defaults to reading every step.
    fn load_step<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        Box::pin(async move { Ok(self.load_steps().await?.remove(name)) })
    }

    /// Records `output` (JSON text) for step `name`, guarded by the attempt's lease.
    /// [`Finalized::LeaseLost`] means nothing was recorded. A name already recorded keeps its
    /// first output.
    fn save_step<'a>(
        &'a self,
        name: &'a str,
        output: &'a str,
    ) -> BoxFuture<'a, Result<Finalized, StoreError>>;

    /// Fault point `point` of step `name`: whether the execution was killed there. When this
    /// returns `true` the runtime has already stopped the execution; the step never returns.
    /// Defaults to `false`.
    fn crash_at(&self, point: FaultPoint, name: &str) -> bool {
        let _ = (point, name);
        false
    }

    /// A guarded step write found the lease gone: the runtime must stop the execution and
    /// write nothing more for it. Defaults to doing nothing.
    fn lease_lost(&self) {}

    /// Whether the attempt still holds its lease as far as the runtime knows (it was neither
    /// lost nor fenced). A step whose output could not be recorded for a passing reason keeps
    /// trying while this holds. Defaults to `true`.
    fn lease_held(&self) -> bool {
        true
    }

    /// The handler finalized the job in its own transaction (or is about to commit one that
    /// does): the runtime's own finalize finding the lease gone is then expected, not a loss.
    /// Defaults to doing nothing.
    fn finalized_in_transaction(&self) {}

    /// The handler reported `progress` (compact JSON, at most
    /// [`MAX_PROGRESS`](crate::MAX_PROGRESS) bytes): the worker keeps the latest and writes it
    /// with its next heartbeat. Called on every report, so it must be cheap. Defaults to
    /// doing nothing.
    fn progress(&self, progress: String) {
        let _ = progress;
    }
}

/// Durable steps recorded in a [`Store`](crate::Store) under one attempt's lease: the hooks
/// the testkit's `Drain` gives its contexts, so their steps are recorded (and checked) as a
/// worker records them.
#[derive(Debug, Clone)]
pub struct StoreSteps<S> {
    store: S,
    lease: Lease,
    /// Permits for the store calls of steps, shared by every execution of a worker.
    calls: Option<Arc<tokio::sync::Semaphore>>,
}

impl<S: Store> StoreSteps<S> {
    /// The steps of the job of `lease`, in `store`.
    pub fn new(store: S, lease: Lease) -> Self {
        StoreSteps {
            store,
            lease,
            calls: None,
        }
    }

    /// Makes the store calls of these steps take a permit of `calls` first, so that the
    /// steps of every execution sharing it hold at most its permits' worth of connections
    /// at once (a worker's: the one its connection budget gives steps and releases). Without
    /// it, handlers that run many steps at once (`join_all` over a list) could take every
    /// connection of the worker's pool, and its claims, outcomes and rescues would wait.
    pub(crate) fn sharing(mut self, calls: Arc<tokio::sync::Semaphore>) -> Self {
        self.calls = Some(calls);
        self
    }

    /// Runs `call` with a permit of the shared calls (if any; never closed: none when it is)
    /// in a task of its own, and returns its answer. The permit is held only while the call
    /// runs, and the call runs to its end whether or not the step that asked is polled: a
    /// handler that polled a step once and then awaited something else (`select!` over
    /// `&mut step`), or blocked its thread beside it (`join!`), held the permit of every
    /// execution of the worker meanwhile, and their steps waited, to their timeouts.
    async fn call<T, F, Fut>(&self, call: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(S, Lease) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let (store, lease, calls) = (self.store.clone(), self.lease, self.calls.clone());
        let task = tokio::spawn(async move {
            let _permit = match &calls {
                Some(calls) => calls.acquire().await.ok(),
                None => None,
            };
            call(store, lease).await
        });
        match task.await {
            Ok(answer) => answer,
            Err(e) => Err(StoreError::new(format!("a step's store call failed: {e}"))),
        }
    }
}

impl<S: Store> AttemptHooks for StoreSteps<S> {
    fn load_steps(&self) -> BoxFuture<'_, Result<HashMap<String, String>, StoreError>> {
        Box::pin(self.call(|store, lease| async move { store.load_steps(&lease).await }))
    }

    fn load_steps_up_to(&self, max_bytes: usize) -> BoxFuture<'_, Result<LoadedSteps, StoreError>> {
        Box::pin(self.call(move |store, lease| async move {
            store.load_steps_up_to(&lease, max_bytes).await
        }))
    }

    fn load_step<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        let name = name.to_owned();
        Box::pin(self.call(move |store, lease| async move { store.load_step(&lease, &name).await }))
    }

    fn save_step<'a>(
        &'a self,
        name: &'a str,
        output: &'a str,
    ) -> BoxFuture<'a, Result<Finalized, StoreError>> {
        let (name, output) = (name.to_owned(), output.to_owned());
        Box::pin(
            self.call(
                move |store, lease| async move { store.save_step(&lease, &name, &output).await },
            ),
        )
    }
}

impl JobContext {
    /// Runs `f` as the durable step `name` of this job and returns its output.
    ///
    /// The first time a job reaches a step, `f` runs and its output is serialized and
    /// recorded under the attempt's lease; every later attempt of the job gets the recorded
    /// output back and `f` does not run. So a step's side effect happens once per job unless
    /// the process dies, or loses its lease, between the side effect and the record (then it
    /// runs again: wrap effects that must not repeat in an idempotency key, or write them in
    /// the transaction that completes the job with `complete_in`).
    ///
    /// The job's recorded steps are loaded once per attempt, at the first step. An error from
    /// `f` records nothing and is returned as is. If the record fails for a passing reason
    /// (the database is unreachable for a moment), it is tried again, with a growing pause,
    /// for as long as the attempt holds its lease (and within its timeout). If the lease was
    /// lost, the output is not recorded: the execution is stopped (nothing is finalized; the
    /// job's new owner runs the step) and the step returns a retryable error.
    ///
    /// An output that cannot be stored (it does not serialize, does not read back as `T`, as
    /// NaN does not, holds a NUL character or, in raw JSON text, a lone surrogate escape such
    /// as `"\ud800"`, is over [`MAX_STEP_OUTPUT`], would take the job past [`MAX_STEPS`]
    /// steps or [`MAX_STEPS_TOTAL`] bytes of outputs, or the database
    /// refuses it) ends the job: the step returns a terminal error and the job is discarded
    /// with class `step_unstorable` and a message naming the step, whatever the handler
    /// returns, because `f`'s effect may have happened and must not run again on its own.
    /// When the attempt knows that the job has recorded [`MAX_STEPS`] steps already, a new
    /// step ends the job the same way without running `f`.
    ///
    /// A name is 1 to [`MAX_STEP_NAME`] bytes without NUL and identifies the step within the job;
    /// calling one name again returns its first output. Calls of one name at the same time (in
    /// `join!`, or `join_all` over items with a repeated id) run `f` once: the others wait for
    /// it and return its recorded output, or, if it recorded none (it failed), the first of
    /// them to wake runs its own `f`. So `f` must not call a step of its own name: that call
    /// would wait for itself. Without a store (a context built with [`JobContext::new`] alone)
    /// `f` runs every time and nothing is recorded.
    ///
    /// A step not yet recorded is refused with a terminal error, `f` not run, once the handler
    /// has called `complete_in` in this attempt: that transaction holds the job's row, and once
    /// it commits the job is finished, so the output could never be recorded. Run steps before
    /// `complete_in`; code after its commit runs once, as plain code.
    ///
    /// ```
    /// # use job_core::{JobContext, JobError};
    /// # async fn charge_card(_: i64) -> Result<String, std::io::Error> { Ok("ch_1".into()) }
    /// # async fn send_receipt(_: &str) -> Result<(), std::io::Error> { Ok(()) }
    /// async fn perform(ctx: JobContext, order: i64) -> Result<(), JobError> {
    ///     let charge: String = ctx
    ///         .step("charge", || async { Ok(charge_card(order).await?) })
    ///         .await?;
    ///     ctx.step("email", || async { Ok(send_receipt(&charge).await?) })
    ///         .await?;
    ///     Ok(())
    /// }
    /// ```
    pub async fn step<T, F, Fut>(&self, name: &str, f: F) -> Result<T, JobError>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, JobError>>,
    {
        if name.is_empty() || name.len() > MAX_STEP_NAME {
            return Err(JobError::terminal(format!(
                "a step name must be 1 to {MAX_STEP_NAME} bytes, got {} bytes",
                name.len()
            )));
        }
        // Refused here, before the step runs: PostgreSQL stores no NUL in text, so the step's
        // output could not be recorded after its effect had happened.
        if name.contains('\0') {
            return Err(JobError::terminal(
                "a step name must not contain a NUL character (U+0000)",
            ));
        }
        let Some(hooks) = self.hooks() else {
            return f().await;
        };
        let steps = self.loaded_steps(hooks).await?;
        // Another call of this name may be running in this attempt (`join!`, `join_all`): it
        // is waited for, and its recorded output returned; if it recorded none, this call runs.
        let mut waited = false;
        let running = loop {
            let mut changed = match steps.claim(name) {
                Claim::Recorded(recorded) => return decode_recorded(name, &recorded),
                Claim::Run(running) => break running,
                Claim::Wait(changed) => changed,
            };
            // Closed when that call ends, whether it recorded or not (or was dropped).
            let _ = changed.changed().await;
            waited = true;
        };
        if waited {
            if let Some(message) = self.unstorable_step() {
                return Err(JobError::terminal(format!(
                    "step `{name}` was not run again: {message}"
                )));
            }
        }
        // Past what the attempt keeps in memory, the name may be recorded all the same.
        if !steps.complete() {
            let found = hooks.load_step(name).await.map_err(|e| {
                JobError::retryable(format!("could not load the recorded step `{name}`: {e}"))
            })?;
            if let Some(recorded) = found {
                drop(running);
                return decode_recorded(name, &recorded);
            }
        }
        // After `complete_in`, the handler's own transaction holds the job's row until it
        // ends, and then the job is finished: the output could never be recorded, and a step
        // that ran would wait for its record until the lease ran out, to run again in the
        // next attempt.
        if self.finalized_by_handler() {
            return Err(JobError::terminal(format!(
                "step `{name}` was not run: it comes after complete_in in this attempt, and \
                 its output could not be recorded (the handler's transaction holds the job's \
                 row, then finishes the job); run steps before complete_in"
            )));
        }
        // At its limit, the job cannot record this step: refused before its effect happens
        // (when the attempt knows every step of the job; else the store refuses the record).
        if let Some(recorded) = steps.recorded() {
            if recorded >= MAX_STEPS {
                return Err(past_limit(self, name, recorded));
            }
        }
        if hooks.crash_at(FaultPoint::BeforeStep, name) {
            return std::future::pending().await;
        }
        // Held through the closure and its record, as `blocking` holds one: a step run in a
        // task of its own (`tokio::spawn`) may outlive its handler, and the executor then
        // waits for it before it writes the attempt's outcome and frees the lease, so that
        // its effect never runs beside the next attempt's. Taken before the check below, so
        // that the executor, which closes the tracker and then waits for what it holds,
        // either waits for this step or has closed it out.
        let _running = self.work().token();
        // A context moved into a task that outlived its handler: the effect would run outside
        // any attempt, beside the next one, and its record would find the lease gone.
        if self.work().is_closed() || !hooks.lease_held() {
            return Err(JobError::retryable(format!(
                "step `{name}` was not run: attempt {} of job {} has ended",
                self.attempt(),
                self.id()
            )));
        }
        let output = f().await?;
        // Its `Serialize` and `Deserialize` are application code: one that panics makes the
        // output unstorable as well (the effect has happened), never a panic of the attempt,
        // which would be retried and run the effect again.
        let checked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| storable_output(&output)))
                .unwrap_or_else(|panic| {
                    Err(format!(
                        "writing or reading it back panicked: {}",
                        crate::model::text::storable_text(
                            &crate::attempt::pipeline::panic_message(panic),
                            1024
                        )
                    ))
                });
        let json = match checked {
            Ok(json) => json,
            Err(reason) => {
                return Err(unstorable(
                    self,
                    name,
                    &reason,
                    "redrive it once the step is fixed",
                ))
            }
        };
        let mut pause = RECORD_RETRY_FIRST;
        loop {
            match hooks.save_step(name, &json).await {
                // A step is never written as anything else: `Cancelled` answers an outcome.
                Ok(Finalized::Applied | Finalized::Cancelled) => break,
                Ok(Finalized::LeaseLost) => {
                    hooks.lease_lost();
                    return Err(JobError::retryable(format!(
                        "lease lost: the output of step `{name}` was not recorded"
                    )));
                }
                // Another transaction holds the row (PostgreSQL's store skips it rather than
                // wait): tried again, while the lease is held.
                Ok(Finalized::Busy) if hooks.lease_held() => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RECORD_RETRY_MAX);
                }
                Ok(Finalized::Busy) => {
                    return Err(JobError::retryable(format!(
                        "could not record the output of step `{name}` before the lease was \
                         lost: another transaction held the job's row"
                    )))
                }
                Err(e) if e.is_refused() => {
                    return Err(match e.inner().downcast_ref::<StepLimit>() {
                        // Redriven, the job would meet the same limit (it keeps its steps),
                        // after running this step's closure once more.
                        Some(limit) => unstorable(
                            self,
                            name,
                            &limit.to_string(),
                            "split work over more items into several jobs",
                        ),
                        None => unstorable(
                            self,
                            name,
                            &format!("the database refused it: {e}"),
                            "redrive it once the step is fixed",
                        ),
                    });
                }
                Err(e) if !hooks.lease_held() => {
                    return Err(JobError::retryable(format!(
                        "could not record the output of step `{name}` before the lease was \
                         lost: {e}"
                    )))
                }
                Err(e) => {
                    tracing::warn!(
                        step = name,
                        error = %e,
                        retry_in = ?pause,
                        "could not record a step's output; trying again while the lease is held"
                    );
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(RECORD_RETRY_MAX);
                }
            }
        }
        running.record(json);
        if hooks.crash_at(FaultPoint::AfterStep, name) {
            return std::future::pending().await;
        }
        Ok(output)
    }

    /// The job's steps, loaded at the attempt's first step.
    async fn loaded_steps(&self, hooks: &dyn AttemptHooks) -> Result<&Steps, JobError> {
        self.steps()
            .0
            .get_or_try_init(|| async {
                hooks
                    .load_steps_up_to(MAX_LOADED_STEPS)
                    .await
                    .map(|(recorded, complete)| {
                        let bytes = recorded.iter().map(|(k, v)| k.len() + v.len()).sum();
                        Steps(Mutex::new(Known {
                            recorded,
                            bytes,
                            complete,
                            running: HashMap::new(),
                        }))
                    })
                    .map_err(|e| {
                        JobError::retryable(format!("could not load the recorded steps: {e}"))
                    })
            })
            .await
    }
}

/// One attempt's durable steps: the job's recorded outputs (loaded at the attempt's first
/// step) and the names whose closures run now, so that a name called twice at once runs once.
#[derive(Debug, Default)]
pub(crate) struct StepCache(tokio::sync::OnceCell<Steps>);

impl StepCache {
    /// Nothing loaded yet.
    pub(crate) fn new() -> Self {
        Self::default()
    }
}

/// The steps of an attempt, once loaded.
#[derive(Debug)]
struct Steps(Mutex<Known>);

#[derive(Debug)]
struct Known {
    /// Output JSON by step name: the job's steps, as far as [`MAX_LOADED_STEPS`] goes.
    recorded: HashMap<String, String>,
    /// The bytes of the names and outputs in `recorded`.
    bytes: usize,
    /// Whether `recorded` holds every step of the job: when not, a name missing from it is
    /// read from the store.
    complete: bool,
    /// The names whose closures run now, each with the sender its waiters watch, made by the
    /// first waiter (so an uncontended step allocates none). Removing an entry drops the
    /// sender, which wakes every waiter.
    running: HashMap<String, Option<tokio::sync::watch::Sender<()>>>,
}

/// What a call of a step finds.
enum Claim<'a> {
    /// The name's output, recorded.
    Recorded(String),
    /// Nothing recorded and nothing running: this call runs the step.
    Run(Running<'a>),
    /// Another call runs the step now: closed when it ends.
    Wait(tokio::sync::watch::Receiver<()>),
}

impl Steps {
    fn lock(&self) -> MutexGuard<'_, Known> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether every step of the job is in memory.
    fn complete(&self) -> bool {
        self.lock().complete
    }

    /// How many steps the job has recorded, when every one is in memory.
    fn recorded(&self) -> Option<usize> {
        let steps = self.lock();
        steps.complete.then_some(steps.recorded.len())
    }

    /// What a call of step `name` does: return its recorded output, run it, or wait for the
    /// call running it.
    fn claim<'a>(&'a self, name: &'a str) -> Claim<'a> {
        let mut steps = self.lock();
        if let Some(recorded) = steps.recorded.get(name) {
            return Claim::Recorded(recorded.clone());
        }
        match steps.running.get_mut(name) {
            Some(waiters) => Claim::Wait(
                waiters
                    .get_or_insert_with(|| tokio::sync::watch::channel(()).0)
                    .subscribe(),
            ),
            None => {
                steps.running.insert(name.to_owned(), None);
                Claim::Run(Running { steps: self, name })
            }
        }
    }
}

/// A step this call runs: until it is dropped, other calls of the name wait for it.
struct Running<'a> {
    steps: &'a Steps,
    name: &'a str,
}

impl Running<'_> {
    /// Keeps `json` as the name's output and ends the run: the waiters return the output.
    /// Past [`MAX_LOADED_STEPS`] it is not kept: the cache then says it is incomplete, and a
    /// later call of the name (a waiter's) reads it from the store.
    fn record(self, json: String) {
        let mut guard = self.steps.lock();
        let known = &mut *guard;
        let size = self.name.len() + json.len();
        if known.bytes.saturating_add(size) > MAX_LOADED_STEPS {
            known.complete = false;
        } else if let std::collections::hash_map::Entry::Vacant(slot) =
            known.recorded.entry(self.name.to_owned())
        {
            known.bytes += size;
            slot.insert(json);
        }
    }
}

impl Drop for Running<'_> {
    /// Wakes the waiters. Ended without a record (an error, a lost lease, the future
    /// dropped), the step is run by the first waiter to wake.
    fn drop(&mut self) {
        self.steps.lock().running.remove(self.name);
    }
}

/// A recorded output of step `name`, decoded as `T`.
fn decode_recorded<T: DeserializeOwned>(name: &str, recorded: &str) -> Result<T, JobError> {
    // Explained without quoting the output, which may hold what the effect returned.
    serde_json::from_str(recorded).map_err(|e| {
        JobError::terminal(format!(
            "the recorded output of step `{name}` does not decode as `{}`: {}",
            std::any::type_name::<T>(),
            crate::model::decode::explain::<T>(recorded, &e)
        ))
    })
}

/// The first pause before a step's output is recorded again after a passing failure.
const RECORD_RETRY_FIRST: Duration = Duration::from_millis(50);
/// The longest pause between two tries to record a step's output.
const RECORD_RETRY_MAX: Duration = Duration::from_secs(1);

/// `output` as the JSON text a store can hold and give back as the same `T`, or why not.
fn storable_output<T: Serialize + DeserializeOwned>(output: &T) -> Result<String, String> {
    let json = serde_json::to_string(output).map_err(|e| format!("it does not serialize: {e}"))?;
    // Also caught below when the float's type cannot read `null`; an `Option` can, as `None`.
    if let Some((path, value)) = crate::model::finite::non_finite(output) {
        return Err(crate::model::finite::describe(&path, value));
    }
    let stored = crate::model::json_size::stored_len(&json);
    if stored > MAX_STEP_OUTPUT {
        return Err(format!(
            "it is {stored} bytes of JSON (numbers written out in full, as stored), over the \
             limit of {MAX_STEP_OUTPUT} bytes"
        ));
    }
    if has_escaped_nul(&json) {
        return Err("it holds a NUL character (\\u0000), which cannot be stored".into());
    }
    if let Some(problem) = crate::model::json_size::lone_surrogate(&json) {
        return Err(format!("it {problem}"));
    }
    // serde_json writes NaN and the infinities as `null`: what would come back is not what
    // the step returned.
    if let Err(e) = serde_json::from_str::<T>(&json) {
        return Err(format!(
            "it does not read back as `{}`: {}",
            std::any::type_name::<T>(),
            crate::model::decode::explain::<T>(&json, &e)
        ));
    }
    Ok(json)
}

/// Whether JSON text holds the escape `\u0000` (a NUL character in a string or key). A
/// backslash starts an escape when an even number of backslashes precede it.
fn has_escaped_nul(json: &str) -> bool {
    let bytes = json.as_bytes();
    let mut from = 0;
    while let Some(at) = json[from..].find("\\u0000").map(|i| i + from) {
        let preceding = bytes[..at]
            .iter()
            .rev()
            .take_while(|b| **b == b'\\')
            .count();
        if preceding % 2 == 0 {
            return true;
        }
        from = at + 1;
    }
    false
}

/// Marks the attempt as ended by step `name`, which was not run because the job has recorded
/// `recorded` steps, its limit, and returns the step's error: a terminal one, the job
/// discarded as `step_unstorable` as for an output that cannot be stored (a later attempt
/// would find the same steps).
fn past_limit(ctx: &JobContext, name: &str, recorded: usize) -> JobError {
    let message = format!(
        "step `{name}` was not run: job {} has recorded {recorded} steps, and a job records at \
         most {MAX_STEPS} (job::MAX_STEPS); split work over more items into several jobs",
        ctx.id()
    );
    tracing::error!(step = name, %message, "a job's steps are at their limit: ending the job");
    ctx.mark_step_unstorable(message.clone());
    JobError::terminal(message)
}

/// Marks the attempt as ended by step `name`, whose output cannot be stored, and returns the
/// step's error, which says `advice` (what to do about it).
fn unstorable(ctx: &JobContext, name: &str, reason: &str, advice: &str) -> JobError {
    // Cut as the store would cut it: `reason` may quote application or driver text of any
    // size (a `Serialize` error, the database's refusal), and it is logged here.
    let message = crate::model::text::cut(
        &format!(
            "the output of step `{name}` cannot be stored: {reason}; the step's effect may \
             have happened, so the job is not retried ({advice})"
        ),
        crate::model::text::MAX_ERROR_MESSAGE,
    )
    .into_owned();
    tracing::error!(step = name, %message, "step output cannot be stored: ending the job");
    ctx.mark_step_unstorable(message.clone());
    JobError::terminal(message)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    use tokio_util::sync::CancellationToken;

    use super::*;

    #[test]
    fn a_raw_output_with_a_lone_surrogate_escape_is_unstorable() {
        let raw = |t: &str| serde_json::value::RawValue::from_string(t.to_owned()).unwrap();
        // Raw text reads back as itself: only the check refuses it.
        for text in [r#"{"k":"\ud800"}"#, r#"{"\udfff":1}"#] {
            let refused = storable_output(&raw(text)).unwrap_err();
            assert!(
                refused.starts_with("it holds the lone surrogate escape"),
                "{text}: {refused}"
            );
        }
        assert!(storable_output(&raw(r#"{"k":"\ud83d\ude00"}"#)).is_ok());
    }

    #[test]
    fn an_output_float_json_cannot_hold_is_unstorable_even_where_null_reads_back() {
        let refused = storable_output(&Some(f64::NAN)).unwrap_err();
        assert!(refused.contains("is NaN"), "{refused}");
        assert_eq!(storable_output(&Some(0.5f64)).unwrap(), "0.5");
    }
    use crate::attempt::context::Extensions;
    use crate::contract::store::Lease;
    use crate::model::attempt_info::AttemptInfo;

    /// Steps in memory, counting loads and saves; `lost` makes every save find its lease gone.
    #[derive(Default)]
    struct Counting {
        steps: Mutex<HashMap<String, String>>,
        loads: AtomicU32,
        saves: AtomicU32,
        lost: AtomicBool,
        told_lost: AtomicBool,
    }

    impl AttemptHooks for Counting {
        fn load_steps(&self) -> BoxFuture<'_, Result<HashMap<String, String>, StoreError>> {
            self.loads.fetch_add(1, Ordering::Relaxed);
            let steps = self.steps.lock().unwrap().clone();
            Box::pin(async move { Ok(steps) })
        }

        fn save_step<'a>(
            &'a self,
            name: &'a str,
            output: &'a str,
        ) -> BoxFuture<'a, Result<Finalized, StoreError>> {
            self.saves.fetch_add(1, Ordering::Relaxed);
            let result = if self.lost.load(Ordering::Relaxed) {
                Finalized::LeaseLost
            } else {
                self.steps
                    .lock()
                    .unwrap()
                    .insert(name.to_owned(), output.to_owned());
                Finalized::Applied
            };
            Box::pin(async move { Ok(result) })
        }

        fn lease_lost(&self) {
            self.told_lost.store(true, Ordering::Relaxed);
        }
    }

    fn context(hooks: &Arc<Counting>) -> JobContext {
        let info = AttemptInfo {
            id: 1,
            kind: "k".into(),
            queue: "q".into(),
            attempt: 1,
            max_attempts: 3,
        };
        let lease = Lease {
            id: 1,
            token: uuid::Uuid::nil(),
        };
        JobContext::new(
            info,
            lease,
            Arc::new(Extensions::new()),
            CancellationToken::new(),
        )
        .with_hooks(hooks.clone())
    }

    /// Hooks whose first load holds `in_memory` of the job's `recorded` steps and says it is
    /// not all of them; the others are read by name.
    #[derive(Default)]
    struct Partial {
        recorded: HashMap<String, String>,
        in_memory: Vec<&'static str>,
        by_name: AtomicU32,
    }

    impl AttemptHooks for Partial {
        fn load_steps(&self) -> BoxFuture<'_, Result<HashMap<String, String>, StoreError>> {
            panic!("an attempt loads its steps up to a bound, never all of them")
        }

        fn load_steps_up_to(
            &self,
            max_bytes: usize,
        ) -> BoxFuture<'_, Result<LoadedSteps, StoreError>> {
            assert_eq!(max_bytes, MAX_LOADED_STEPS);
            let loaded = self
                .in_memory
                .iter()
                .map(|n| (n.to_string(), self.recorded[*n].clone()))
                .collect();
            Box::pin(async move { Ok((loaded, false)) })
        }

        fn load_step<'a>(
            &'a self,
            name: &'a str,
        ) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
            self.by_name.fetch_add(1, Ordering::Relaxed);
            let found = self.recorded.get(name).cloned();
            Box::pin(async move { Ok(found) })
        }

        fn save_step<'a>(
            &'a self,
            _name: &'a str,
            _output: &'a str,
        ) -> BoxFuture<'a, Result<Finalized, StoreError>> {
            Box::pin(async move { Ok(Finalized::Applied) })
        }
    }

    #[tokio::test]
    async fn a_step_recorded_past_what_the_attempt_loaded_is_read_by_name_and_not_run() {
        let hooks = Arc::new(Partial {
            recorded: [("a", "1"), ("b", "2")]
                .into_iter()
                .map(|(n, o)| (n.to_owned(), o.to_owned()))
                .collect(),
            in_memory: vec!["a"],
            ..Partial::default()
        });
        let info = AttemptInfo {
            id: 1,
            kind: "k".into(),
            queue: "q".into(),
            attempt: 2,
            max_attempts: 3,
        };
        let lease = Lease {
            id: 1,
            token: uuid::Uuid::nil(),
        };
        let ctx = JobContext::new(
            info,
            lease,
            Arc::new(Extensions::new()),
            CancellationToken::new(),
        )
        .with_hooks(hooks.clone());
        let ran = AtomicU32::new(0);
        let step = |name: &'static str| {
            let (ctx, ran) = (&ctx, &ran);
            async move {
                ctx.step(name, || async move {
                    ran.fetch_add(1, Ordering::Relaxed);
                    Ok(9_u32)
                })
                .await
                .unwrap()
            }
        };
        assert_eq!(step("a").await, 1, "in memory");
        assert_eq!(hooks.by_name.load(Ordering::Relaxed), 0);
        assert_eq!(step("b").await, 2, "read by name");
        assert_eq!(hooks.by_name.load(Ordering::Relaxed), 1);
        assert_eq!(
            ran.load(Ordering::Relaxed),
            0,
            "no recorded effect ran again"
        );
        assert_eq!(step("c").await, 9, "not recorded: it runs");
        assert_eq!(ran.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn steps_load_once_per_attempt_and_each_runs_once_per_job() {
        let hooks = Arc::new(Counting::default());
        let ran = AtomicU32::new(0);
        let step = |ctx: JobContext, name: &'static str| {
            let ran = &ran;
            async move {
                ctx.step(name, || async {
                    ran.fetch_add(1, Ordering::Relaxed);
                    Ok(name.len())
                })
                .await
            }
        };
        let first = context(&hooks);
        assert_eq!(step(first.clone(), "a").await.unwrap(), 1);
        assert_eq!(step(first.clone(), "bb").await.unwrap(), 2);
        assert_eq!(
            step(first.clone(), "a").await.unwrap(),
            1,
            "a name runs once"
        );
        assert_eq!(
            hooks.loads.load(Ordering::Relaxed),
            1,
            "one load per attempt"
        );
        assert_eq!(hooks.saves.load(Ordering::Relaxed), 2);

        let retry = context(&hooks);
        assert_eq!(step(retry.clone(), "bb").await.unwrap(), 2);
        assert_eq!(step(retry.clone(), "ccc").await.unwrap(), 3);
        assert_eq!(hooks.loads.load(Ordering::Relaxed), 2);
        assert_eq!(
            ran.load(Ordering::Relaxed),
            3,
            "a, bb and ccc each ran once"
        );
    }

    #[tokio::test]
    async fn one_name_called_twice_at_once_runs_once_and_both_get_its_output() {
        let hooks = Arc::new(Counting::default());
        let ctx = context(&hooks);
        let ran = AtomicU32::new(0);
        let charge = |amount: u32| {
            let (ctx, ran) = (&ctx, &ran);
            async move {
                ctx.step("charge", || async move {
                    ran.fetch_add(1, Ordering::Relaxed);
                    // Lets the other call reach the step while this one runs.
                    tokio::task::yield_now().await;
                    Ok(amount)
                })
                .await
            }
        };
        let (first, second) = tokio::join!(charge(1), charge(2));
        assert_eq!((first.unwrap(), second.unwrap()), (1, 1));
        assert_eq!(ran.load(Ordering::Relaxed), 1, "the effect ran once");
        assert_eq!(hooks.saves.load(Ordering::Relaxed), 1);
    }

    #[tokio::test]
    async fn a_call_waiting_for_a_failed_step_runs_it_itself() {
        let hooks = Arc::new(Counting::default());
        let ctx = context(&hooks);
        let ran = AtomicU32::new(0);
        let charge = |fail: bool| {
            let (ctx, ran) = (&ctx, &ran);
            async move {
                ctx.step("charge", || async move {
                    ran.fetch_add(1, Ordering::Relaxed);
                    tokio::task::yield_now().await;
                    if fail {
                        return Err(JobError::retryable("declined"));
                    }
                    Ok(7)
                })
                .await
            }
        };
        let (first, second) = tokio::join!(charge(true), charge(false));
        assert!(matches!(first, Err(JobError::Retryable(_))), "{first:?}");
        assert_eq!(second.unwrap(), 7);
        assert_eq!(
            ran.load(Ordering::Relaxed),
            2,
            "the failed run recorded nothing"
        );
        assert_eq!(hooks.steps.lock().unwrap()["charge"], "7");
    }

    #[tokio::test]
    async fn a_failed_step_records_nothing() {
        let hooks = Arc::new(Counting::default());
        let ctx = context(&hooks);
        let failed = ctx
            .step("charge", || async {
                Err::<u32, _>(JobError::retryable("declined"))
            })
            .await;
        assert!(matches!(failed, Err(JobError::Retryable(e)) if e.to_string() == "declined"));
        assert_eq!(hooks.saves.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_step_past_the_jobs_step_count_is_refused_unrun_and_ends_the_job() {
        let hooks = Arc::new(Counting::default());
        let ctx = context(&hooks);
        for i in 0..MAX_STEPS {
            ctx.step(&format!("item-{i}"), || async { Ok(i) })
                .await
                .unwrap();
        }
        let ran = AtomicBool::new(false);
        let refused = ctx
            .step("one-more", || async {
                ran.store(true, Ordering::Relaxed);
                Ok(0)
            })
            .await;
        match refused {
            Err(JobError::Terminal(e)) => {
                let text = e.to_string();
                assert!(
                    text.contains("step `one-more` was not run: job 1 has recorded 10000 steps")
                        && text.contains("job::MAX_STEPS"),
                    "{text}"
                );
            }
            other => panic!("expected a terminal error, got {other:?}"),
        }
        assert!(!ran.load(Ordering::Relaxed), "its effect never ran");
        assert_eq!(hooks.saves.load(Ordering::Relaxed), MAX_STEPS as u32);
        assert!(
            ctx.unstorable_step().is_some(),
            "the job ends step_unstorable"
        );
        // A recorded name still returns its output.
        assert_eq!(ctx.step("item-7", || async { Ok(0) }).await.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_step_whose_lease_is_gone_tells_the_runtime_and_fails() {
        let hooks = Arc::new(Counting::default());
        hooks.lost.store(true, Ordering::Relaxed);
        let ctx = context(&hooks);
        let result = ctx.step("charge", || async { Ok(1) }).await;
        match result {
            Err(JobError::Retryable(e)) => assert_eq!(
                e.to_string(),
                "lease lost: the output of step `charge` was not recorded"
            ),
            other => panic!("expected a retryable error, got {other:?}"),
        }
        assert!(hooks.told_lost.load(Ordering::Relaxed));
        assert!(hooks.steps.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_bad_step_name_is_terminal_and_runs_nothing() {
        let hooks = Arc::new(Counting::default());
        let ctx = context(&hooks);
        for name in [
            String::new(),
            "x".repeat(MAX_STEP_NAME + 1),
            "charge\0card".to_owned(),
        ] {
            let result = ctx
                .step(&name, || async { panic!("must not run") as Result<(), _> })
                .await;
            assert!(matches!(result, Err(JobError::Terminal(_))));
        }
    }

    #[tokio::test]
    async fn without_hooks_a_step_just_runs() {
        let ctx = JobContext::new(
            AttemptInfo {
                id: 1,
                kind: "k".into(),
                queue: "q".into(),
                attempt: 1,
                max_attempts: 1,
            },
            Lease {
                id: 1,
                token: uuid::Uuid::nil(),
            },
            Arc::new(Extensions::new()),
            CancellationToken::new(),
        );
        let runs = AtomicU32::new(0);
        for _ in 0..2 {
            ctx.step("a", || async {
                runs.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .await
            .unwrap();
        }
        assert_eq!(runs.load(Ordering::Relaxed), 2);
    }
}
