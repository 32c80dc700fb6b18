//! The lease keeper: one batched heartbeat per worker renews every held lease every third of
//! the shortest lease, self-fencing stops executions whose leases could not be renewed in
//! time, and the stuck watch reports code that outlives its timeout.
//!
//! It runs on a thread of its own, with a current-thread Tokio runtime and database
//! connections of its own ([`Store::dedicated`]), so that handlers cannot starve it: blocking
//! code on every thread of the application's runtime, a `current_thread` runtime busy in a
//! handler, or an application pool held empty by handlers delay neither a heartbeat nor the
//! fencing clock. It shares only the in-flight table (a mutex held for microseconds) with the
//! rest of the worker.
//!
//! It also hands the application's multi-thread runtime an empty task every
//! [`NUDGE_EVERY`] (`nudge`), so that a handler blocking one thread cannot freeze the
//! others: Tokio's thread that wakes from the I/O and timer driver runs the task it woke
//! without handing the driver to an idle thread (tokio-rs/tokio#4730), so a handler that
//! awaited a timer or a query and then blocked that thread stopped every socket and timer of
//! the runtime, the worker's claims, outcomes and listener included, while the other threads
//! slept. A task spawned from outside wakes an idle thread, which takes the driver when it
//! parks again.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;

use tokio::runtime::{Handle, RuntimeFlavor};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::attempt::fault::FaultPoint;
use crate::contract::store::{HeartbeatReport, Renewal, Store};
use crate::model::error::StoreError;

use super::inflight::Abort;
use super::shared::Shared;
use super::stats::bump;

/// The connections the lease keeper opens: one for the heartbeat, and two spares, so that a
/// heartbeat stuck on a silent connection, and then the pool's check of another silent one,
/// never hold up the heartbeat sent again on a new one (see `hedged`).
pub(crate) const KEEPER_CONNECTIONS: u32 = 3;

/// The heartbeat period: a third of the shortest lease of the registered jobs, unless set.
pub(crate) fn interval<S>(shared: &Shared<S>) -> Duration {
    shared.config.heartbeat_interval.unwrap_or_else(|| {
        shared
            .config
            .shortest_lease(&shared.registry)
            .unwrap_or(Duration::from_secs(30))
            / 3
    })
}

/// How often the keeper hands the application's runtime an empty task (see the module's
/// doc): the longest a handler blocking the thread that held the driver stops the others'
/// sockets and timers.
pub(crate) const NUDGE_EVERY: Duration = Duration::from_millis(50);

/// A running lease keeper.
pub(crate) struct Keeper {
    stop: CancellationToken,
    done: oneshot::Receiver<()>,
}

impl Keeper {
    /// Starts the keeper on a thread of its own, with its own connections made from `store`.
    /// It nudges `runtime`, the worker's runtime, when that is a multi-thread one.
    pub(crate) fn start<S: Store>(
        shared: Arc<Shared<S>>,
        store: S,
        runtime: Option<Handle>,
    ) -> Keeper {
        let application = runtime.filter(|r| r.runtime_flavor() == RuntimeFlavor::MultiThread);
        let stop = CancellationToken::new();
        let (done_tx, done) = oneshot::channel();
        let token = stop.clone();
        let spawned = std::thread::Builder::new()
            .name("job-lease-keeper".into())
            .spawn(move || {
                // A keeper that ended while its worker runs would leave every execution
                // unrenewed and unfenced: their leases would run out under them, and another
                // worker would run the same jobs at once. So a panic (a bug, or a store
                // layer's) stops every execution it kept, and the keeper starts again.
                loop {
                    let ran = std::panic::catch_unwind(AssertUnwindSafe(|| {
                        let runtime = tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                            .expect("the lease keeper cannot build its Tokio runtime");
                        runtime.block_on(async {
                            let store = store.dedicated("job lease keeper", KEEPER_CONNECTIONS);
                            run(&shared, &store, &token, application.as_ref()).await;
                            store.close().await;
                        });
                    }));
                    if ran.is_ok() || token.is_cancelled() {
                        break;
                    }
                    fence_all(&shared, "the lease keeper panicked");
                    std::thread::sleep(RESTART_DELAY);
                }
                let _ = done_tx.send(());
            });
        if let Err(e) = spawned {
            panic!("the lease keeper thread cannot start: {e}");
        }
        Keeper { stop, done }
    }

    /// Stops the keeper and waits for its thread to finish.
    pub(crate) async fn stop(mut self) {
        self.stop.cancel();
        let _ = (&mut self.done).await;
    }
}

impl Drop for Keeper {
    /// A worker whose supervisor is dropped (its runtime shut down without `shutdown()`) must
    /// not leave a keeper renewing leases of executions that no longer exist: those jobs would
    /// never be rescued.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn run<S: Store>(
    shared: &Shared<S>,
    store: &S,
    stop: &CancellationToken,
    runtime: Option<&Handle>,
) {
    let every = interval(shared);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Fencing and the stuck watch do not wait for a heartbeat to return or time out: they
    // check four times per period, so a stalled heartbeat or a late tick cannot eat the
    // safety margin.
    let mut watch_tick = tokio::time::interval((every / 4).max(Duration::from_millis(1)));
    watch_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let beats = async {
        loop {
            tick.tick().await;
            if AssertUnwindSafe(beat(shared, store, every))
                .catch_unwind()
                .await
                .is_err()
            {
                // Nothing renewed this time: the watch fences what runs out, as when the
                // database does not answer.
                tracing::error!(
                    "a heartbeat panicked (a bug, or a store layer's): no lease renewed this time"
                );
            }
        }
    };
    let watches = async {
        loop {
            watch_tick.tick().await;
            if std::panic::catch_unwind(AssertUnwindSafe(|| watch(shared))).is_err() {
                // Fencing itself cannot be trusted: stop everything it kept.
                fence_all(shared, "the lease keeper's watch panicked");
            }
        }
    };
    let nudges = async {
        match runtime {
            Some(runtime) => nudge(shared, runtime).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = beats => {}
        _ = watches => {}
        _ = nudges => {}
        _ = stop.cancelled() => {}
    }
}

/// Spawns an empty task on `runtime` every [`NUDGE_EVERY`] while executions are in flight
/// (only a handler blocks a thread; an idle worker is not woken 20 times a second: with
/// nothing in flight the loop waits for a claim to be recorded), one at a time: while every
/// thread of it is blocked, one task waits, not one per period.
async fn nudge<S>(shared: &Shared<S>, runtime: &Handle) {
    let waiting = Arc::new(AtomicBool::new(false));
    let mut tick = tokio::time::interval(NUDGE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if shared.inflight.len() == 0 {
            // Nothing in flight: sleep until a claim is recorded, not every period.
            shared.inflight.until_occupied().await;
            // The first nudge a period after the claim, as a handler blocking by then needs;
            // jobs shorter than that, one at a time, spawn none.
            tick.reset();
        }
        tick.tick().await;
        if shared.inflight.len() > 0 && !waiting.swap(true, Ordering::AcqRel) {
            let ran = waiting.clone();
            // A runtime shutting down drops the task unrun: nothing to wait for then.
            drop(runtime.spawn(async move { ran.store(false, Ordering::Release) }));
        }
    }
}

async fn beat<S: Store>(shared: &Shared<S>, store: &S, every: Duration) {
    if shared.faults.is_some() {
        crash_injected(shared);
    }
    let renewals = shared.inflight.renewals();
    if !renewals.is_empty() {
        let sent = Instant::now();
        // The period, and the wait a store may spend on rows held a moment: a timeout here
        // would discard the renewals the heartbeat did make.
        let allowed = every.saturating_add(crate::contract::store::HEARTBEAT_BUSY_WAIT);
        match tokio::time::timeout(allowed, hedged(store, &renewals, every)).await {
            Ok(Ok(report)) => {
                shared.inflight.renewed(
                    &renewals,
                    |lease| !report.lost.contains(lease) && !report.busy.contains(lease),
                    sent,
                );
                if !report.busy.is_empty() {
                    tracing::debug!(
                        jobs = ?report.busy,
                        "leases not renewed this time: another transaction holds those jobs"
                    );
                }
                for lease in &report.lost {
                    let id = lease.id;
                    if shared.inflight.finalized_by_handler(lease)
                        && finished(store, id, every).await
                    {
                        shared.inflight.finished_by_handler(lease);
                        tracing::debug!(
                            id,
                            "the handler's own transaction finished the job; its code runs on"
                        );
                        continue;
                    }
                    match shared.inflight.lost(lease) {
                        Some(Abort::Finalized) => tracing::debug!(
                            id,
                            "the handler's own transaction finalized the job: execution stopped"
                        ),
                        Some(_) => tracing::warn!(id, "lease lost: the job was taken over"),
                        None => {}
                    }
                }
                for lease in &report.cancel_requested {
                    shared.inflight.request_cancel(lease);
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "heartbeat failed"),
            Err(_) => tracing::warn!(timeout = ?allowed, "heartbeat timed out"),
        }
        // Only in what is left of the period: the next heartbeat must not wait for it. A slow
        // heartbeat followed by a progress write of a whole period sent the next heartbeat
        // past the fence point, and executions were fenced while every heartbeat succeeded.
        save_progress(shared, store, every.saturating_sub(sent.elapsed())).await;
    }
    watch(shared);
}

/// Whether job `id`'s row says it has finished, read within `within`: a lease its handler's
/// own transaction finalized is gone because that transaction committed only then. Otherwise
/// (a transaction rolled back, then the lease lost to a rescue), another worker may run the job,
/// and the execution is stopped as for any lost lease; so is it when the row cannot be read.
pub(crate) async fn finished<S: Store>(store: &S, id: crate::JobId, within: Duration) -> bool {
    matches!(
        tokio::time::timeout(within, store.get(id)).await,
        Ok(Ok(Some(row))) if row.state.is_terminal()
    )
}

/// How many times one heartbeat is sent at most: at 0, then a quarter of the period (at least
/// twice `HEARTBEAT_BUSY_WAIT`) apart (or at once after an error), until one answers.
const HEARTBEAT_SENDS: usize = 3;

/// The heartbeat, sent again on another connection while none has answered: a quarter of the
/// period (at least twice `HEARTBEAT_BUSY_WAIT`) after the last send, or at once after an error, [`HEARTBEAT_SENDS`] times at most;
/// the first answer is taken, an error waits for the other sends. A connection that went
/// silent (its server's host vanished, a firewall dropped the flow) never answers: waiting
/// the whole period on it, the keeper reached the fence point with every new connection
/// working, and stopped every execution. The second send may find the keeper's other
/// connection silent too, and wait for the pool's check of it (`POOL_CHECK_TIMEOUT` on
/// PostgreSQL, 5 s); the third opens a new connection (the keeper has
/// [`KEEPER_CONNECTIONS`]). Renewing twice is harmless (the same leases, each guarded by its
/// token); the renewals are counted from the first send, the earliest.
async fn hedged<S: Store>(
    store: &S,
    renewals: &[Renewal],
    every: Duration,
) -> Result<HeartbeatReport, StoreError> {
    // Not sooner than a healthy heartbeat may take: one waiting (HEARTBEAT_BUSY_WAIT) on a
    // row an application's transaction holds. A send made sooner waited on the rows the first
    // one had locked, answered first that they were busy, and those leases went unrenewed
    // (a loaded CI run fenced an execution at a 30 ms period, resends 7.5 ms apart). With a
    // period that short, no resend fits in the heartbeat's time at all; silent connections
    // are what resends are for, and they stay silent for seconds.
    let apart = (every / 4).max(2 * crate::contract::store::HEARTBEAT_BUSY_WAIT);
    let mut sends = futures_util::stream::FuturesUnordered::new();
    sends.push(store.heartbeat(renewals));
    let mut sent = 1;
    let mut next = Instant::now() + apart;
    loop {
        tokio::select! {
            Some(answered) = futures_util::StreamExt::next(&mut sends) => match answered {
                Ok(report) => return Ok(report),
                // Sent again at once; the last error is returned when every send failed.
                Err(error) => {
                    if sent < HEARTBEAT_SENDS {
                        sends.push(store.heartbeat(renewals));
                        sent += 1;
                        next = Instant::now() + apart;
                    } else if sends.is_empty() {
                        return Err(error);
                    }
                }
            },
            () = tokio::time::sleep_until(next), if sent < HEARTBEAT_SENDS => {
                tracing::debug!(?apart, "heartbeat not answered yet: sent again");
                sends.push(store.heartbeat(renewals));
                sent += 1;
                next = Instant::now() + apart;
            }
        }
    }
}

/// Writes the progress handlers reported since the last heartbeat, all in one statement: a
/// handler may report as often as it likes, the database sees one write per heartbeat period.
/// When some reports were not written (the statement skips a row another transaction holds,
/// or it failed, or did not answer `within`), they are written with the next heartbeat, unless
/// a newer one replaces them. With no time left, nothing is written this time.
async fn save_progress<S: Store>(shared: &Shared<S>, store: &S, within: Duration) {
    if within < MIN_PROGRESS_WAIT {
        return;
    }
    let progress = shared.inflight.take_progress();
    if progress.is_empty() {
        return;
    }
    let written = match tokio::time::timeout(within, store.save_progress(&progress)).await {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "progress not recorded");
            0
        }
        Err(_) => {
            tracing::warn!(timeout = ?within, "recording progress timed out");
            0
        }
    };
    if written < progress.len() as u64 {
        // Which ones is not said: all are written again (the same values), the lost leases'
        // reports excepted, since their executions are no longer held.
        shared.inflight.untake_progress(&progress);
    }
}

/// The least time worth a progress write after a heartbeat.
const MIN_PROGRESS_WAIT: Duration = Duration::from_millis(5);

/// How long a keeper that panicked waits before it starts again.
const RESTART_DELAY: Duration = Duration::from_secs(1);

/// Stops every execution the keeper holds a lease for, counted as fenced, saying `why`.
fn fence_all<S>(shared: &Shared<S>, why: &str) {
    let fenced = shared.inflight.fence_all();
    count_fenced(shared, &fenced);
    let jobs: Vec<crate::JobId> = fenced.iter().map(|info| info.id).collect();
    tracing::error!(?jobs, "{why}: stopped every execution whose lease it kept");
}

fn count_fenced<S>(shared: &Shared<S>, fenced: &[Arc<crate::model::attempt_info::AttemptInfo>]) {
    bump(&shared.counters.fenced, fenced.len() as u64);
    for info in fenced {
        shared.labels(info).fenced();
    }
}

/// Self-fencing, then the stuck watch.
fn watch<S>(shared: &Shared<S>) {
    let now = Instant::now();
    let fenced = shared.inflight.fence(now);
    if !fenced.is_empty() {
        count_fenced(shared, &fenced);
        let jobs: Vec<crate::JobId> = fenced.iter().map(|info| info.id).collect();
        tracing::error!(
            ?jobs,
            "leases could not be renewed in time: stopped those executions before they expire"
        );
    }
    for stuck in shared.inflight.watch_stuck(now, shared.config.stuck_after) {
        bump(&shared.counters.stuck, 1);
        shared.labels(&stuck.info).stuck();
        tracing::error!(
            id = stuck.info.id,
            kind = %stuck.info.kind,
            attempt = stuck.info.attempt,
            running_for = ?stuck.running_for,
            told_to_stop = stuck.told_to_stop,
            "execution stuck: its code runs past its timeout and does not return; it keeps \
             its slot and lease until it does"
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
