//! Runs one claimed job: decode, perform under its timeout, classify the result into an
//! [`Outcome`] (snoozes bounded by [`DEFAULT_MAX_SNOOZES`]), hand it to the completer. A panic,
//! a timeout or a lease loss never takes the worker down. The handler's context reaches the
//! store for durable steps through [`Hooks`].

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use crate::context::{AttemptInfo, JobContext};
use crate::error::StoreError;
use crate::fault::{Fault, FaultPoint};
use crate::outcome::{run_attempt, AttemptEnd, ErrorClass, Failure, Outcome, DEFAULT_MAX_SNOOZES};
use crate::step::{AttemptHooks, BoxFuture};
use crate::store::{ClaimedJob, Finalize, Finalized, Lease, Store};

use super::completer::Completion;
use super::inflight::{Abort, Signals};
use super::run::Shared;
use super::stats::bump;

pub(crate) async fn run<S: Store>(
    shared: Arc<Shared<S>>,
    job: ClaimedJob,
    info: Arc<AttemptInfo>,
    signals: Signals,
    permits: (OwnedSemaphorePermit, OwnedSemaphorePermit),
) {
    let span = tracing::info_span!(
        "job",
        kind = %job.kind,
        id = job.lease.id,
        attempt = job.attempt,
        queue = %job.queue,
    );
    execute(shared, job, info, signals).instrument(span).await;
    // The execution slot and the claimer's permit: the next claim may take this one's place.
    drop(permits);
}

async fn execute<S: Store>(
    shared: Arc<Shared<S>>,
    job: ClaimedJob,
    info: Arc<AttemptInfo>,
    signals: Signals,
) {
    let lease = job.lease;
    if shared.crashes_at(FaultPoint::AfterClaim, &info) {
        shared.inflight.remove(&lease);
        return;
    }
    let Some(handler) = shared.registry.get(&info.kind).cloned() else {
        // The claim only takes registered kinds; should a store hand over another, give it back
        // untouched for a worker that knows it.
        tracing::error!("claimed a kind this worker does not know; releasing it");
        shared.inflight.remove(&lease);
        if let Err(e) = shared.store.release(&[lease]).await {
            tracing::warn!(error = %e, "release of unknown kind failed");
        }
        return;
    };
    let options = handler.options();
    let hooks = Arc::new(Hooks {
        shared: shared.clone(),
        lease,
        info: info.clone(),
        signals: signals.clone(),
    });
    let ctx = JobContext::new(
        (*info).clone(),
        lease,
        shared.state.clone(),
        signals.cancel.clone(),
    )
    .with_hooks(hooks);
    let outcome = match handler.start(&job.payload, job.payload_version, ctx) {
        Err(poison) => {
            tracing::error!(reason = %poison, "poison payload: discarding");
            Outcome::Discard {
                failure: Failure {
                    attempt: info.attempt,
                    class: ErrorClass::Poison,
                    message: poison.0,
                },
            }
        }
        Ok(future) => {
            if shared.crashes_at(FaultPoint::BeforePerform, &info) {
                shared.inflight.remove(&lease);
                return;
            }
            let ended = tokio::select! {
                biased;
                _ = signals.abort.cancelled() => None,
                end = run_attempt(future, options.timeout) => Some(end),
            };
            // An attempt that ended because it was aborted (its lease is gone, or shutdown
            // will release it) writes nothing, whatever the handler returned.
            let ended = match ended {
                Some(end) if !signals.abort.is_cancelled() => end,
                _ => {
                    match signals.reason.get().copied().unwrap_or(Abort::LeaseLost) {
                        Abort::LeaseLost => {
                            bump(&shared.counters.lease_lost, 1);
                            tracing::warn!(
                                "lease lost: execution stopped, nothing will be written"
                            );
                        }
                        Abort::Finalized => shared.counters.applied(&Outcome::Complete),
                        Abort::Shutdown | Abort::Crash => {}
                    }
                    return;
                }
            };
            if shared.crashes_at(FaultPoint::AfterPerform, &info) {
                shared.inflight.remove(&lease);
                return;
            }
            match &ended {
                AttemptEnd::Panicked(message) => {
                    bump(&shared.counters.panics, 1);
                    tracing::error!(panic = %message, "handler panicked");
                }
                AttemptEnd::TimedOut(_) => bump(&shared.counters.timeouts, 1),
                AttemptEnd::Returned(_) => {}
            }
            let mut rng = shared.rng.lock().unwrap_or_else(|e| e.into_inner());
            Outcome::classify(
                ended,
                &info,
                signals.cancel.is_cancelled(),
                &options.backoff,
                &mut rng,
            )
            .limit_snoozes(&info, job.snoozes, DEFAULT_MAX_SNOOZES)
        }
    };
    if shared.crashes_at(FaultPoint::BeforeFinalize, &info) {
        shared.inflight.remove(&lease);
        return;
    }
    let finalized_by_handler = signals.finalized_by_handler();
    if !shared.inflight.set_finalizing(&lease) {
        if signals.reason.get() == Some(&Abort::Finalized) {
            shared.counters.applied(&Outcome::Complete);
        } else {
            // Fenced or lost while classifying: another worker may own the job now.
            bump(&shared.counters.lease_lost, 1);
        }
        return;
    }
    let _ = shared.completions.send(Completion {
        finalize: Finalize { lease, outcome },
        info,
        finalized_by_handler,
    });
}

/// What a [`JobContext`] asks of the worker: the job's steps from the store, step fault
/// points, and stopping the execution when a step finds its lease gone.
struct Hooks<S> {
    shared: Arc<Shared<S>>,
    lease: Lease,
    info: Arc<AttemptInfo>,
    signals: Signals,
}

impl<S: Store> AttemptHooks for Hooks<S> {
    fn load_steps(&self) -> BoxFuture<'_, Result<HashMap<String, String>, StoreError>> {
        Box::pin(self.shared.store.load_steps(&self.lease))
    }

    fn save_step<'a>(
        &'a self,
        name: &'a str,
        output: &'a str,
    ) -> BoxFuture<'a, Result<Finalized, StoreError>> {
        Box::pin(self.shared.store.save_step(&self.lease, name, output))
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

    fn finalized_in_transaction(&self) {
        self.signals
            .finalized_by_handler
            .store(true, Ordering::Release);
    }
}
