//! Runs one claimed job: decode, perform under its timeout, classify the result into an
//! [`Outcome`], hand it to the completer. A panic, a timeout or a lease loss never takes the
//! worker down.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use crate::context::{AttemptInfo, JobContext};
use crate::fault::FaultPoint;
use crate::outcome::{run_attempt, AttemptEnd, ErrorClass, Failure, Outcome};
use crate::store::{ClaimedJob, Finalize, Store};

use super::completer::Completion;
use super::inflight::{Abort, Signals};
use super::run::Shared;
use super::stats::bump;

pub(crate) async fn run<S: Store>(
    shared: Arc<Shared<S>>,
    job: ClaimedJob,
    info: Arc<AttemptInfo>,
    signals: Signals,
    permit: OwnedSemaphorePermit,
) {
    let span = tracing::info_span!(
        "job",
        kind = %job.kind,
        id = job.lease.id,
        attempt = job.attempt,
        queue = %job.queue,
    );
    execute(shared, job, info, signals).instrument(span).await;
    drop(permit);
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
    let ctx = JobContext::new(
        (*info).clone(),
        lease,
        shared.state.clone(),
        signals.cancel.clone(),
    );
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
                    let reason = signals.reason.get().copied().unwrap_or(Abort::LeaseLost);
                    if reason == Abort::LeaseLost {
                        bump(&shared.counters.lease_lost, 1);
                        tracing::warn!("lease lost: execution stopped, nothing will be written");
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
        }
    };
    if shared.crashes_at(FaultPoint::BeforeFinalize, &info) {
        shared.inflight.remove(&lease);
        return;
    }
    if !shared.inflight.set_finalizing(&lease) {
        // Fenced or lost while classifying: another worker may own the job now.
        bump(&shared.counters.lease_lost, 1);
        return;
    }
    let _ = shared.completions.send(Completion {
        finalize: Finalize { lease, outcome },
        info,
    });
}
