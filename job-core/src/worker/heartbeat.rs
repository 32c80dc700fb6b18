//! One batched heartbeat per worker renews every lease it holds, every third of the shortest
//! lease. Leases the store could not renew are taken away at once; leases that could not be
//! renewed in time (database unreachable) are fenced before they can expire.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::fault::FaultPoint;
use crate::store::Store;

use super::inflight::Abort;
use super::run::Shared;
use super::stats::bump;

pub(crate) fn interval<S>(shared: &Shared<S>) -> Duration {
    shared.config.heartbeat_interval.unwrap_or_else(|| {
        let shortest = shared
            .registry
            .handlers()
            .map(|h| h.options().lease)
            .min()
            .unwrap_or(Duration::from_secs(30));
        shortest / 3
    })
}

pub(crate) async fn run<S: Store>(shared: Arc<Shared<S>>, stop: CancellationToken) {
    let every = interval(&shared);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Fencing does not wait for a heartbeat to return or time out: it checks four times per
    // period, so a stalled heartbeat or a late tick cannot eat the safety margin.
    let mut fence_tick = tokio::time::interval(every / 4);
    fence_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let beats = async {
        loop {
            tick.tick().await;
            beat(&shared, every).await;
        }
    };
    let fences = async {
        loop {
            fence_tick.tick().await;
            fence(&shared);
        }
    };
    tokio::select! {
        _ = beats => {}
        _ = fences => {}
        _ = stop.cancelled() => {}
    }
}

async fn beat<S: Store>(shared: &Shared<S>, every: Duration) {
    if shared.faults.is_some() {
        crash_injected(shared);
    }
    let renewals = shared.inflight.renewals();
    if !renewals.is_empty() {
        let sent = Instant::now();
        match tokio::time::timeout(every, shared.store.heartbeat(&renewals)).await {
            Ok(Ok(report)) => {
                shared.inflight.renewed(&renewals, &report.lost, sent);
                for id in &report.lost {
                    match shared.inflight.lost(*id) {
                        Some(Abort::Finalized) => tracing::debug!(
                            id,
                            "the handler's own transaction finalized the job: execution stopped"
                        ),
                        Some(_) => tracing::warn!(id, "lease lost: the job was taken over"),
                        None => {}
                    }
                }
                for id in report.cancel_requested {
                    shared.inflight.request_cancel(id);
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "heartbeat failed"),
            Err(_) => tracing::warn!(timeout = ?every, "heartbeat timed out"),
        }
    }
    fence(shared);
}

/// Self-fencing: stops every execution whose lease may expire within a third of its length.
fn fence<S>(shared: &Shared<S>) {
    let fenced = shared.inflight.fence(Instant::now());
    if !fenced.is_empty() {
        bump(&shared.counters.fenced, fenced.len() as u64);
        tracing::error!(
            jobs = ?fenced,
            "leases could not be renewed in time: stopped those executions before they expire"
        );
    }
}

/// Fault point `Heartbeat`: a crash there kills the execution without a word to the store.
fn crash_injected<S>(shared: &Shared<S>) {
    for (lease, info) in shared.inflight.running_infos() {
        if shared.crashes_at(FaultPoint::Heartbeat, &info) {
            shared.inflight.abort_lease(&lease, Abort::Crash);
        }
    }
}
