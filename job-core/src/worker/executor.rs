//! Runs one claimed job through the attempt pipeline (`attempt/pipeline.rs`: start, run
//! under the timeout, conclude), with the worker's fault points and stop signals between the
//! stages, and hands the outcome to the completer. A panic, a timeout or a lease loss never
//! takes the worker down.
//!
//! An execution ends when its code ends: after a timeout, a lost lease or a shutdown the
//! handler is aborted, and the executor waits until its code has really returned (and every
//! closure it started through `JobContext::blocking`) before it writes the outcome or gives
//! the lease back. Meanwhile the lease stays held and renewed (unless it was lost), and the
//! slot stays taken. The handler's context reaches the store for durable steps through
//! [`Hooks`].

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use tokio::sync::OwnedSemaphorePermit;
use tokio::time::Instant;
use tracing::Instrument;

use crate::attempt::context::JobContext;
use crate::attempt::fault::{Fault, FaultPoint};
use crate::attempt::pipeline::{conclude, run_task, start_attempt, StopCause};
use crate::attempt::step::{AttemptHooks, BoxFuture, StoreSteps};
use crate::contract::store::{ClaimedJob, Finalize, Finalized, Lease, Release, Store};
use crate::model::attempt_info::{AttemptInfo, StopReason};
use crate::model::error::StoreError;
use crate::model::outcome::{AttemptEnd, ErrorClass, Failure, Outcome};

use super::completer::Completion;
use super::gauges::Slot;
use super::inflight::{Abort, Flags, Signals};
use super::shared::Shared;
use super::stats::bump;
use crate::telemetry::attempt_span;

/// How far an execution got, for [`run`] to act on should it panic past every guard.
#[derive(Debug)]
enum Reached {
    /// The handler has not started, or its code may still run: nothing may be written.
    Running,
    /// The handler's code (and its blocking work) has ended; no outcome is on its way yet.
    Ended {
        ran_for: Duration,
        /// The kind's timeout, when the attempt ran over it.
        timed_out: Option<Duration>,
        backoff: crate::model::backoff::Backoff,
        /// Why a step's output could not be stored, when one could not.
        unstorable_step: Option<String>,
    },
    /// Its outcome went to the completer: the entry is the completer's.
    Handed,
}

/// Runs `job`, whose kind and queue are read from `info` (the fetcher moved them there).
pub(crate) async fn run<S: Store>(
    shared: Arc<Shared<S>>,
    job: ClaimedJob,
    info: Arc<AttemptInfo>,
    signals: Signals,
    permits: (Slot, OwnedSemaphorePermit),
) {
    let span = attempt_span(
        &info.kind,
        job.lease.id,
        job.attempt,
        &info.queue,
        job.traceparent.as_deref(),
    );
    let lease = job.lease;
    let mut reached = Reached::Running;
    let ran = AssertUnwindSafe(execute(
        shared.clone(),
        job,
        info.clone(),
        signals.clone(),
        &mut reached,
    ))
    .catch_unwind()
    .instrument(span.clone())
    .await;
    if let Err(panic) = ran {
        let panic = crate::attempt::pipeline::panic_message(panic);
        let _entered = span.enter();
        after_a_panic(&shared, info, &signals, lease, reached, &panic);
    }
    // The execution slot and the claimer's permit: the next claim may take this one's place.
    drop(permits);
}

/// What [`run`] does when its execution panicked outside its handler (a bug, or application
/// code that got past the pipeline's guards): the entry would stay held, renewed for ever and
/// never rescued. Once the handler's code had ended, the job still gets what its end
/// promises: a shutdown's stop waits for the drain's release (uncounted), a timeout is written
/// as a timeout, anything else as the attempt's panic (retried per its policy). Before that,
/// its code may still run (in a task of its own, aborted with this one, but only dropped at
/// its next `.await`), so nothing is written: its lease is no longer renewed, runs out, and
/// the rescuer takes the job.
fn after_a_panic<S: Store>(
    shared: &Shared<S>,
    info: Arc<AttemptInfo>,
    signals: &Signals,
    lease: Lease,
    reached: Reached,
    panic: &str,
) {
    let panic = crate::model::text::storable_text(panic, crate::model::text::MAX_ERROR_MESSAGE);
    let (ran_for, timed_out, backoff, unstorable_step) = match reached {
        Reached::Ended {
            ran_for,
            timed_out,
            backoff,
            unstorable_step,
        } => (ran_for, timed_out, backoff, unstorable_step),
        Reached::Handed => return,
        Reached::Running => {
            if shared.inflight.remove(&lease) {
                tracing::error!(
                    id = lease.id,
                    %panic,
                    "the execution panicked outside its handler: its lease is left to run \
                     out, and the rescuer takes the job"
                );
            }
            return;
        }
    };
    let end = match signals.reason() {
        // A step's effect happened: the job ends `step_unstorable`, as `conclude` ends it.
        None | Some(Abort::Held | Abort::Shutdown) if unstorable_step.is_some() => None,
        None => Some(match timed_out {
            Some(timeout) => AttemptEnd::TimedOut(timeout),
            None => AttemptEnd::Panicked(format!(
                "the execution panicked outside its handler once its code had ended: {panic}"
            )),
        }),
        Some(Abort::Held) => Some(AttemptEnd::LeaseHeld),
        Some(Abort::Shutdown) => {
            if shared.inflight.holds(&lease) {
                tracing::error!(
                    id = lease.id,
                    %panic,
                    "the execution panicked outside its handler once its stopped code had \
                     ended: its lease waits for the drain's release"
                );
                shared.inflight.ended_unfinished(&lease, ran_for);
            }
            return;
        }
        // Taken away: nothing is written (see `execute`).
        Some(_) => {
            shared.inflight.remove(&lease);
            return;
        }
    };
    let Some(last_progress) = shared.inflight.set_finalizing(&lease, Instant::now()) else {
        shared.inflight.remove(&lease);
        return;
    };
    let outcome = match (end, unstorable_step) {
        (Some(end), _) => {
            let seed = shared.rng.lock().unwrap_or_else(|e| e.into_inner()).u64(..);
            Outcome::classify(
                end,
                &info,
                signals.cancel_requested(),
                &backoff,
                &mut fastrand::Rng::with_seed(seed),
            )
        }
        (None, message) => Outcome::Discard {
            failure: Failure {
                attempt: info.attempt,
                class: ErrorClass::StepUnstorable,
                message: message.unwrap_or_default(),
            },
        },
    };
    tracing::error!(
        id = lease.id,
        %panic,
        outcome = outcome.name(),
        "the execution panicked outside its handler once its code had ended: writing its outcome"
    );
    let labels = shared.labels(&info);
    let _ = shared.completions.send(Completion {
        finalize: Finalize {
            result: None,
            lease,
            outcome,
        },
        info,
        finalized_by_handler: signals.finalized_by_handler()
            && signals.reason() != Some(Abort::Held),
        last_progress,
        tried: false,
        alone: false,
        abort: signals.flags.clone(),
        labels,
        ran_for: Some(ran_for),
    });
}

async fn execute<S: Store>(
    shared: Arc<Shared<S>>,
    job: ClaimedJob,
    info: Arc<AttemptInfo>,
    signals: Signals,
    reached: &mut Reached,
) {
    let lease = job.lease;
    let labels = shared.labels(&info);
    if shared.crashes_at(FaultPoint::AfterClaim, &info) {
        shared.inflight.remove(&lease);
        return;
    }
    let Some(handler) = shared.registry.get(&info.kind).cloned() else {
        // The claim only takes registered kinds; should a store hand over another, give it back
        // untouched for a worker that knows it.
        tracing::error!("claimed a kind this worker does not know; releasing it");
        Box::pin(give_back_unstarted(&shared, lease, false)).await;
        return;
    };
    let options = handler.options();
    if shared.claimed_before_its_breaker_tripped(&info.kind, &lease) {
        // Its kind's breaker tripped while it waited for a slot: it goes back unstarted (the
        // attempt not counted) and waits, paused, with the kind's other jobs.
        tracing::debug!("the kind's circuit breaker tripped since the claim: giving it back");
        Box::pin(give_back_unstarted(&shared, lease, false)).await;
        return;
    }
    let Some(claimed) = shared
        .inflight
        .start(&lease, options.timeout, Instant::now())
    else {
        Box::pin(not_started(&shared, &labels, &signals, lease)).await;
        return;
    };
    // Before anything of the job runs (its payload's decoding included: a payload that kills
    // its worker must use up its attempts, not be retried uncounted for ever).
    if job.attempt >= job.max_attempts
        && !Box::pin(record_last_start(&shared, &labels, &signals, lease)).await
    {
        return;
    }
    let hooks = Arc::new(Hooks {
        labels: labels.clone(),
        shared: shared.clone(),
        steps: StoreSteps::new(shared.store.clone(), lease).sharing(shared.step_calls.clone()),
        lease,
        info: info.clone(),
        flags: signals.flags.clone(),
    });
    let ctx = JobContext::for_worker(
        info.clone(),
        lease,
        shared.state.clone(),
        signals.stop.clone(),
    )
    .with_hooks(hooks);
    let view = ctx.clone();
    let mut ran = None;
    let outcome = match start_attempt(&*handler, &job.payload, job.payload_version, ctx) {
        Err(poison) => poison,
        Ok(future) => {
            if shared.crashes_at(FaultPoint::BeforePerform, &info) {
                shared.inflight.remove(&lease);
                // Never polled, it holds the decoded payload, application code's.
                crate::attempt::pipeline::drop_quietly("the handler's future", future);
                return;
            }
            let started = Instant::now();
            // The part of its queue wait spent in this worker (waiting for a slot, or for
            // the runtime): since its claim was sent.
            labels.started(job.waited + started.saturating_duration_since(claimed));
            let task = run_task(
                future,
                options.timeout,
                signals.flags.abort.cancelled(),
                |cause| {
                    if cause == StopCause::TimedOut {
                        signals.stop.stop(StopReason::TimedOut);
                    }
                    shared.inflight.stopping(&lease, Instant::now());
                },
            )
            .await;
            // Blocking work the handler started through `JobContext::blocking` cannot be
            // stopped: the execution is over only when it has returned too.
            let work = view.work();
            work.close();
            if !work.is_empty() {
                shared.inflight.stopping(&lease, Instant::now());
                work.wait().await;
            }
            let ran_for = started.elapsed();
            ran = Some(ran_for);
            *reached = Reached::Ended {
                ran_for,
                timed_out: (task.stopped == Some(StopCause::TimedOut)).then_some(options.timeout),
                backoff: options.backoff,
                unstorable_step: view.unstorable_step().map(str::to_owned),
            };
            if task.stopped.is_some() {
                tracing::debug!(?ran_for, "the stopped handler's code has ended");
            }
            if signals.flags.abort.is_cancelled() {
                match signals.reason().unwrap_or(Abort::LeaseLost) {
                    Abort::LeaseLost => {
                        bump(&shared.counters.lease_lost, 1);
                        labels.lease_lost();
                        tracing::warn!("lease lost: execution stopped, nothing will be written");
                        shared.inflight.remove(&lease);
                        return;
                    }
                    // A step whose output could not be stored ran its effect: given back,
                    // the job would run it again. It ends as `step_unstorable` instead, if the
                    // store still holds the lease (guarded by its token, as a release is).
                    Abort::Fenced if view.unstorable_step().is_some() => {
                        shared.inflight.remove(&lease);
                        let failure = Failure {
                            attempt: info.attempt,
                            class: ErrorClass::StepUnstorable,
                            message: view.unstorable_step().unwrap_or_default().to_owned(),
                        };
                        let end = Finalize::new(lease, Outcome::Discard { failure });
                        Box::pin(discard_fenced(&shared, &info, &labels, end, ran)).await;
                        return;
                    }
                    // Counted by the keeper, which fenced it. Its code has ended now: its
                    // lease is given back if the store still holds it (the outage over; the
                    // release is guarded by the token, so it changes nothing if the job was
                    // rescued or taken since), the attempt not counted, as a shutdown's
                    // interruption is. Left to run out, the lease cost the job an attempt for
                    // the outage (a dead letter on its last), and a lease's wait.
                    Abort::Fenced => {
                        tracing::warn!(
                            "fenced: execution stopped, nothing will be written; giving its \
                             lease back"
                        );
                        shared.inflight.remove(&lease);
                        Box::pin(give_back(&shared, Release::interrupted(lease, ran_for))).await;
                        return;
                    }
                    // Stopped while its own transaction held the job's row: the lease is
                    // still this worker's, and the attempt is written as failed below.
                    Abort::Held => {
                        tracing::warn!(
                            "fenced while the handler's own transaction held the job's row: \
                             execution stopped, writing the attempt as failed (lease_held)"
                        );
                    }
                    Abort::Finalized => {
                        shared.inflight.remove(&lease);
                        completed_by_its_transaction(&shared, &info, &labels, ran);
                        return;
                    }
                    Abort::Crash => {
                        shared.inflight.remove(&lease);
                        return;
                    }
                    // Stopped by the drain: the lease is released once every execution had its
                    // chance, the attempt not counted, unless the handler said how the job
                    // ends (it succeeded, or chose to discard, cancel or snooze it); then that
                    // is written like any outcome. Whether the handler returned before or
                    // after the executor saw the stop is a race between threads, so it
                    // decides nothing: a cooperative handler's error on being stopped is the
                    // stop, not a failed attempt (counted, it made dead letters of jobs on
                    // their last attempt at every deploy).
                    // A step whose output could not be stored decided it too: its effect
                    // happened, and the job ends as `step_unstorable` (given back, it would
                    // run the effect again at every deploy).
                    // Stopped after its own transaction finished the job (`complete_in`, then
                    // code after the commit that outlived the drain): nothing to give back,
                    // and the job completed. Counted so, and the point after finalize asked,
                    // as when the completer or the lease keeper sees that commit; given back
                    // unfinished, it was counted nowhere and its release found no lease.
                    Abort::Shutdown
                        if !task.decided()
                            && view.unstorable_step().is_none()
                            && signals.finalized_by_handler()
                            && super::keeper::finished(
                                &shared.store,
                                info.id,
                                FINISHED_READ_WITHIN,
                            )
                            .await =>
                    {
                        shared.inflight.remove(&lease);
                        completed_by_its_transaction(&shared, &info, &labels, ran);
                        return;
                    }
                    Abort::Shutdown if !task.decided() && view.unstorable_step().is_none() => {
                        shared.inflight.ended_unfinished(&lease, ran_for);
                        return;
                    }
                    Abort::Shutdown => {}
                }
            }
            if shared.crashes_at(FaultPoint::AfterPerform, &info) {
                shared.inflight.remove(&lease);
                return;
            }
            if task.stopped == Some(StopCause::TimedOut) {
                tracing::warn!(
                    timeout = ?options.timeout,
                    ?ran_for,
                    "the attempt ran over its timeout; its code has ended: writing a retry"
                );
            }
            let end = if signals.reason() == Some(Abort::Held) {
                AttemptEnd::LeaseHeld
            } else {
                task.into_attempt_end(options.timeout)
            };
            match &end {
                AttemptEnd::Panicked(message) => {
                    bump(&shared.counters.panics, 1);
                    tracing::error!(
                        panic = %crate::model::text::storable_text(message, crate::model::text::MAX_ERROR_MESSAGE),
                        "handler panicked"
                    );
                }
                AttemptEnd::TimedOut(_) => bump(&shared.counters.timeouts, 1),
                AttemptEnd::Returned(_) | AttemptEnd::LeaseHeld => {}
            }
            // Seeded from the worker's source, so that the worker-wide lock is not held while
            // the handler's error is shown (its `Display` is application code).
            let seed = shared.rng.lock().unwrap_or_else(|e| e.into_inner()).u64(..);
            conclude(
                end,
                &view,
                signals.cancel_requested(),
                &options.backoff,
                job.snoozes,
                &mut fastrand::Rng::with_seed(seed),
            )
        }
    };
    if shared.crashes_at(FaultPoint::BeforeFinalize, &info) {
        shared.inflight.remove(&lease);
        return;
    }
    // A handler stopped by the `Held` fence never committed: its transaction was dropped with
    // it, and whatever happens to the lease now, the job was not completed by it.
    let finalized_by_handler =
        signals.finalized_by_handler() && signals.reason() != Some(Abort::Held);
    *reached = Reached::Handed;
    let Some(last_progress) = shared.inflight.set_finalizing(&lease, Instant::now()) else {
        shared.inflight.remove(&lease);
        match signals.reason() {
            // The keeper saw the handler's commit first (`InFlight::finished_by_handler`):
            // nothing goes to the completer, which would have counted it and asked the point.
            Some(Abort::Finalized) => completed_by_its_transaction(&shared, &info, &labels, ran),
            // Fenced while classifying: counted by the keeper; given back, as above.
            Some(Abort::Fenced) => {
                let ran_for = ran.unwrap_or_default();
                Box::pin(give_back(&shared, Release::interrupted(lease, ran_for))).await;
            }
            // Lost while classifying: another worker may own the job now.
            _ => {
                bump(&shared.counters.lease_lost, 1);
                labels.lease_lost();
            }
        }
        return;
    };
    let _ = shared.completions.send(Completion {
        finalize: Finalize {
            result: match outcome {
                Outcome::Complete => view.result(),
                _ => None,
            },
            lease,
            outcome,
        },
        info,
        finalized_by_handler,
        last_progress,
        tried: false,
        alone: false,
        abort: signals.flags.clone(),
        labels,
        ran_for: ran,
    });
}

/// How long a stopped execution whose handler finished its job in its own transaction waits
/// to read the job's row, to tell whether that transaction committed (else it is given back as
/// any stopped execution).
const FINISHED_READ_WITHIN: Duration = Duration::from_secs(1);

/// Counts a job its handler's own transaction completed (`complete_in`) when the lease keeper
/// found the commit before the completer got the outcome (or the drain stopped the code after
/// that commit), and asks [`FaultPoint::AfterFinalize`]
/// as the completer does once it has counted one: the job's completion is written, whoever
/// found it first. (Only the completer asked it, so whether the point fired for such a job
/// was a race between the keeper's heartbeat and the end of the handler's code.)
fn completed_by_its_transaction<S: Store>(
    shared: &Shared<S>,
    info: &AttemptInfo,
    labels: &crate::telemetry::JobLabels,
    ran: Option<Duration>,
) {
    // A success of the kind, for its circuit breaker, as the completer counts one: without
    // it, a kind whose handler goes on after its commit for longer than a heartbeat counted
    // only its failures, and its breaker tripped on them alone.
    shared.count_for_breaker(&info.kind, false);
    shared.counters.applied(&Outcome::Complete);
    labels.finished(&Outcome::Complete, ran);
    shared.crashes_at(FaultPoint::AfterFinalize, info);
}

/// A claimed job that will not start after all (its lease was taken away or lost while it
/// waited, or is too close to its end): counted, and given back unstarted unless it is lost.
async fn not_started<S: Store>(
    shared: &Shared<S>,
    labels: &crate::telemetry::JobLabels,
    signals: &Signals,
    lease: Lease,
) {
    match signals.reason() {
        // Taken away while it waited: the keeper counted its fence; a lease the store
        // reported lost is counted here, as when a running job's outcome is dropped.
        Some(Abort::Fenced) => {}
        Some(Abort::LeaseLost) => {
            bump(&shared.counters.lease_lost, 1);
            labels.lease_lost();
            tracing::warn!("lease lost while the job waited for its start: not running it");
        }
        Some(_) => {}
        // The job waited so long for its start (a runtime whose threads were all busy, a
        // long wait in the prefetch buffer) that its lease is about to run out: running
        // it now could overlap its next owner.
        None => {
            bump(&shared.counters.fenced, 1);
            labels.fenced();
            tracing::warn!(
                "lease too close to its expiry when the job could start: not running it"
            );
        }
    }
    let fenced = signals.reason() == Some(Abort::Fenced);
    give_back_unstarted(shared, lease, fenced).await;
}

/// Tries of [`Store::record_start`] before a job's last attempt is given back unstarted, and
/// the wait after the first failed one (doubled after each).
const RECORD_TRIES: u32 = 3;
const RECORD_RETRY: Duration = Duration::from_millis(100);

/// Records the start of a job's last attempt before any of it runs ([`Store::record_start`]):
/// should this worker die before (a job that waited in the prefetch buffer), the rescuer
/// then does not count the attempt, and the job is retried instead of becoming a dead letter
/// that never ran. Other attempts are retried when they expire, started or not, and need no
/// record. Returns whether the job may run: not when the store finds the lease gone or run
/// out (counted as lost: the lease is left to run out, and the rescuer retries the job
/// uncounted), nor when the lease was taken away meanwhile, nor when the record failed
/// [`RECORD_TRIES`] times (a failure may be a record that committed and whose answer was
/// lost, so it is tried again before the job is given back unstarted: a committed record
/// whose give-back fails too leaves the job to the rescuer as started, the one case that still
/// makes a dead letter of an attempt that did not run). Its caller boxes it, as
/// [`give_back_unstarted`] is.
async fn record_last_start<S: Store>(
    shared: &Shared<S>,
    labels: &crate::telemetry::JobLabels,
    signals: &Signals,
    lease: Lease,
) -> bool {
    let mut wait = RECORD_RETRY;
    // Taken away (fenced, lost, a shutdown's deadline) before a try or while it was under
    // way: nothing of the job has run, and it goes back as any job that could not start.
    let taken_away = || signals.flags.abort.is_cancelled() || !shared.inflight.holds(&lease);
    for tried in 1..=RECORD_TRIES {
        if taken_away() {
            not_started(shared, labels, signals, lease).await;
            return false;
        }
        let recorded = shared.store.record_start(lease).await;
        if taken_away() {
            not_started(shared, labels, signals, lease).await;
            return false;
        }
        match recorded {
            Ok(true) => return true,
            Ok(false) => {
                if shared.inflight.remove(&lease) {
                    bump(&shared.counters.lease_lost, 1);
                    labels.lease_lost();
                    tracing::warn!(
                        "lease lost or run out before the last attempt could start: not running it"
                    );
                }
                return false;
            }
            Err(e) if tried < RECORD_TRIES => {
                tracing::warn!(
                    error = %e,
                    "could not record the start of the job's last attempt: trying again"
                );
                tokio::select! {
                    () = signals.flags.abort.cancelled() => {}
                    () = tokio::time::sleep(wait) => {}
                }
                wait *= 2;
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "could not record the start of the job's last attempt: giving it back unstarted"
                );
                give_back_unstarted(shared, lease, false).await;
            }
        }
    }
    false
}

/// Gives back a claimed job whose handler did not start: available again at once, the attempt
/// not counted. On failure the lease runs out in the store and the rescuer takes the job.
/// `fenced`: this worker fenced the lease itself (its heartbeats failed for two thirds of it)
/// while the job waited; the store may well still hold it, the outage over, and the release,
/// guarded by the lease's token, gives it back if so and changes nothing if not. Left to run
/// out instead, the lease cost the job an attempt it never ran (a dead letter on its last).
/// Its callers box it: it is rare, and its store future, held inline, would make every
/// execution's future larger (and so its allocation slower).
async fn give_back_unstarted<S: Store>(shared: &Shared<S>, lease: Lease, fenced: bool) {
    if shared.inflight.remove(&lease) || fenced {
        give_back(shared, Release::unstarted(lease)).await;
    }
}

/// Writes `end`, the discard of the job of a fenced execution (a step whose output could not
/// be stored: its effect happened), guarded by the lease's token: a no-op when the job was
/// rescued or taken since. Counted as the completer counts what it writes (the keeper counted
/// the fence). On failure the lease runs out in the store and the rescuer takes the job.
/// Boxed by its caller, as [`give_back`] is.
async fn discard_fenced<S: Store>(
    shared: &Shared<S>,
    info: &AttemptInfo,
    labels: &crate::telemetry::JobLabels,
    end: Finalize,
    ran: Option<Duration>,
) {
    let written = match shared.store.finalize(std::slice::from_ref(&end)).await {
        Ok(done) => done.first().copied(),
        Err(e) => {
            tracing::warn!(
                error = %e,
                "fenced after a step whose output could not be stored, and its discard \
                 failed: the lease runs out"
            );
            return;
        }
    };
    let outcome = match written {
        Some(Finalized::Applied) => end.outcome,
        // A cancel was requested meanwhile: the discard was written as a cancellation.
        Some(Finalized::Cancelled) => super::completer::discard_written_as_cancellation(),
        _ => {
            tracing::warn!(
                ?written,
                "fenced after a step whose output could not be stored: the lease is gone, \
                 nothing written"
            );
            return;
        }
    };
    // The attempt failed, whatever was written (as the completer counts it).
    shared.count_for_breaker(&info.kind, true);
    shared.counters.applied(&outcome);
    labels.finished(&outcome, ran);
    tracing::warn!(
        id = info.id,
        kind = %info.kind,
        outcome = outcome.name(),
        "fenced after a step whose output could not be stored: execution stopped, the job \
         ended (step_unstorable)"
    );
}

/// Gives back one lease (guarded by its token in the store), counting it when it was given
/// back. On failure (the store unreachable) the lease runs out and the rescuer takes the job.
/// An execution this worker fenced gives its lease back this way once its code has ended:
/// see the `Abort::Fenced` arm of [`execute`].
async fn give_back<S: Store>(shared: &Shared<S>, release: Release) {
    match shared.store.release(&[release]).await {
        Ok(0) if release.ran_for.is_some() => tracing::warn!(
            id = release.lease.id,
            "an interrupted execution was not given back: the store no longer holds its lease, \
             or the job was given back uncounted {} times already (its lease runs out and the \
             rescuer counts this attempt)",
            crate::MAX_REFUNDED_INTERRUPTIONS
        ),
        Ok(n) => shared.counters.released(n),
        Err(e) => tracing::warn!(error = %e, id = release.lease.id, "a lease's release failed"),
    }
}

/// What a [`JobContext`] asks of the worker: the job's steps from the store, step fault
/// points, and stopping the execution when a step finds its lease gone.
struct Hooks<S> {
    labels: crate::telemetry::JobLabels,
    shared: Arc<Shared<S>>,
    steps: StoreSteps<S>,
    lease: Lease,
    info: Arc<AttemptInfo>,
    /// Of the execution's signals, what the hooks set (not the whole, whose tokens are
    /// costlier to clone).
    flags: Arc<Flags>,
}

impl<S: Store> AttemptHooks for Hooks<S> {
    fn load_steps(&self) -> BoxFuture<'_, Result<HashMap<String, String>, StoreError>> {
        self.steps.load_steps()
    }

    fn load_steps_up_to(
        &self,
        max_bytes: usize,
    ) -> BoxFuture<'_, Result<crate::attempt::step::LoadedSteps, StoreError>> {
        self.steps.load_steps_up_to(max_bytes)
    }

    fn load_step<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<String>, StoreError>> {
        self.steps.load_step(name)
    }

    fn save_step<'a>(
        &'a self,
        name: &'a str,
        output: &'a str,
    ) -> BoxFuture<'a, Result<Finalized, StoreError>> {
        self.steps.save_step(name, output)
    }

    fn crash_at(&self, point: FaultPoint, name: &str) -> bool {
        let crashed = self
            .shared
            .faults
            .as_ref()
            .is_some_and(|f| f.at_step(point, name, &self.info) == Fault::Crash);
        if crashed {
            bump(&self.shared.counters.crashed, 1);
            tracing::warn!(%point, step = name, "injected crash");
            // As a killed process: the abort makes the executor drop the handler; nothing
            // more is written, and the lease runs out in the store.
            self.shared.inflight.abort_lease(&self.lease, Abort::Crash);
        }
        crashed
    }

    fn lease_lost(&self) {
        self.shared
            .inflight
            .abort_lease(&self.lease, Abort::LeaseLost);
    }

    fn lease_held(&self) -> bool {
        self.shared.inflight.holds(&self.lease)
    }

    fn finalized_in_transaction(&self) {
        self.flags.set_finalized_by_handler();
    }

    fn progress(&self, progress: String) {
        tracing::debug!(%progress, "progress");
        self.labels.progress();
        self.shared.inflight.set_progress(&self.lease, progress);
    }
}
