//! Runs one claimed job: decode, perform under its timeout, classify the result into an
//! [`Outcome`], hand it to the completer. A panic, a timeout or a lease loss never takes the
//! worker down.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use crate::context::{AttemptInfo, JobContext};
use crate::error::JobError;
use crate::fault::FaultPoint;
use crate::outcome::{ErrorClass, Failure, Outcome};
use crate::store::{ClaimedJob, Finalize, Store};

use super::completer::Completion;
use super::inflight::{Abort, Signals};
use super::run::Shared;
use super::stats::bump;

enum Ended {
    Returned(Result<(), JobError>),
    Panicked(String),
    TimedOut(Duration),
    Aborted(Abort),
}

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
                failure: failure(&info, ErrorClass::Poison, poison.0),
            }
        }
        Ok(future) => {
            if shared.crashes_at(FaultPoint::BeforePerform, &info) {
                shared.inflight.remove(&lease);
                return;
            }
            let mut task = tokio::spawn(future.in_current_span());
            let ended = tokio::select! {
                joined = &mut task => match joined {
                    Ok(result) => Ended::Returned(result),
                    Err(e) if e.is_panic() => Ended::Panicked(panic_message(e.into_panic())),
                    Err(_) => Ended::Panicked("handler task was cancelled".into()),
                },
                _ = tokio::time::sleep(options.timeout) => Ended::TimedOut(options.timeout),
                _ = signals.abort.cancelled() => Ended::Aborted(
                    signals.reason.get().copied().unwrap_or(Abort::LeaseLost),
                ),
            };
            task.abort();
            if shared.crashes_at(FaultPoint::AfterPerform, &info) {
                shared.inflight.remove(&lease);
                return;
            }
            match classify(&shared, &info, ended, signals.cancel.is_cancelled()) {
                Some(outcome) => outcome,
                None => return,
            }
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

/// Maps how the attempt ended to what the store should record; `None` when nothing may be
/// written (the lease is gone, or shutdown will release it).
fn classify<S>(
    shared: &Shared<S>,
    info: &AttemptInfo,
    ended: Ended,
    cancel_requested: bool,
) -> Option<Outcome> {
    let outcome = match ended {
        Ended::Returned(Ok(())) => Outcome::Complete,
        Ended::Returned(Err(JobError::Retryable(e))) if cancel_requested => Outcome::Cancel {
            reason: format!("cancellation requested; the attempt ended with: {e}"),
        },
        Ended::Returned(Err(JobError::Retryable(e))) => {
            retry_or_discard(shared, info, ErrorClass::Error, e.to_string())
        }
        Ended::Returned(Err(JobError::Terminal(e))) => Outcome::Discard {
            failure: failure(info, ErrorClass::Terminal, e.to_string()),
        },
        Ended::Returned(Err(JobError::Cancel(reason))) => Outcome::Cancel { reason },
        Ended::Returned(Err(JobError::Snooze(delay))) => Outcome::Snooze { delay },
        Ended::Panicked(message) => {
            bump(&shared.counters.panics, 1);
            tracing::error!(panic = %message, "handler panicked");
            retry_or_discard(shared, info, ErrorClass::Panic, message)
        }
        Ended::TimedOut(limit) => {
            bump(&shared.counters.timeouts, 1);
            let message = format!("attempt exceeded its timeout of {limit:?}");
            retry_or_discard(shared, info, ErrorClass::Timeout, message)
        }
        Ended::Aborted(Abort::LeaseLost) => {
            bump(&shared.counters.lease_lost, 1);
            tracing::warn!("lease lost: execution stopped, nothing will be written");
            return None;
        }
        Ended::Aborted(Abort::Shutdown | Abort::Crash) => return None,
    };
    Some(outcome)
}

fn retry_or_discard<S>(
    shared: &Shared<S>,
    info: &AttemptInfo,
    class: ErrorClass,
    message: String,
) -> Outcome {
    let failure = failure(info, class, message);
    if info.attempt >= info.max_attempts {
        return Outcome::Discard { failure };
    }
    let backoff = shared
        .registry
        .get(&info.kind)
        .map(|h| h.options().backoff)
        .unwrap_or_default();
    let delay = {
        let mut rng = shared.rng.lock().unwrap_or_else(|e| e.into_inner());
        backoff.delay(info.attempt.max(1) as u32, &mut rng)
    };
    Outcome::Retry { delay, failure }
}

fn failure(info: &AttemptInfo, class: ErrorClass, message: String) -> Failure {
    Failure {
        attempt: info.attempt,
        class,
        message,
    }
}

fn panic_message(payload: Box<dyn Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(s) => *s,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(s) => (*s).to_owned(),
            Err(_) => "handler panicked with a non-string payload".to_owned(),
        },
    }
}
