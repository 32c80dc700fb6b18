//! The executions of one worker, shared by the fetchers, the executors, the completer and the
//! lease keeper (on its own thread). An entry lives from the claim until the execution is
//! over: its outcome written, its lease released, or its code ended after the lease was
//! lost. While the entry's lease is *held*, the keeper renews it; an execution told to stop
//! (timeout, cancel, shutdown) keeps its lease held until its code has really returned.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::attempt::context::StopSignal;
use crate::contract::store::{Lease, Release, Renewal};
use crate::model::attempt_info::{AttemptInfo, StopReason};

use super::deadline::saturating;

/// Why the runtime stopped an execution from outside the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Abort {
    /// The store no longer holds the lease: a heartbeat or a guarded write found it gone.
    LeaseLost,
    /// This worker stopped the execution itself: its lease could not be renewed in time
    /// (self-fencing). Counted as fenced, not as lost: the store may still hold the lease.
    Fenced,
    /// The drain deadline passed during shutdown.
    Shutdown,
    /// An injected fault killed the execution.
    Crash,
    /// The store no longer holds the lease because the handler's own transaction finalized
    /// the job (`JobContext::finalized_in_transaction`): expected, not a loss.
    Finalized,
    /// Self-fencing, of an execution whose handler had finalized the job in its own
    /// transaction, still open: that transaction holds the job's row, so the heartbeat could
    /// not renew the lease, and no one else can take the job while it does. The lease stays
    /// held, and once the code has ended the attempt is written as failed (class
    /// `lease_held`), counted: given back uncounted, as a fence for an outage is, a handler
    /// that always holds its transaction that long ran again for ever.
    Held,
}

/// The signals of one execution.
#[derive(Debug, Clone)]
pub(crate) struct Signals {
    /// Fired for every stop (cancel requested, timeout included), with why: what the handler
    /// sees in its context.
    pub(crate) stop: StopSignal,
    /// The abort, why it fired, and what was asked or said of the execution: in one
    /// allocation, shared by every holder of these signals (a clone of the abort token itself
    /// would take a lock).
    pub(crate) flags: Arc<Flags>,
}

/// What [`Signals`] record of one execution, and its abort.
#[derive(Debug, Default)]
pub(crate) struct Flags {
    /// Fired when the runtime takes the execution away; the executor drops the handler.
    pub(crate) abort: CancellationToken,
    /// Why `abort` fired.
    pub(crate) reason: OnceLock<Abort>,
    /// Set when an operator asked for the job to be cancelled (`cancel` fires too).
    cancel_requested: AtomicBool,
    /// Set when the handler finalized the job in its own transaction.
    finalized_by_handler: AtomicBool,
}

impl Flags {
    /// The handler said it finalized the job in its own transaction.
    pub(crate) fn set_finalized_by_handler(&self) {
        self.finalized_by_handler.store(true, Ordering::Release);
    }
}

impl Signals {
    fn new() -> Self {
        Signals {
            stop: StopSignal::default(),
            flags: Arc::default(),
        }
    }

    /// Why `abort` fired, once it did.
    pub(crate) fn reason(&self) -> Option<Abort> {
        self.flags.reason.get().copied()
    }

    /// Whether an operator asked for the job to be cancelled.
    pub(crate) fn cancel_requested(&self) -> bool {
        self.flags.cancel_requested.load(Ordering::Acquire)
    }

    /// Whether the handler said it finalized the job in its own transaction.
    pub(crate) fn finalized_by_handler(&self) -> bool {
        self.flags.finalized_by_handler.load(Ordering::Acquire)
    }

    /// Abort first, then tell the handler: an executor that sees the handler end because of
    /// the cancel signal then always sees the abort too, and writes nothing.
    fn abort(&self, reason: Abort) {
        let _ = self.flags.reason.set(reason);
        self.flags.abort.cancel();
        self.stop.stop(match reason {
            Abort::Shutdown => StopReason::Shutdown,
            Abort::LeaseLost | Abort::Fenced | Abort::Held | Abort::Crash | Abort::Finalized => {
                StopReason::LeaseLost
            }
        });
    }
}

/// Where an execution is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Claimed; its handler has not started (prefetched, or about to start).
    Waiting,
    /// Its handler's code runs.
    Running {
        since: Instant,
        timeout: Duration,
        /// When the runtime told it to stop (timeout, abort); the code may run on.
        stopping_since: Option<Instant>,
    },
    /// Its code ended without an outcome to write (stopped by a shutdown): the lease waits to
    /// be released.
    Ended { ran_for: Duration },
    /// Its outcome is with the completer; only the write remains.
    Finalizing { ran_for: Duration },
}

#[derive(Debug)]
struct Entry {
    info: Arc<AttemptInfo>,
    lease_len: Duration,
    /// Local instant before which the database cannot have expired the lease.
    valid_until: Instant,
    /// When the claim statement was sent.
    claimed: Instant,
    signals: Signals,
    /// The lease is this worker's: renewed, and released or finalized by it. False once it
    /// was lost or fenced while the code still runs.
    held: bool,
    /// Fenced while its code ran, and not reported lost since: the lease is still renewed
    /// (see [`InFlight::renewals`]), though nothing will be written for it.
    fenced_code_runs: bool,
    phase: Phase,
    /// Reported stuck (see [`InFlight::watch_stuck`]).
    stuck: bool,
    /// The latest progress its handler reported (JSON), and whether it is yet to be written.
    progress: Option<(String, bool)>,
}

impl Entry {
    /// Whether code of this execution may still be running.
    fn code_runs(&self) -> bool {
        matches!(self.phase, Phase::Running { .. })
    }

    /// Whether the lease, as far as this worker knows, may expire within `margin` of `now`
    /// (`now + margin >= valid_until`, without adding to an instant).
    fn expires_within(&self, margin: Duration, now: Instant) -> bool {
        self.valid_until.saturating_duration_since(now) <= margin
    }
}

/// An execution reported stuck.
#[derive(Debug)]
pub(crate) struct Stuck {
    pub(crate) info: Arc<AttemptInfo>,
    /// How long its code has been running.
    pub(crate) running_for: Duration,
    /// Whether it was told to stop (else it ran over its timeout without being stopped yet).
    pub(crate) told_to_stop: bool,
}

/// What is left for shutdown to do once the executions had their time.
#[derive(Debug, Default)]
pub(crate) struct Leftovers {
    /// Leases to give back: jobs never started, executions stopped whose code ended, and
    /// outcomes that could not be written.
    pub(crate) releases: Vec<Release>,
    /// Executions whose code is still running: their leases are neither released nor renewed
    /// any more, and expire in the store.
    pub(crate) abandoned: Vec<Arc<AttemptInfo>>,
}

/// The in-flight table hashes its leases with `rustc-hash` rather than SipHash, for it is
/// looked up several times per job. The keys are the claim's: tokens are random UUIDs, which
/// spread them well, and no one outside chooses them, so SipHash's resistance to chosen keys
/// buys nothing here.
type Table = HashMap<Lease, Entry, rustc_hash::FxBuildHasher>;

/// The executions of this worker.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    entries: Mutex<Table>,
    /// Told when a claim is recorded into an empty table, so that what works only while
    /// executions are in flight (the keeper's nudges) can sleep while there are none.
    occupied: Notify,
}

impl InFlight {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a claim. `sent` is when the claim statement was sent: the database set the
    /// lease after that, so `sent + lease` is a safe local bound for its expiry.
    pub(crate) fn insert(
        &self,
        lease: Lease,
        info: Arc<AttemptInfo>,
        lease_len: Duration,
        sent: Instant,
    ) -> Signals {
        let signals = Signals::new();
        let mut table = self.lock();
        let was_empty = table.is_empty();
        table.insert(
            lease,
            Entry {
                info,
                lease_len,
                valid_until: saturating(sent, lease_len),
                claimed: sent,
                signals: signals.clone(),
                held: true,
                fenced_code_runs: false,
                phase: Phase::Waiting,
                stuck: false,
                progress: None,
            },
        );
        drop(table);
        if was_empty {
            self.occupied.notify_one();
        }
        signals
    }

    /// The handler of `lease` is about to start with this `timeout`. Returns false, and
    /// starts nothing, when the lease is not held any more or is so close to its expiry that
    /// it would be fenced: the job waited too long for its start (a runtime whose threads were
    /// all busy, a long wait in the prefetch buffer), and running it now could overlap the
    /// job's next owner. When it starts, returns when the claim of `lease` was sent (the part
    /// of the job's queue wait spent in this worker runs from then), read under the same lock.
    pub(crate) fn start(&self, lease: &Lease, timeout: Duration, now: Instant) -> Option<Instant> {
        match self.lock().get_mut(lease) {
            Some(e) if e.held && !e.expires_within(e.lease_len / 3, now) => {
                e.phase = Phase::Running {
                    since: now,
                    timeout,
                    stopping_since: None,
                };
                Some(e.claimed)
            }
            _ => None,
        }
    }

    /// The runtime told the execution of `lease` to stop (timeout, abort): from now on, its
    /// code running past `stuck_after` is stuck.
    pub(crate) fn stopping(&self, lease: &Lease, now: Instant) {
        if let Some(e) = self.lock().get_mut(lease) {
            if let Phase::Running { stopping_since, .. } = &mut e.phase {
                stopping_since.get_or_insert(now);
            }
        }
    }

    /// When the claim that took `lease` was sent, while it is held here.
    pub(crate) fn claimed_at(&self, lease: &Lease) -> Option<Instant> {
        self.lock().get(lease).filter(|e| e.held).map(|e| e.claimed)
    }

    /// Whether `lease` is still held here.
    pub(crate) fn holds(&self, lease: &Lease) -> bool {
        self.lock().get(lease).is_some_and(|e| e.held)
    }

    /// The outcome of `lease` went to the completer. False when the lease is not held.
    /// `None` when the lease is no longer held; else the progress the handler reported since
    /// the keeper last wrote it, which the completer writes before the outcome (the keeper
    /// writes only with a heartbeat, and a last report would go with the entry).
    pub(crate) fn set_finalizing(&self, lease: &Lease, now: Instant) -> Option<Option<String>> {
        match self.lock().get_mut(lease) {
            Some(e) if e.held => {
                let ran_for = match e.phase {
                    Phase::Running { since, .. } => now.saturating_duration_since(since),
                    _ => Duration::ZERO,
                };
                e.phase = Phase::Finalizing { ran_for };
                Some(match &mut e.progress {
                    Some((progress, pending @ true)) => {
                        *pending = false;
                        Some(progress.clone())
                    }
                    _ => None,
                })
            }
            _ => None,
        }
    }

    /// The code of `lease`'s execution ended without an outcome to write (a shutdown stopped
    /// it): its lease waits for the drain to release it.
    pub(crate) fn ended_unfinished(&self, lease: &Lease, ran_for: Duration) {
        if let Some(e) = self.lock().get_mut(lease) {
            e.phase = Phase::Ended { ran_for };
        }
    }

    /// Forgets `lease`: the execution is over (outcome written, released, crashed, or its
    /// code ended after the lease was lost). Returns whether it was held.
    pub(crate) fn remove(&self, lease: &Lease) -> bool {
        self.lock().remove(lease).is_some_and(|e| e.held)
    }

    /// Takes the lease away from the execution of `lease` with `reason` (it was lost, fenced,
    /// or a crash was injected): fires its abort. An execution whose code still runs stays
    /// listed, not held, until its executor sees the code end; any other is forgotten.
    /// Returns whether the lease was held.
    fn take_away(map: &mut Table, lease: &Lease, reason: Abort) -> bool {
        let Some(e) = map.get_mut(lease) else {
            return false;
        };
        let was_held = e.held;
        let reason = if reason == Abort::Held {
            e.signals.abort(reason);
            if e.signals.reason() == Some(Abort::Held) && e.code_runs() {
                // Kept: the failed attempt is written under it once the code has ended.
                return was_held;
            }
            // Stopped for another reason first (a shutdown): fenced as any other.
            Abort::Fenced
        } else {
            reason
        };
        e.held = false;
        e.fenced_code_runs = reason == Abort::Fenced && was_held && e.code_runs();
        e.signals.abort(reason);
        if !e.code_runs() {
            map.remove(lease);
        }
        was_held
    }

    /// The store reported `lease` lost. Takes the execution away with [`Abort::Finalized`]
    /// when its handler finalized the job in its own transaction, else with
    /// [`Abort::LeaseLost`]. Returns the reason, or `None` when the lease was not held, or
    /// when its outcome is with the completer: that guarded write decides and counts, and the
    /// lease is most often gone because the write committed while the heartbeat ran.
    pub(crate) fn lost(&self, lease: &Lease) -> Option<Abort> {
        let mut map = self.lock();
        let entry = map.get_mut(lease)?;
        // The lease is gone: a fenced execution's code, if it still runs, is renewed no more.
        entry.fenced_code_runs = false;
        if matches!(entry.phase, Phase::Finalizing { .. }) {
            // No longer renewed nor fenced (a fence would count an execution that ended
            // well); the completer, whose answer may be held up behind a blocked runtime,
            // counts and forgets it.
            entry.held = false;
            return None;
        }
        let finalized = entry.signals.finalized_by_handler();
        let reason = if finalized {
            Abort::Finalized
        } else {
            Abort::LeaseLost
        };
        Self::take_away(&mut map, lease, reason).then_some(reason)
    }

    /// Whether `lease` is held and its handler said it finalized the job in its own transaction
    /// (set when `complete_in` ran, before the application's commit: a loss of such a lease is
    /// that commit only when the job's row says the job has finished).
    pub(crate) fn finalized_by_handler(&self, lease: &Lease) -> bool {
        self.lock()
            .get(lease)
            .is_some_and(|e| e.held && e.signals.finalized_by_handler())
    }

    /// The store no longer holds `lease` because the handler's own transaction finished the job
    /// (its row says so): nothing can run the job any more, so the handler's code, which may
    /// go on after its commit (a log line, a message published), runs to its end, neither
    /// stopped nor renewed; its executor then counts the job completed. (Stopped here, that code
    /// was dropped at its next `.await`, silently.) An outcome already with the completer is
    /// left to it, as [`InFlight::lost`] does.
    pub(crate) fn finished_by_handler(&self, lease: &Lease) {
        let mut map = self.lock();
        let Some(e) = map.get_mut(lease) else {
            return;
        };
        e.held = false;
        e.fenced_code_runs = false;
        if matches!(e.phase, Phase::Finalizing { .. }) {
            return;
        }
        let _ = e.signals.flags.reason.set(Abort::Finalized);
        if !e.code_runs() {
            map.remove(lease);
        }
    }

    /// Takes the execution of exactly `lease` away (a crash, or a guarded write that found the
    /// lease gone): fires its abort with `reason`. Nothing more is written for it; a lease
    /// still held in the store runs out there.
    pub(crate) fn abort_lease(&self, lease: &Lease, reason: Abort) {
        Self::take_away(&mut self.lock(), lease, reason);
    }

    /// The executions holding a lease and not yet finalizing, for the heartbeat's fault point.
    pub(crate) fn running_infos(&self) -> Vec<(Lease, Arc<AttemptInfo>)> {
        self.lock()
            .iter()
            .filter(|(_, e)| e.held && !matches!(e.phase, Phase::Finalizing { .. }))
            .map(|(lease, e)| (*lease, e.info.clone()))
            .collect()
    }

    /// Tells the handler of `lease` that cancellation was requested.
    pub(crate) fn request_cancel(&self, lease: &Lease) {
        if let Some(e) = self.lock().get(lease) {
            e.signals
                .flags
                .cancel_requested
                .store(true, Ordering::Release);
            e.signals.stop.stop(StopReason::CancelRequested);
        }
    }

    /// The handler of `lease` reported `progress` (JSON): kept for the next heartbeat, replacing
    /// any report not yet written.
    pub(crate) fn set_progress(&self, lease: &Lease, progress: String) {
        if let Some(e) = self.lock().get_mut(lease) {
            if e.held {
                e.progress = Some((progress, true));
            }
        }
    }

    /// The progress reported since it was last taken, of every held lease, to write; each is
    /// taken once.
    pub(crate) fn take_progress(&self) -> Vec<(Lease, String)> {
        let mut map = self.lock();
        let mut out = Vec::new();
        for (lease, e) in map.iter_mut().filter(|(_, e)| e.held) {
            if let Some((progress, pending @ true)) = &mut e.progress {
                *pending = false;
                out.push((*lease, progress.clone()));
            }
        }
        out
    }

    /// Marks again as to write the reports of `taken` that were not written (a row another
    /// transaction held, a failed statement), unless a newer report replaced them meanwhile.
    pub(crate) fn untake_progress(&self, taken: &[(Lease, String)]) {
        let mut map = self.lock();
        for (lease, progress) in taken {
            if let Some(e) = map.get_mut(lease).filter(|e| e.held) {
                if let Some((current, pending @ false)) = &mut e.progress {
                    if current == progress {
                        *pending = true;
                    }
                }
            }
        }
    }

    /// Every held lease, to renew; and the lease of every execution fenced while its code ran
    /// that still runs (code that never reaches an `.await`, a `blocking` closure): a fence
    /// tells the code to stop, but code that does not stop would otherwise outlive its lease,
    /// and the rescuer would hand the job to another worker while it runs. The renewal is
    /// guarded by the lease's token, so it only keeps a lease that no one else has taken.
    pub(crate) fn renewals(&self) -> Vec<Renewal> {
        self.lock()
            .iter()
            .filter(|(_, e)| e.held || e.fenced_code_runs)
            .map(|(lease, e)| Renewal {
                lease: *lease,
                extend_by: e.lease_len,
                stuck: e.stuck,
            })
            .collect()
    }

    /// The heartbeat sent at `sent` renewed those of `renewals` that `was_renewed` accepts.
    pub(crate) fn renewed(
        &self,
        renewals: &[Renewal],
        was_renewed: impl Fn(&Lease) -> bool,
        sent: Instant,
    ) {
        let mut map = self.lock();
        for r in renewals {
            if !was_renewed(&r.lease) {
                continue;
            }
            if let Some(e) = map.get_mut(&r.lease) {
                if e.held {
                    e.valid_until = saturating(sent, r.extend_by);
                }
            }
        }
    }

    /// Self-fencing: takes away every held lease whose code runs and that may expire within a
    /// third of its length, before another worker can claim it. Returns their executions.
    ///
    /// A lease whose code does not run (a job waiting for its start, an execution stopped by a
    /// shutdown that waits for its release) is kept and still renewed: nothing of it can
    /// overlap another owner, since `start` refuses a lease this close to its expiry. Once the
    /// heartbeats get through again, a renewal guarded by its token keeps it if no one else
    /// took the job, and the job starts; taken away, it was never given back, its lease ran
    /// out, and the rescuer counted an attempt it never ran (a dead letter on its last one),
    /// after an outage of two thirds of a lease.
    pub(crate) fn fence(&self, now: Instant) -> Vec<Arc<AttemptInfo>> {
        self.fence_where(|e| e.code_runs() && e.expires_within(e.lease_len / 3, now))
    }

    /// Takes away every held lease: the lease keeper failed, so no lease is renewed nor
    /// watched any more. Returns their executions.
    pub(crate) fn fence_all(&self) -> Vec<Arc<AttemptInfo>> {
        self.fence_where(|_| true)
    }

    /// An execution whose outcome is with the completer is never fenced: no code of it runs,
    /// and the completer's write is guarded by the lease's token, so it applies only while no
    /// one else has the job. Fenced, its outcome was dropped and the finished job ran again
    /// after any outage longer than two thirds of a lease.
    ///
    /// An execution whose handler finalized the job in its own transaction is stopped with
    /// [`Abort::Held`] instead (see there), once: it keeps its lease until its code has ended.
    fn fence_where(&self, doomed: impl Fn(&Entry) -> bool) -> Vec<Arc<AttemptInfo>> {
        let mut map = self.lock();
        let doomed: Vec<(Lease, Abort)> = map
            .iter()
            .filter(|(_, e)| {
                e.held
                    && !matches!(e.phase, Phase::Finalizing { .. })
                    && e.signals.reason() != Some(Abort::Held)
                    && doomed(e)
            })
            .map(|(lease, e)| {
                let reason = if e.signals.finalized_by_handler() {
                    Abort::Held
                } else {
                    Abort::Fenced
                };
                (*lease, reason)
            })
            .collect();
        let infos = doomed
            .iter()
            .filter_map(|(lease, _)| map.get(lease).map(|e| e.info.clone()))
            .collect();
        for (lease, reason) in &doomed {
            Self::take_away(&mut map, lease, *reason);
        }
        infos
    }

    /// Marks as stuck, once each, every execution whose code has run `stuck_after` past its
    /// timeout, or past being told to stop, and returns them. Stuck executions keep their slot
    /// and, while held, their lease: the heartbeat records them as stuck in the store.
    pub(crate) fn watch_stuck(&self, now: Instant, stuck_after: Duration) -> Vec<Stuck> {
        let mut map = self.lock();
        let mut found = Vec::new();
        for e in map.values_mut().filter(|e| !e.stuck) {
            let Phase::Running {
                since,
                timeout,
                stopping_since,
            } = e.phase
            else {
                continue;
            };
            let over_timeout =
                now.saturating_duration_since(since) > timeout.saturating_add(stuck_after);
            let over_stop =
                stopping_since.is_some_and(|s| now.saturating_duration_since(s) > stuck_after);
            if over_timeout || over_stop {
                e.stuck = true;
                found.push(Stuck {
                    info: e.info.clone(),
                    running_for: now.saturating_duration_since(since),
                    told_to_stop: stopping_since.is_some(),
                });
            }
        }
        found
    }

    /// Executions reported stuck whose code still runs.
    pub(crate) fn stuck_now(&self) -> u64 {
        self.lock()
            .values()
            .filter(|e| e.stuck && e.code_runs())
            .count() as u64
    }

    /// On shutdown: aborts every execution whose code is running, keeping their leases held
    /// (and renewed) until their code ends. Returns how many.
    pub(crate) fn abort_running(&self) -> usize {
        let map = self.lock();
        let mut n = 0;
        for e in map.values().filter(|e| e.held && e.code_runs()) {
            e.signals.abort(Abort::Shutdown);
            n += 1;
        }
        n
    }

    /// At the end of shutdown: forgets every execution, and says which leases to give back
    /// and which executions are abandoned with their code still running.
    pub(crate) fn take_leftovers(&self) -> Leftovers {
        let mut out = Leftovers::default();
        for (lease, e) in self.lock().drain() {
            match e.phase {
                // Code still running, whether its lease is still this worker's or was lost or
                // fenced meanwhile (those most of all: another worker may run the job now,
                // and only the process's exit stops this code).
                Phase::Running { .. } => out.abandoned.push(e.info),
                _ if !e.held => {}
                Phase::Waiting => out.releases.push(Release::unstarted(lease)),
                // Stopped by the shutdown, or an outcome that could not be written: the code
                // ran, and the attempt is given back.
                Phase::Ended { ran_for } | Phase::Finalizing { ran_for } => {
                    out.releases.push(Release::interrupted(lease, ran_for))
                }
            }
        }
        out
    }

    /// How many executions are not over yet: claimed, running, or waiting for their outcome
    /// to be written, including those whose lease was lost while their code still runs.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    /// Returns once an execution is in flight: at once if one is, else when a claim is
    /// recorded (a notification left by an earlier claim may end one wait early; the table
    /// is looked at again then).
    pub(crate) async fn until_occupied(&self) {
        while self.len() == 0 {
            self.occupied.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(inflight: &InFlight, lease_len: Duration, sent: Instant) -> Lease {
        let lease = Lease {
            id: 1,
            token: uuid::Uuid::new_v4(),
        };
        let info = Arc::new(AttemptInfo {
            id: 1,
            kind: "test.kind".into(),
            queue: "default".into(),
            attempt: 1,
            max_attempts: 1,
        });
        inflight.insert(lease, info, lease_len, sent);
        lease
    }

    /// The keeper's nudges sleep on `until_occupied` while nothing is in flight: it must
    /// wait while the table is empty and end once a claim is recorded, including a claim
    /// recorded between its look at the table and its wait.
    #[test]
    fn until_occupied_waits_for_a_claim_and_misses_none() {
        use futures_util::FutureExt;
        let inflight = InFlight::default();
        let now = Instant::now();
        assert_eq!(
            inflight.until_occupied().now_or_never(),
            None,
            "empty: waits"
        );
        let mut waiting = Box::pin(inflight.until_occupied());
        assert_eq!((&mut waiting).now_or_never(), None);
        let lease = claim(&inflight, Duration::from_secs(30), now);
        assert_eq!(waiting.now_or_never(), Some(()), "woken by the claim");
        assert_eq!(
            inflight.until_occupied().now_or_never(),
            Some(()),
            "occupied: at once"
        );
        assert!(inflight.remove(&lease));
        // Empty again: waits again (the claim's notification went to the waiter above).
        assert_eq!(inflight.until_occupied().now_or_never(), None);
        // A claim recorded while no one waits (between a look that found the table empty and
        // the wait that follows it) leaves its notification for that wait: it is not lost,
        // though the table is empty again by then.
        let lease = claim(&inflight, Duration::from_secs(30), now);
        assert!(inflight.remove(&lease));
        assert_eq!(
            inflight.occupied.notified().now_or_never(),
            Some(()),
            "kept for the next wait"
        );
        claim(&inflight, Duration::from_secs(30), now);
        assert_eq!(inflight.until_occupied().now_or_never(), Some(()));
    }

    #[test]
    fn the_longest_timeout_and_stuck_after_report_nothing_stuck() {
        let inflight = InFlight::default();
        let now = Instant::now();
        let lease = claim(&inflight, Duration::from_secs(3600), now);
        assert!(inflight.start(&lease, Duration::MAX, now).is_some());
        let later = now + Duration::from_secs(60);
        assert!(inflight.watch_stuck(later, Duration::MAX).is_empty());
        assert!(inflight
            .watch_stuck(later, Duration::from_secs(1))
            .is_empty());
        assert!(inflight.holds(&lease));
    }

    #[test]
    fn the_longest_lease_is_recorded_renewed_and_watched_without_a_panic() {
        let inflight = InFlight::default();
        let now = Instant::now();
        claim(&inflight, Duration::MAX, now);
        inflight.renewed(&inflight.renewals(), |_| true, now);
        // Whether it is fenced depends on how far the platform's clock reaches; that it is
        // asked without a panic is the point.
        let _ = inflight.fence(now + Duration::from_secs(60));
    }

    #[test]
    fn an_outcome_with_the_completer_is_never_fenced() {
        let inflight = InFlight::default();
        let now = Instant::now();
        let lease = claim(&inflight, Duration::from_secs(3), now);
        assert!(inflight
            .start(&lease, Duration::from_secs(60), now)
            .is_some());
        assert!(inflight.set_finalizing(&lease, now).is_some());
        // Long past the lease's end as this worker counts it (an outage): still written.
        assert!(inflight.fence(now + Duration::from_secs(10)).is_empty());
        assert!(inflight.fence_all().is_empty());
        assert!(inflight.holds(&lease));
    }

    #[test]
    fn a_fenced_execution_whose_code_runs_is_renewed_until_its_lease_is_lost() {
        let inflight = InFlight::default();
        let now = Instant::now();
        let lease = claim(&inflight, Duration::from_secs(3), now);
        assert!(inflight
            .start(&lease, Duration::from_secs(60), now)
            .is_some());
        assert_eq!(inflight.fence(now + Duration::from_secs(2)).len(), 1);
        assert!(!inflight.holds(&lease), "nothing is written for it");
        let leases = |i: &InFlight| i.renewals().iter().map(|r| r.lease).collect::<Vec<_>>();
        assert_eq!(
            leases(&inflight),
            [lease],
            "its code still runs: still renewed"
        );
        // The store says the token is gone: no more renewals.
        assert_eq!(inflight.lost(&lease), None, "counted once, as fenced");
        assert!(leases(&inflight).is_empty());
    }

    #[test]
    fn a_job_waiting_for_its_start_is_not_fenced_and_starts_once_renewed() {
        let inflight = InFlight::default();
        let now = Instant::now();
        let waiting = claim(&inflight, Duration::from_secs(3), now);
        // The heartbeats fail for two thirds of the lease: no code of it runs, so it is kept,
        // still renewed, but too close to its end to start.
        let late = now + Duration::from_secs(2);
        assert!(inflight.fence(late).is_empty());
        assert!(inflight.holds(&waiting));
        let renewals = inflight.renewals();
        assert_eq!(renewals.len(), 1);
        assert!(inflight
            .start(&waiting, Duration::from_secs(60), late)
            .is_none());
        // A heartbeat gets through: renewed, it starts.
        inflight.renewed(&renewals, |_| true, late);
        assert!(inflight
            .start(&waiting, Duration::from_secs(60), late)
            .is_some());
        // Without its keeper, every lease is taken away, waiting or not.
        let other = claim(&inflight, Duration::from_secs(3), now);
        assert_eq!(inflight.fence_all().len(), 2);
        assert!(!inflight.holds(&other));
    }

    #[test]
    fn a_lease_within_a_third_of_its_end_is_fenced() {
        let inflight = InFlight::default();
        let now = Instant::now();
        let lease = claim(&inflight, Duration::from_secs(3), now);
        assert!(inflight
            .start(&lease, Duration::from_secs(60), now)
            .is_some());
        assert!(inflight.fence(now + Duration::from_millis(1999)).is_empty());
        assert_eq!(inflight.fence(now + Duration::from_secs(2)).len(), 1);
        assert!(!inflight.holds(&lease));
    }
}
