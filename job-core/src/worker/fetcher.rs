//! One fetcher per queue, in two halves joined in one task.
//!
//! The claimer claims as many due jobs as the queue has room for (at most `claim_batch`), in
//! one statement, and hands them to the dispatcher. Room is the free execution slots plus the
//! prefetch target less the jobs already claimed and waiting. It sleeps on a notification from
//! the store, with polling as the fallback for lost notifications and for jobs that become due
//! by time. The dispatcher starts each claimed job as soon as one of the `concurrency`
//! execution slots is free. With a prefetch target, the next claim runs while the jobs of the
//! previous one execute, which is what lets short jobs run at the database's batch rate.
//!
//! The target is fixed ([`Prefetch::Fixed`]) or measured ([`Prefetch::Auto`], the default):
//! twice the jobs the queue's slots finished during a claim's round trip, smoothed over
//! claims. Jobs much shorter than a claim round trip give a large target (up to its `max`);
//! jobs longer than two round trips per slot, and any job of 100 ms or more, give zero, so a
//! queue of slow jobs claims only its free slots and never holds a job that another worker's
//! free slot could run.
//!
//! A claimed job waiting in the buffer holds its lease like a running one: the heartbeat
//! renews it, a crash leaves it to the rescuer, and shutdown releases it at once. Prefetched
//! jobs that wait out `prefetch_ttl` (the slots are taken by long jobs) are given back for
//! other workers, and the claimer then takes no more than the slots that no job holds, waits
//! for or is being claimed for, until the dispatcher next finds a slot free with nothing
//! waiting.
//!
//! Stopping waits for the store at most [`STOP_TIMEOUT`] in all (claims in flight, then the
//! give-back), so that a hung database cannot hold up the drain: a claim whose answer has not
//! come by then is abandoned (whatever it took never starts here, and its lease expires), and
//! jobs whose give-back did not finish stay listed for the worker's final release.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::contract::store::{ClaimRequest, ClaimedJob, Release, Store};
use crate::model::attempt_info::AttemptInfo;
use crate::model::error::StoreError;

use super::config::Prefetch;
use super::deadline::after;
use super::executor;
use super::gauges::{Slot, SlotGauges};
use super::inflight::Signals;
use super::run::RELEASE_TIMEOUT;
use super::shared::Shared;

/// How long a fetcher that was told to stop waits for the store in all: for its claims in
/// flight, then for the give-back of the jobs that never started. Half of
/// [`RELEASE_TIMEOUT`], so that the worker's final release keeps the other half.
pub(crate) const STOP_TIMEOUT: Duration =
    Duration::from_millis(RELEASE_TIMEOUT.as_millis() as u64 / 2);

/// A claimed job on its way to an execution slot, with the permit it holds in the claimer.
struct Claimed {
    /// The job, its kind and queue moved to `info`.
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
    /// slots no job holds or waits for until the dispatcher next finds a slot free with
    /// nothing waiting.
    suspended: AtomicBool,
    /// The queue's saturation gauges.
    gauges: Arc<SlotGauges>,
    /// Executions of this queue that ended, and the time they held their slots in all (in
    /// nanoseconds), for the measured prefetch target.
    ended: Arc<AtomicU64>,
    busy_nanos: Arc<AtomicU64>,
    /// Told when a claimed job starts or an execution ends: the queue may have room again.
    progress: Arc<Notify>,
}

impl Lanes {
    /// The most jobs the next claim may take: the room left under `concurrency + target` by
    /// the `in_use` jobs (running, waiting, or being claimed), at most the claim batch; while
    /// prefetch is suspended, the target is zero. (Not the free slots: a slot stays free
    /// while a claim for it is in flight, and a second claim for the same slot would bring
    /// back a job to wait out `prefetch_ttl` again.)
    fn cap(&self, max_batch: usize, concurrency: usize, target: usize, in_use: usize) -> usize {
        let target = if self.suspended.load(Ordering::Acquire) {
            0
        } else {
            target
        };
        (concurrency + target).saturating_sub(in_use).min(max_batch)
    }
}

/// The measured prefetch target of [`Prefetch::Auto`]: the jobs the queue's slots finish
/// during two claim round trips, `concurrency × 2 × round trip / execution time`, from
/// smoothed measurements of both.
struct Target {
    mode: Prefetch,
    concurrency: usize,
    /// Smoothed claim round trip, in seconds.
    round_trip: Option<f64>,
    /// Smoothed time an execution holds its slot, in seconds.
    execution: Option<f64>,
    /// The queue's ended executions and their summed slot time when last observed.
    seen: (u64, u64),
}

impl Target {
    /// Weight of the newest measurement in the smoothed ones.
    const WEIGHT: f64 = 0.2;
    /// Jobs that hold their slot this long (in seconds) or longer are never prefetched: a claim
    /// round trip is then a small share of their time, and a held job would wait where another
    /// worker's free slot could run it (a loaded server's round trips alone would say otherwise).
    const LONG_JOB: f64 = 0.1;

    fn new(mode: Prefetch, concurrency: usize) -> Self {
        Target {
            mode,
            concurrency,
            round_trip: None,
            execution: None,
            seen: (0, 0),
        }
    }

    /// Jobs to hold beyond the running ones now.
    fn get(&self) -> usize {
        match self.mode {
            Prefetch::Fixed(n) => n,
            Prefetch::Auto { max } => match (self.round_trip, self.execution) {
                (Some(rtt), Some(exec)) if exec > 0.0 && exec < Self::LONG_JOB => {
                    let jobs = self.concurrency as f64 * 2.0 * rtt / exec;
                    (jobs.min(max as f64)) as usize
                }
                _ => 0,
            },
        }
    }

    /// A claim took `round_trip`; the queue's executions have ended `ended` times in all,
    /// holding their slots `busy_nanos` in all.
    fn observe(&mut self, round_trip: Duration, ended: u64, busy_nanos: u64) {
        if !matches!(self.mode, Prefetch::Auto { .. }) {
            return;
        }
        let smooth = |old: Option<f64>, new: f64| {
            Some(old.map_or(new, |old| old * (1.0 - Self::WEIGHT) + new * Self::WEIGHT))
        };
        self.round_trip = smooth(self.round_trip, round_trip.as_secs_f64());
        let (ended_before, busy_before) = self.seen;
        if ended > ended_before {
            let mean = (busy_nanos - busy_before) as f64 / 1e9 / (ended - ended_before) as f64;
            self.execution = smooth(self.execution, mean);
            self.seen = (ended, busy_nanos);
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
    let held = Arc::new(Semaphore::new(concurrency + shared.config.prefetch.max()));
    let slots = Arc::new(Semaphore::new(concurrency));
    let lanes = Lanes {
        gauges: SlotGauges::new(&queue, concurrency, slots.clone()),
        slots,
        suspended: AtomicBool::new(false),
        ended: Arc::new(AtomicU64::new(0)),
        busy_nanos: Arc::new(AtomicU64::new(0)),
        progress: Arc::new(Notify::new()),
    };
    let claimer = claim_loop(&shared, queue, concurrency, held, &lanes, tx, &wake, &stop);
    let dispatcher = dispatch(&shared, &lanes, rx, &stop);
    let (deadline, unstarted) = tokio::join!(claimer, dispatcher);
    let n = unstarted.len();
    let released = give_back(&shared, unstarted, deadline).await;
    lanes.gauges.left(n);
    released
}

/// The most claim statements of one queue in flight at once. A claim's cost grows with the
/// rows it takes, so while one runs, a second one for the permits freed since can use the
/// database's other cores; beyond two, they mostly wait on each other's locks.
const CLAIMS_IN_FLIGHT: usize = 2;

/// The most claims in flight once a claim came back with fewer jobs than it asked for (the
/// queue had no more due), until one comes back full. A second claim sent then finds only what
/// was enqueued during the first one's round trip: two statements split what one would take.
/// In a soak at 12,000 jobs/s it halved the claims (62 jobs each became 121) and cut the
/// server's CPU per job by about an eighth (README, Performance).
const CLAIMS_IN_FLIGHT_WHEN_SHORT: usize = 1;

/// What one claim statement returned, with the permits it was made for.
struct ClaimResult {
    claimed: Result<Vec<ClaimedJob>, StoreError>,
    permits: Vec<OwnedSemaphorePermit>,
    sent: Instant,
    /// When the claim returned.
    returned: Instant,
}

#[allow(clippy::too_many_arguments)]
async fn claim_loop<S: Store>(
    shared: &Arc<Shared<S>>,
    queue: String,
    concurrency: usize,
    held: Arc<Semaphore>,
    lanes: &Lanes,
    tx: mpsc::UnboundedSender<Claimed>,
    wake: &Notify,
    stop: &CancellationToken,
) -> Instant {
    let mut kinds = shared.registry.claim_kinds();
    for kind in &mut kinds {
        kind.lease = shared.config.lease_of(kind.lease);
    }
    let leases: HashMap<String, Duration> =
        kinds.iter().map(|k| (k.kind.clone(), k.lease)).collect();
    let windows: HashMap<String, Duration> = kinds
        .iter()
        .filter_map(|k| Some((k.kind.clone(), k.rate?.per)))
        .collect();
    let request = Arc::new(ClaimRequest {
        queue,
        kinds,
        limit: 0,
        worker_id: shared.config.id.clone(),
    });
    let max_batch = shared.config.claim_batch as usize;
    let held_total = held.available_permits();
    let mut target = Target::new(shared.config.prefetch, concurrency);
    let mut claims: JoinSet<ClaimResult> = JoinSet::new();
    let mut failures = 0u32;
    // Set when a claim found fewer due jobs than it asked for: no new claim until a
    // notification, the poll interval (or the window of a rate-limited kind it took jobs of,
    // see `rated_window`), or (after a failure) the pause has passed.
    let mut idle_until: Option<Instant> = None;
    // Set when a claim came back short, cleared when one comes back full: the queue is
    // keeping up with what is enqueued, and one claim at a time takes it.
    let mut short = false;
    loop {
        let in_use = held_total - held.available_permits();
        let cap = lanes.cap(max_batch, concurrency, target.get(), in_use);
        let want = if claims.is_empty() {
            1
        } else {
            // A second claim waits for enough room to be worth a statement of its own: half
            // a batch, or half the queue's slots and prefetch when that is less.
            (max_batch.min(concurrency + target.get()) / 2).max(1)
        };
        let in_flight = if short {
            CLAIMS_IN_FLIGHT_WHEN_SHORT
        } else {
            CLAIMS_IN_FLIGHT
        };
        let ready = claims.len() < in_flight && idle_until.is_none();
        let may_claim = ready && cap >= want;
        // No room: look again when a job starts or ends (an ended one frees its permit first).
        let wait_for_room = ready && !may_claim;
        tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            done = claims.join_next(), if !claims.is_empty() => {
                let result = match done {
                    Some(Ok(result)) => result,
                    // The claim's task panicked (a bug, or a store layer's): its permits are
                    // back, and any rows it took wait out their lease for the rescuer. Paused
                    // like a failed claim, so that one that always panics does not spin.
                    Some(Err(e)) if e.is_panic() => {
                        failures += 1;
                        tracing::error!(queue = %request.queue, "a claim panicked");
                        idle_until = Some(Instant::now() + failure_pause(shared, failures));
                        continue;
                    }
                    _ => continue,
                };
                let asked = result.permits.len();
                let window = rated_window(&windows, &result);
                target.observe(
                    result.returned - result.sent,
                    lanes.ended.load(Ordering::Acquire),
                    lanes.busy_nanos.load(Ordering::Acquire),
                );
                match accept(shared, &leases, &tx, result) {
                    Ok(got) => {
                        lanes.gauges.claimed(got);
                        failures = 0;
                        short = got < asked;
                        if got < asked {
                            let poll = shared.config.poll_interval;
                            let at = after(Instant::now(), window.map_or(poll, |w| w.min(poll)));
                            idle_until = Some(idle_until.map_or(at, |until| until.min(at)));
                        }
                    }
                    Err(e) => {
                        failures += 1;
                        tracing::warn!(queue = %request.queue, error = %e, "claim failed");
                        idle_until = Some(Instant::now() + failure_pause(shared, failures));
                    }
                }
            }
            first = held.clone().acquire_many_owned(want as u32), if may_claim => {
                let first = first.expect("semaphore is never closed");
                // The dispatcher may have suspended prefetch while this waited.
                let in_use = held_total - held.available_permits() - want;
                let cap = lanes.cap(max_batch, concurrency, target.get(), in_use);
                if cap < want {
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
                    let returned = Instant::now();
                    // One permit per job: split the first, which may stand for several.
                    let permits = split(permits, n);
                    ClaimResult { claimed, permits, sent, returned }
                });
            }
            _ = lanes.progress.notified(), if wait_for_room => {}
            _ = wake.notified(), if idle_until.is_some() && failures == 0 => idle_until = None,
            _ = sleep_until_or_forever(idle_until), if idle_until.is_some() => idle_until = None,
        }
    }
    // Stopping: a claim in flight may have taken rows; hand them over so they are released.
    // Its answer may never come (a hung database): wait for it only so long.
    let deadline = Instant::now() + STOP_TIMEOUT;
    let answered = tokio::time::timeout_at(deadline, async {
        while let Some(done) = claims.join_next().await {
            if let Ok(result) = done {
                if let Ok(got) = accept(shared, &leases, &tx, result) {
                    lanes.gauges.claimed(got);
                }
            }
        }
    })
    .await;
    if answered.is_err() {
        tracing::warn!(
            queue = %request.queue,
            claims = claims.len(),
            waited = ?STOP_TIMEOUT,
            "stopping: abandoned claims whose answer did not come in time; any jobs they took \
             never start here, and their leases expire for the rescuer"
        );
        claims.abort_all();
    }
    deadline
}

/// When a short claim took jobs of a rate-limited kind, how long until the starts it made
/// have left their window: the shortest such window, and a little more for the database's
/// clock, which stamped them. The kind may be at its limit (the claim was short because the
/// window was full), so the next claim comes then rather than at the next poll, which would
/// hold a limit of many starts per short window to one window's worth per poll interval.
/// A short claim that took no rate-limited job waits for the poll or a notification as
/// usual, so an idle queue is not polled faster: while keys wait at their limit, the worker
/// whose claims take their starts is the one that comes back for them.
fn rated_window(windows: &HashMap<String, Duration>, result: &ClaimResult) -> Option<Duration> {
    if windows.is_empty() {
        return None;
    }
    let jobs = result.claimed.as_ref().ok()?;
    let window = jobs.iter().filter_map(|j| windows.get(&j.kind)).min()?;
    // The starts were stamped before the claim returned; a millisecond and a thousandth of
    // the window cover the two clocks' rates drifting apart.
    Some(*window + Duration::from_millis(1) + *window / 1000)
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
        returned: _,
    } = result;
    let claimed = claimed?;
    let got = claimed.len();
    shared.counters.claimed(got);
    for (mut job, held) in claimed.into_iter().zip(permits.drain(..)) {
        let lease_len = leases.get(&job.kind).copied().unwrap_or(Duration::ZERO);
        // The kind and queue move to the info, which the rest of the execution reads them
        // from: the job's own are left empty, saving two copies per job.
        let info = Arc::new(AttemptInfo {
            id: job.lease.id,
            kind: std::mem::take(&mut job.kind),
            queue: std::mem::take(&mut job.queue),
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
    let prefetching = shared.config.prefetch.max() > 0;
    // Jobs whose give-back failed. The release may have committed with its answer lost, so
    // another worker may hold them now: they never start here, and their release is tried
    // again every `ttl` (a committed one then finds its token gone and counts nothing), and
    // at shutdown.
    let mut unreleased: Vec<Claimed> = Vec::new();
    let mut retry_at: Option<Instant> = None;
    let mut unstarted = Vec::new();
    'dispatch: loop {
        if rx.is_empty() && lanes.slots.available_permits() > 0 {
            // A slot is free and nothing waits for it: prefetch again.
            lanes.suspended.store(false, Ordering::Release);
        }
        let next = tokio::select! {
            biased;
            _ = stop.cancelled() => break,
            _ = sleep_until_or_forever(retry_at), if !unreleased.is_empty() => {
                give_back_unreleased(shared, lanes, &mut unreleased, &mut retry_at, stop).await;
                continue;
            }
            next = rx.recv() => next,
        };
        let Some(next) = next else { break };
        let slot = match lanes.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                super::stats::bump(&shared.counters.waited, 1);
                let expires = after(next.claimed_at, ttl);
                // Waiting for a slot, the release of jobs given back without success is
                // still retried on time.
                loop {
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => {
                            unstarted.push(next);
                            break 'dispatch;
                        }
                        slot = lanes.slots.clone().acquire_owned() => {
                            break slot.expect("semaphore is never closed");
                        }
                        _ = sleep_until_or_forever(retry_at), if !unreleased.is_empty() => {
                            give_back_unreleased(shared, lanes, &mut unreleased, &mut retry_at, stop)
                                .await;
                        }
                        _ = tokio::time::sleep_until(expires), if prefetching => {
                            // Given back with any whose earlier give-back failed; on failure,
                            // never started, released again after `ttl` or on the way out.
                            unreleased.push(next);
                            while let Ok(c) = rx.try_recv() {
                                unreleased.push(c);
                            }
                            let released = give_back_unreleased(
                                shared,
                                lanes,
                                &mut unreleased,
                                &mut retry_at,
                                stop,
                            )
                            .await;
                            if let Some(released) = released {
                                lanes.suspended.store(true, Ordering::Release);
                                tracing::info!(
                                    released,
                                    waited = ?ttl,
                                    "gave back prefetched jobs that found no free slot"
                                );
                            }
                            continue 'dispatch;
                        }
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
        let slot = Slot::new(slot, lanes.gauges.clone());
        // Boxed once here: the execution's state machine is large, and unboxed it would be
        // copied whole into the task at spawn, again on its first poll and at its end.
        let execution = Box::pin(executor::run(
            shared.clone(),
            job,
            info,
            signals,
            (slot, held),
        ));
        let (ended, busy, progress) = (
            lanes.ended.clone(),
            lanes.busy_nanos.clone(),
            lanes.progress.clone(),
        );
        shared.executors.spawn(async move {
            let started = Instant::now();
            execution.await;
            // Its slot and permit are free now (`run` dropped them).
            busy.fetch_add(started.elapsed().as_nanos() as u64, Ordering::Release);
            ended.fetch_add(1, Ordering::Release);
            progress.notify_one();
        });
        lanes.gauges.left(1);
        lanes.progress.notify_one();
    }
    unstarted.extend(unreleased);
    // The claimer stops too; what it claimed before it saw the stop comes through here.
    while let Some(next) = rx.recv().await {
        unstarted.push(next);
    }
    unstarted
}

/// Gives back the claimed jobs that will not start here (`unreleased`): on success they are
/// gone, their permits free, and the count is returned; on failure (logged) or a stop they
/// stay, to be tried again after `prefetch_ttl` (`retry_at`) or on the way out.
async fn give_back_unreleased<S: Store>(
    shared: &Arc<Shared<S>>,
    lanes: &Lanes,
    unreleased: &mut Vec<Claimed>,
    retry_at: &mut Option<Instant>,
    stop: &CancellationToken,
) -> Option<u64> {
    let released = release_unless_stopped(shared, unreleased, stop).await;
    match released {
        Some(_) => {
            lanes.gauges.left(unreleased.len());
            unreleased.clear();
            // Their permits are free: the claimer looks at its room again.
            lanes.progress.notify_one();
            *retry_at = None;
        }
        None => *retry_at = Some(after(Instant::now(), shared.config.prefetch_ttl)),
    }
    released
}

/// The pause before claiming again after `failures` claims in a row failed: 50 ms more per
/// failure, up to the poll interval.
fn failure_pause<S>(shared: &Shared<S>, failures: u32) -> Duration {
    shared
        .config
        .poll_interval
        .min(Duration::from_millis(50) * failures.min(20))
}

/// Releases the leases of claimed jobs that never started: back to `available`, the attempt
/// not counted. Returns how many the store released, or `None` when it failed (logged). The
/// jobs stay with the caller either way; once released, the worker no longer lists them.
async fn release<S: Store>(shared: &Shared<S>, jobs: &[Claimed]) -> Option<u64> {
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
            Some(n)
        }
        Err(e) => {
            tracing::warn!(error = %e, jobs = leases.len(), "release of unstarted jobs failed");
            None
        }
    }
}

/// [`release`], given up when `stop` fires first, so that a hung database cannot keep the
/// dispatcher from stopping: `None` then, as for a failure. The release may have committed
/// all the same; the jobs never start here, and releasing them again then changes nothing
/// (a release is guarded by the lease token).
async fn release_unless_stopped<S: Store>(
    shared: &Shared<S>,
    jobs: &[Claimed],
    stop: &CancellationToken,
) -> Option<u64> {
    tokio::select! {
        biased;
        released = release(shared, jobs) => released,
        _ = stop.cancelled() => {
            tracing::warn!(
                jobs = jobs.len(),
                "stopping: gave up waiting for a give-back of prefetched jobs; they are given \
                 back again on the way out"
            );
            None
        }
    }
}

/// Releases the leases of claimed jobs that never started, so that other workers take them
/// at once, waiting for the store until `deadline` at most. On failure or timeout they stay
/// listed, and the worker's final release tries again. Returns how many were released.
async fn give_back<S: Store>(
    shared: &Shared<S>,
    unstarted: Vec<Claimed>,
    deadline: Instant,
) -> u64 {
    if unstarted.is_empty() {
        return 0;
    }
    match tokio::time::timeout_at(deadline, release(shared, &unstarted)).await {
        Ok(Some(n)) => {
            tracing::debug!(released = n, "released claimed jobs that never started");
            n
        }
        Ok(None) => 0,
        Err(_) => {
            tracing::warn!(
                jobs = unstarted.len(),
                "stopping: the give-back of claimed jobs that never started did not finish in \
                 time; left for the worker's final release"
            );
            0
        }
    }
}

/// The first wait before subscribing again after [`Store::listen`] failed; it doubles with
/// each failure in a row, up to the poll interval.
const LISTEN_RETRY_MIN: Duration = Duration::from_millis(100);

/// The wait after the `failures`-th failed subscription in a row (1 for the first):
/// [`LISTEN_RETRY_MIN`] doubling, at most `poll_interval`.
fn listen_retry(failures: u32, poll_interval: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    LISTEN_RETRY_MIN
        .saturating_mul(1 << doublings)
        .min(poll_interval)
}

/// Turns the store's wake-ups into per-queue notifications, resubscribing when the stream
/// ends (the store lost its connection). A failed subscription is tried again after
/// [`listen_retry`], and once one goes through every queue is woken, for the jobs enqueued
/// while nothing listened: the fetchers poll meanwhile, but with a long poll interval a
/// worker that waited all of it before listening again (as it did) found new jobs that much
/// later.
pub(crate) async fn forward_wakeups<S: Store>(
    shared: Arc<Shared<S>>,
    wake: HashMap<String, Arc<Notify>>,
    stop: CancellationToken,
) {
    let mut failures: u32 = 0;
    loop {
        let mut wakeups = tokio::select! {
            r = shared.store.listen() => match r {
                Ok(w) => {
                    if failures > 0 {
                        wake.values().for_each(|n| n.notify_one());
                    }
                    failures = 0;
                    w
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let retry = listen_retry(failures, shared.config.poll_interval);
                    tracing::warn!(
                        error = %e,
                        ?retry,
                        "cannot listen for new jobs; polling only until it can"
                    );
                    tokio::select! {
                        _ = tokio::time::sleep(retry) => continue,
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::listen_retry;

    #[test]
    fn a_failed_listen_is_retried_after_100ms_doubling_up_to_the_poll_interval() {
        let poll = Duration::from_secs(1);
        let waits: Vec<u128> = (1..=6).map(|n| listen_retry(n, poll).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(listen_retry(u32::MAX, poll), poll);
        let short = Duration::from_millis(20);
        assert_eq!(listen_retry(1, short), short);
        assert_eq!(
            listen_retry(u32::MAX, crate::MAX_DURATION),
            Duration::from_millis(100) * (1 << 31)
        );
    }
}
