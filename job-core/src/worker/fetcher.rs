//! One fetcher per queue: claims as many due jobs as there are free slots, in one statement,
//! and hands each to an executor. It sleeps on a notification from the store, with polling as
//! the fallback for lost notifications and for jobs that become due by time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::context::AttemptInfo;
use crate::store::{ClaimRequest, Store};

use super::executor;
use super::run::Shared;

pub(crate) async fn run<S: Store>(
    shared: Arc<Shared<S>>,
    queue: String,
    concurrency: usize,
    wake: Arc<Notify>,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(concurrency));
    let kinds = shared.registry.claim_kinds();
    let leases: HashMap<String, Duration> =
        kinds.iter().map(|k| (k.kind.clone(), k.lease)).collect();
    let mut request = ClaimRequest {
        queue,
        kinds,
        limit: 0,
        worker_id: shared.config.id.clone(),
    };
    let max_batch = shared.config.claim_batch as usize;
    let mut failures = 0u32;
    loop {
        let first = tokio::select! {
            permit = slots.clone().acquire_owned() => permit.expect("semaphore is never closed"),
            _ = stop.cancelled() => return,
        };
        let mut permits = vec![first];
        while permits.len() < max_batch {
            match slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        request.limit = permits.len() as u32;
        let sent = Instant::now();
        let claimed = match shared.store.claim(&request).await {
            Ok(jobs) => {
                failures = 0;
                jobs
            }
            Err(e) => {
                failures += 1;
                drop(permits);
                let pause = shared
                    .config
                    .poll_interval
                    .min(Duration::from_millis(50) * failures.min(20));
                tracing::warn!(queue = %request.queue, error = %e, "claim failed");
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = stop.cancelled() => return,
                }
                continue;
            }
        };
        let asked = permits.len();
        let got = claimed.len();
        shared.counters.claimed(got);
        for (job, permit) in claimed.into_iter().zip(permits.drain(..)) {
            let lease_len = leases.get(&job.kind).copied().unwrap_or(Duration::ZERO);
            let info = Arc::new(AttemptInfo {
                id: job.lease.id,
                kind: job.kind.clone(),
                queue: job.queue.clone(),
                attempt: job.attempt,
                max_attempts: job.max_attempts,
            });
            let signals = shared
                .inflight
                .insert(job.lease, info.clone(), lease_len, sent);
            shared
                .executors
                .spawn(executor::run(shared.clone(), job, info, signals, permit));
        }
        drop(permits);
        if got < asked {
            // The queue had fewer due jobs than free slots: wait for news.
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(shared.config.poll_interval) => {}
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// Turns the store's wake-ups into per-queue notifications, resubscribing when the stream
/// ends (the store lost its connection).
pub(crate) async fn forward_wakeups<S: Store>(
    shared: Arc<Shared<S>>,
    wake: HashMap<String, Arc<Notify>>,
    stop: CancellationToken,
) {
    loop {
        let mut wakeups = tokio::select! {
            r = shared.store.listen() => match r {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for new jobs; polling only for now");
                    tokio::select! {
                        _ = tokio::time::sleep(shared.config.poll_interval) => continue,
                        _ = stop.cancelled() => return,
                    }
                }
            },
            _ = stop.cancelled() => return,
        };
        loop {
            tokio::select! {
                queue = wakeups.recv() => match queue {
                    Some(queue) => {
                        if let Some(n) = wake.get(&queue) {
                            n.notify_one();
                        }
                    }
                    None => break,
                },
                _ = stop.cancelled() => return,
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(shared.config.poll_interval) => {}
            _ = stop.cancelled() => return,
        }
    }
}
