//! One fetcher per queue, in two halves joined in one task.
//!
//! The claimer holds `concurrency + prefetch` permits: it claims as many due jobs as it has
//! free permits (at most `claim_batch`), in one statement, and hands them to the dispatcher.
//! It sleeps on a notification from the store, with polling as the fallback for lost
//! notifications and for jobs that become due by time. The dispatcher starts each claimed job
//! as soon as one of the `concurrency` execution slots is free. With `prefetch` zero (the
//! default) a claim takes only free slots; with prefetch, the next claim runs while the jobs of
//! the previous one execute, which is what lets short jobs run at the database's batch rate.
//! A claimed job waiting in the buffer holds its lease like a running one: the heartbeat renews
//! it, a crash leaves it to the rescuer, and shutdown releases it at once. Prefetched jobs that
//! wait out `prefetch_ttl` (the slots are taken by long jobs) are given back for other workers,
//! and the claimer then takes no more than the free slots until the dispatcher next finds a
//! slot free with nothing waiting.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::contract::store::{ClaimRequest, ClaimedJob, Release, Store};
use crate::model::attempt_info::AttemptInfo;
use crate::model::error::StoreError;

use super::executor;
use super::inflight::Signals;
use super::shared::Shared;

/// A claimed job on its way to an execution slot, with the permit it holds in the claimer.
struct Claimed {
    job: ClaimedJob,
    info: Arc<AttemptInfo>,
    signals: Signals,
    held: OwnedSemaphorePermit,
    /// When its claim was sent.
    claimed_at: Instant,
}

/// What the claimer and the dispatcher of one queue share.
struct Lanes {
    /// The `concurrency` execution slots.
    slots: Arc<Semaphore>,
    /// Prefetched jobs waited out `prefetch_ttl` and were given back: claim no more than the
    /// free slots until the dispatcher next finds a slot free with nothing waiting.
    suspended: AtomicBool,
}

impl Lanes {
    /// The most jobs the next claim may take: the claim batch, or while prefetch is suspended
    /// the free slots (at most the batch).
    fn cap(&self, max_batch: usize) -> usize {
        if self.suspended.load(Ordering::Acquire) {
            self.slots.available_permits().min(max_batch)
        } else {
            max_batch
        }
    }
}

pub(crate) async fn run<S: Store>(
    shared: Arc<Shared<S>>,
    queue: String,
    concurrency: usize,
    wake: Arc<Notify>,
    stop: CancellationToken,
) -> u64 {
    let (tx, rx) = mpsc::unbounded_channel();
    let held = Arc::new(Semaphore::new(concurrency + shared.config.prefetch));
    let lanes = Lanes {
        slots: Arc::new(Semaphore::new(concurrency)),
        suspended: AtomicBool::new(false),
    };
    let claimer = claim_loop(&shared, queue, held, &lanes, tx, &wake, &stop);
    let dispatcher = dispatch(&shared, &lanes, rx, &stop);
    let ((), unstarted) = tokio::join!(claimer, dispatcher);
    give_back(&shared, unstarted).await
}

/// The most claim statements of one queue in flight at once. A claim's cost grows with the
/// rows it takes, so while one runs, a second one for the permits freed since can use the
/// database's other cores; beyond two, they mostly wait on each other's locks.
const CLAIMS_IN_FLIGHT: usize = 2;

/// What one claim statement returned, with the permits it was made for.
struct ClaimResult {
    claimed: Result<Vec<ClaimedJob>, StoreError>,
    permits: Vec<OwnedSemaphorePermit>,
    sent: Instant,
}

async fn claim_loop<S: Store>(
    shared: &Arc<Shared<S>>,
    queue: String,
    held: Arc<Semaphore>,
    lanes: &Lanes,
    tx: mpsc::UnboundedSender<Claimed>,
    wake: &Notify,
    stop: &CancellationToken,
) {
    let mut kinds = shared.registry.claim_kinds();
    for kind in &mut kinds {
        kind.lease = shared.config.lease_of(kind.lease);
    }
    let leases: HashMap<String, Duration> =
        kinds.iter().map(|k| (k.kind.clone(), k.lease)).collect();
    let request = Arc::new(ClaimRequest {
        queue,
        kinds,
        limit: 0,
        worker_id: shared.config.id.clone(),
    });
    let max_batch = shared.config.claim_batch as usize;
    // A second claim waits for enough free permits to be worth a statement of its own.
    let second_claim_min = (max_batch.min(held.available_permits()) / 2).max(1);
    let mut claims: JoinSet<ClaimResult> = JoinSet::new();
    let mut failures = 0u32;
    // Set when a claim found fewer due jobs than it asked for: no new claim until a
    // notification, the poll interval, or (after a failure) the pause has passed.
    let mut idle_until: Option<Instant> = None;
    loop {
        let suspended = lanes.suspended.load(Ordering::Acquire);
        let cap = lanes.cap(max_batch);
        let want = if claims.is_empty() {
            1
        } else {
            second_claim_min.min(cap.max(1))
        };
        let may_claim = claims.len() < CLAIMS_IN_FLIGHT && idle_until.is_none() && cap > 0;
        let wait_for_slot = suspended && cap == 0 && claims.is_empty() && idle_until.is_none();
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            done = claims.join_next(), if !claims.is_empty() => {
                let Some(Ok(result)) = done else { continue };
                let asked = result.permits.len();
                match accept(shared, &leases, &tx, result) {
                    Ok(got) => {
                        failures = 0;
                        if got < asked && idle_until.is_none() {
                            idle_until = Some(Instant::now() + shared.config.poll_interval);
                        }
                    }
                    Err(e) => {
                        failures += 1;
                        let pause = shared
                            .config
                            .poll_interval
                            .min(Duration::from_millis(50) * failures.min(20));
                        tracing::warn!(queue = %request.queue, error = %e, "claim failed");
                        idle_until = Some(Instant::now() + pause);
                    }
                }
            }
            first = held.clone().acquire_many_owned(want as u32), if may_claim => {
                let first = first.expect("semaphore is never closed");
                // The dispatcher may have suspended prefetch while this waited.
                let cap = lanes.cap(max_batch);
                if cap == 0 {
                    continue;
                }
                let mut permits = vec![first];
                let mut n = want;
                while n < cap {
                    match held.clone().try_acquire_owned() {
                        Ok(p) => {
                            permits.push(p);
                            n += 1;
                        }
                        Err(_) => break,
                    }
                }
                let (shared, request) = (shared.clone(), request.clone());
                claims.spawn(async move {
                    let mut request = ClaimRequest::clone(&request);
                    request.limit = n as u32;
                    let sent = Instant::now();
                    let claimed = shared.store.claim(&request).await;
                    // One permit per job: split the first, which may stand for several.
                    let permits = split(permits, n);
                    ClaimResult { claimed, permits, sent }
                });
            }
            // Suspended with every slot taken: look again when one frees.
            _ = lanes.slots.acquire(), if wait_for_slot => {}
            _ = wake.notified(), if idle_until.is_some() && failures == 0 => idle_until = None,
            _ = sleep_until_or_forever(idle_until), if idle_until.is_some() => idle_until = None,
        }
    }
    // Stopping: a claim in flight may have taken rows; hand them over so they are released.
    while let Some(done) = claims.join_next().await {
        if let Ok(result) = done {
            let _ = accept(shared, &leases, &tx, result);
        }
    }
}

/// Records the leases of a claim's jobs and hands the jobs to the dispatcher, each with a
/// permit; permits left over go back. Returns how many jobs the claim took.
fn accept<S: Store>(
    shared: &Shared<S>,
    leases: &HashMap<String, Duration>,
    tx: &mpsc::UnboundedSender<Claimed>,
    result: ClaimResult,
) -> Result<usize, StoreError> {
    let ClaimResult {
        claimed,
        mut permits,
        sent,
    } = result;
    let claimed = claimed?;
    let got = claimed.len();
    shared.counters.claimed(got);
    for (job, held) in claimed.into_iter().zip(permits.drain(..)) {
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
        // The dispatcher outlives the claimer (it drains the channel until it closes).
        let _ = tx.send(Claimed {
            job,
            info,
            signals,
            held,
            claimed_at: sent,
        });
    }
    Ok(got)
}

/// Splits permits (the first of which may hold several) into `n` permits of one each.
fn split(mut permits: Vec<OwnedSemaphorePermit>, n: usize) -> Vec<OwnedSemaphorePermit> {
    let mut out = Vec::with_capacity(n);
    if !permits.is_empty() {
        let mut first = permits.remove(0);
        while first.num_permits() > 1 {
            if let Some(one) = first.split(1) {
                out.push(one);
            }
        }
        out.push(first);
    }
    out.append(&mut permits);
    out
}

async fn sleep_until_or_forever(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Starts each claimed job when an execution slot is free, and gives back prefetched jobs that
/// waited out `prefetch_ttl`. Returns, once stopped, the jobs that never started.
async fn dispatch<S: Store>(
    shared: &Arc<Shared<S>>,
    lanes: &Lanes,
    mut rx: mpsc::UnboundedReceiver<Claimed>,
    stop: &CancellationToken,
) -> Vec<Claimed> {
    let ttl = shared.config.prefetch_ttl;
    let prefetching = shared.config.prefetch > 0;
    // Jobs taken back after a failed give-back, ahead of the channel.
    let mut waiting: VecDeque<Claimed> = VecDeque::new();
    // After a failed give-back, the next try waits another `ttl`.
    let mut retry_at: Option<Instant> = None;
    let mut unstarted = Vec::new();
    loop {
        let next = match waiting.pop_front() {
            Some(next) => next,
            None => {
                if rx.is_empty() && lanes.slots.available_permits() > 0 {
                    // A slot is free and nothing waits for it: prefetch again.
                    lanes.suspended.store(false, Ordering::Release);
                }
                let next = tokio::select! {
                    biased;
                    _ = stop.cancelled() => break,
                    next = rx.recv() => next,
                };
                let Some(next) = next else { break };
                next
            }
        };
        let slot = match lanes.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                let expires = (next.claimed_at + ttl).max(retry_at.unwrap_or(next.claimed_at));
                tokio::select! {
                    biased;
                    _ = stop.cancelled() => {
                        unstarted.push(next);
                        break;
                    }
                    slot = lanes.slots.clone().acquire_owned() => {
                        slot.expect("semaphore is never closed")
                    }
                    _ = tokio::time::sleep_until(expires), if prefetching => {
                        let mut stale = vec![next];
                        stale.extend(waiting.drain(..));
                        while let Ok(c) = rx.try_recv() {
                            stale.push(c);
                        }
                        match release(shared, stale).await {
                            Ok(released) => {
                                lanes.suspended.store(true, Ordering::Release);
                                retry_at = None;
                                tracing::info!(
                                    released,
                                    waited = ?ttl,
                                    "gave back prefetched jobs that found no free slot"
                                );
                            }
                            Err(kept) => {
                                // `release` logged why; keep them and try again after `ttl`.
                                waiting.extend(kept);
                                retry_at = Some(Instant::now() + ttl);
                            }
                        }
                        continue;
                    }
                }
            }
        };
        let Claimed {
            job,
            info,
            signals,
            held,
            claimed_at: _,
        } = next;
        shared.executors.spawn(executor::run(
            shared.clone(),
            job,
            info,
            signals,
            (slot, held),
        ));
    }
    unstarted.extend(waiting);
    // The claimer stops too; what it claimed before it saw the stop comes through here.
    while let Some(next) = rx.recv().await {
        unstarted.push(next);
    }
    unstarted
}

/// Releases the leases of claimed jobs that never started: back to `available`, the attempt
/// not counted. Returns how many the store released, or the jobs when it failed.
async fn release<S: Store>(shared: &Shared<S>, jobs: Vec<Claimed>) -> Result<u64, Vec<Claimed>> {
    let leases: Vec<Release> = jobs
        .iter()
        .map(|c| Release::unstarted(c.job.lease))
        .collect();
    match shared.store.release(&leases).await {
        Ok(n) => {
            for r in &leases {
                shared.inflight.remove(&r.lease);
            }
            shared.counters.released(n);
            Ok(n)
        }
        Err(e) => {
            tracing::warn!(error = %e, jobs = leases.len(), "release of unstarted jobs failed");
            Err(jobs)
        }
    }
}

/// Releases the leases of claimed jobs that never started, so that other workers take them
/// at once. On failure they stay held, and the worker's final release tries again. Returns
/// how many were released.
async fn give_back<S: Store>(shared: &Shared<S>, unstarted: Vec<Claimed>) -> u64 {
    if unstarted.is_empty() {
        return 0;
    }
    match release(shared, unstarted).await {
        Ok(n) => {
            tracing::debug!(released = n, "released claimed jobs that never started");
            n
        }
        Err(_) => 0,
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
                    // An empty name wakes every queue (see `Wakeups`).
                    Some(queue) if queue.is_empty() => wake.values().for_each(|n| n.notify_one()),
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
