//! The executions a worker holds leases for, shared by the fetchers, executors, the heartbeat
//! and the completer. A job is in here from its claim until its outcome is written, its lease
//! is lost, it crashes (fault injection) or it is released on shutdown.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::context::AttemptInfo;
use crate::job::JobId;
use crate::store::{Lease, Renewal};

/// Why the runtime stopped an execution from outside the handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Abort {
    /// The lease was lost or could not be renewed in time.
    LeaseLost,
    /// The drain deadline passed during shutdown.
    Shutdown,
    /// An injected fault killed the execution.
    Crash,
    /// The store no longer holds the lease because the handler's own transaction finalized
    /// the job (`JobContext::finalized_in_transaction`): expected, not a loss.
    Finalized,
}

/// The signals of one execution.
#[derive(Debug, Clone)]
pub(crate) struct Signals {
    /// Fired for every stop (cancel requested included): what the handler sees in its context.
    pub(crate) cancel: CancellationToken,
    /// Fired when the runtime takes the execution away; the executor drops the handler.
    pub(crate) abort: CancellationToken,
    /// Why `abort` fired.
    pub(crate) reason: Arc<OnceLock<Abort>>,
    /// Set when the handler finalized the job in its own transaction.
    pub(crate) finalized_by_handler: Arc<AtomicBool>,
}

impl Signals {
    fn new() -> Self {
        Signals {
            cancel: CancellationToken::new(),
            abort: CancellationToken::new(),
            reason: Arc::new(OnceLock::new()),
            finalized_by_handler: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether the handler said it finalized the job in its own transaction.
    pub(crate) fn finalized_by_handler(&self) -> bool {
        self.finalized_by_handler.load(Ordering::Acquire)
    }

    /// Abort first, then tell the handler: an executor that sees the handler end because of
    /// the cancel signal then always sees the abort too, and writes nothing.
    fn abort(&self, reason: Abort) {
        let _ = self.reason.set(reason);
        self.abort.cancel();
        self.cancel.cancel();
    }
}

#[derive(Debug)]
struct Entry {
    lease: Lease,
    info: Arc<AttemptInfo>,
    lease_len: Duration,
    /// Local instant before which the database cannot have expired the lease.
    valid_until: Instant,
    signals: Signals,
    /// The outcome is with the completer; only the write remains.
    finalizing: bool,
}

/// The leases this worker holds.
#[derive(Debug, Default)]
pub(crate) struct InFlight {
    entries: Mutex<HashMap<JobId, Entry>>,
}

impl InFlight {
    fn lock(&self) -> MutexGuard<'_, HashMap<JobId, Entry>> {
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
        self.lock().insert(
            lease.id,
            Entry {
                lease,
                info,
                lease_len,
                valid_until: sent + lease_len,
                signals: signals.clone(),
                finalizing: false,
            },
        );
        signals
    }

    /// Whether `lease` is still held here.
    pub(crate) fn holds(&self, lease: &Lease) -> bool {
        self.lock()
            .get(&lease.id)
            .is_some_and(|e| e.lease == *lease)
    }

    /// The outcome of `lease` went to the completer.
    pub(crate) fn set_finalizing(&self, lease: &Lease) -> bool {
        match self.lock().get_mut(&lease.id) {
            Some(e) if e.lease == *lease => {
                e.finalizing = true;
                true
            }
            _ => false,
        }
    }

    /// Forgets `lease` (outcome written, crash, or lease lost). Returns whether it was held.
    pub(crate) fn remove(&self, lease: &Lease) -> bool {
        let mut map = self.lock();
        match map.get(&lease.id) {
            Some(e) if e.lease == *lease => {
                map.remove(&lease.id);
                true
            }
            _ => false,
        }
    }

    /// Takes an execution away: fires its abort with `reason` and forgets it.
    pub(crate) fn abort(&self, id: JobId, reason: Abort) -> bool {
        match self.lock().remove(&id) {
            Some(entry) => {
                entry.signals.abort(reason);
                true
            }
            None => false,
        }
    }

    /// The store reported `id` lost. Takes the execution away with [`Abort::Finalized`] when
    /// its handler finalized the job in its own transaction, else with [`Abort::LeaseLost`].
    /// Returns the reason, or `None` when `id` is not held.
    pub(crate) fn lost(&self, id: JobId) -> Option<Abort> {
        let finalized = self.lock().get(&id)?.signals.finalized_by_handler();
        let reason = if finalized {
            Abort::Finalized
        } else {
            Abort::LeaseLost
        };
        self.abort(id, reason).then_some(reason)
    }

    /// Takes the execution of exactly `lease` away (a crash, or a guarded write that found the
    /// lease gone): fires its abort with `reason` and forgets it. Nothing more is written for
    /// it; a lease still held in the store runs out there.
    pub(crate) fn abort_lease(&self, lease: &Lease, reason: Abort) {
        let mut map = self.lock();
        if map.get(&lease.id).is_some_and(|e| e.lease == *lease) {
            if let Some(entry) = map.remove(&lease.id) {
                entry.signals.abort(reason);
            }
        }
    }

    /// The executions still running (not yet finalizing), for the heartbeat's fault point.
    pub(crate) fn running_infos(&self) -> Vec<(Lease, Arc<AttemptInfo>)> {
        self.lock()
            .values()
            .filter(|e| !e.finalizing)
            .map(|e| (e.lease, e.info.clone()))
            .collect()
    }

    /// Tells the handler of `id` that cancellation was requested.
    pub(crate) fn request_cancel(&self, id: JobId) {
        if let Some(e) = self.lock().get(&id) {
            e.signals.cancel.cancel();
        }
    }

    /// Every lease to renew.
    pub(crate) fn renewals(&self) -> Vec<Renewal> {
        self.lock()
            .values()
            .map(|e| Renewal {
                lease: e.lease,
                extend_by: e.lease_len,
            })
            .collect()
    }

    /// The heartbeat sent at `sent` renewed these leases.
    pub(crate) fn renewed(&self, renewals: &[Renewal], lost: &[JobId], sent: Instant) {
        let mut map = self.lock();
        for r in renewals {
            if lost.contains(&r.lease.id) {
                continue;
            }
            if let Some(e) = map.get_mut(&r.lease.id) {
                if e.lease == r.lease {
                    e.valid_until = sent + r.extend_by;
                }
            }
        }
    }

    /// Self-fencing: takes away every execution whose lease may expire within a third of its
    /// length, before another worker can claim it. Returns how many.
    pub(crate) fn fence(&self, now: Instant) -> Vec<JobId> {
        let mut map = self.lock();
        let doomed: Vec<JobId> = map
            .values()
            .filter(|e| now + e.lease_len / 3 >= e.valid_until)
            .map(|e| e.lease.id)
            .collect();
        for id in &doomed {
            if let Some(entry) = map.remove(id) {
                entry.signals.abort(Abort::LeaseLost);
            }
        }
        doomed
    }

    /// On shutdown: aborts every execution that is still running, keeping their entries so
    /// their leases can be released.
    pub(crate) fn abort_running(&self) -> usize {
        let map = self.lock();
        let mut n = 0;
        for e in map.values().filter(|e| !e.finalizing) {
            e.signals.abort(Abort::Shutdown);
            n += 1;
        }
        n
    }

    /// Every lease still held, forgotten: what shutdown releases.
    pub(crate) fn take_all(&self) -> Vec<Lease> {
        self.lock().drain().map(|(_, e)| e.lease).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}
