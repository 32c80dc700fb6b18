//! Writes outcomes in batches: whatever accumulated while the previous statement ran goes in
//! the next one. Every write stays guarded by its lease token; an outcome is never dropped
//! because of batching, only because its lease was lost.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::context::AttemptInfo;
use crate::fault::FaultPoint;
use crate::outcome::Outcome;
use crate::store::{Finalize, Finalized, Store};

use super::run::Shared;
use super::stats::bump;

/// An outcome on its way to the store.
pub(crate) struct Completion {
    pub(crate) finalize: Finalize,
    pub(crate) info: Arc<AttemptInfo>,
    /// The handler finalized the job in its own transaction: a lost lease is expected.
    pub(crate) finalized_by_handler: bool,
}

pub(crate) async fn run<S: Store>(
    shared: Arc<Shared<S>>,
    mut rx: mpsc::UnboundedReceiver<Completion>,
    stop: CancellationToken,
) {
    let max = shared.config.finalize_batch;
    let mut batch = Vec::with_capacity(max.min(1024));
    loop {
        let first = tokio::select! {
            biased;
            c = rx.recv() => c,
            _ = stop.cancelled() => None,
        };
        match first {
            Some(c) => batch.push(c),
            None => {
                // Stopping: every executor is done, so whatever is queued is all there is.
                while let Ok(c) = rx.try_recv() {
                    batch.push(c);
                }
                if batch.is_empty() {
                    return;
                }
            }
        }
        while batch.len() < max {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        flush(&shared, &mut batch).await;
    }
}

async fn flush<S: Store>(shared: &Shared<S>, batch: &mut Vec<Completion>) {
    let mut failures = 0u32;
    loop {
        // An outcome whose lease this worker no longer holds (fenced while the store was
        // unreachable) must not be written: another worker may own the job.
        batch.retain(|c| {
            let held = shared.inflight.holds(&c.finalize.lease);
            if !held && c.finalized_by_handler {
                shared.counters.applied(&Outcome::Complete);
            } else if !held {
                bump(&shared.counters.lease_lost, 1);
                tracing::warn!(
                    id = c.info.id,
                    "outcome dropped: lease lost before it was written"
                );
            }
            held
        });
        if batch.is_empty() {
            return;
        }
        let items: Vec<Finalize> = batch.iter().map(|c| c.finalize.clone()).collect();
        match shared.store.finalize(&items).await {
            Ok(results) => {
                for (c, result) in batch.drain(..).zip(results) {
                    shared.inflight.remove(&c.finalize.lease);
                    match result {
                        Finalized::Applied => {
                            shared.counters.applied(&c.finalize.outcome);
                            tracing::debug!(
                                id = c.info.id,
                                outcome = c.finalize.outcome.name(),
                                "finalized"
                            );
                        }
                        Finalized::LeaseLost if c.finalized_by_handler => {
                            // The handler's own transaction completed the job.
                            shared.counters.applied(&Outcome::Complete);
                            tracing::debug!(
                                id = c.info.id,
                                "finalized by the handler's own transaction"
                            );
                        }
                        Finalized::LeaseLost => {
                            bump(&shared.counters.lease_lost, 1);
                            tracing::warn!(
                                id = c.info.id,
                                outcome = c.finalize.outcome.name(),
                                "stale lease: outcome dropped, not applied"
                            );
                        }
                    }
                    shared.crashes_at(FaultPoint::AfterFinalize, &c.info);
                }
                return;
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(error = %e, pending = batch.len(), "finalize failed; retrying");
                let pause = Duration::from_millis(20) * failures.min(50);
                tokio::time::sleep(pause).await;
            }
        }
    }
}
