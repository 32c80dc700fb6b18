//! Counters a worker keeps, readable while it runs.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::model::outcome::Outcome;

/// A snapshot of a worker's counters since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkerStats {
    /// Jobs claimed.
    pub claimed: u64,
    /// Claimed jobs that found every execution slot of their queue taken and waited for one
    /// (prefetched jobs).
    pub waited: u64,
    /// Outcomes written as `completed`.
    pub completed: u64,
    /// Outcomes written as `retryable`.
    pub retried: u64,
    /// Outcomes written as `discarded`.
    pub discarded: u64,
    /// Outcomes written as `cancelled`.
    pub cancelled: u64,
    /// Outcomes written as snoozed.
    pub snoozed: u64,
    /// Attempts that ran over their timeout.
    pub timeouts: u64,
    /// Attempts whose handler panicked.
    pub panics: u64,
    /// Outcomes dropped, or executions stopped, because the store no longer held the lease
    /// (a heartbeat or a guarded write found it gone). Fenced ones are not counted here.
    pub lease_lost: u64,
    /// Executions this worker stopped itself (and their outcomes dropped) because their lease
    /// could not be renewed in time.
    pub fenced: u64,
    /// Executions stopped by an injected crash fault.
    pub crashed: u64,
    /// Leases given back on shutdown.
    pub released: u64,
    /// Executions reported stuck: their code ran the worker's `stuck_after` past its timeout,
    /// or past being told to stop, without returning.
    pub stuck: u64,
    /// Executions stuck now: reported stuck, their code still running (each holds its slot,
    /// and its lease unless that was lost).
    pub stuck_now: u64,
    /// Outcomes the database refused even alone and made storable: written as a discard of
    /// class `unstorable` instead, or, refused again, left for the rescuer.
    pub unstorable: u64,
    /// Circuit breakers this worker's counts tripped (each pauses its kind cluster-wide; the
    /// kind's jobs it had claimed then go back unstarted).
    pub breakers_tripped: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    claimed: AtomicU64,
    pub(crate) waited: AtomicU64,
    completed: AtomicU64,
    retried: AtomicU64,
    discarded: AtomicU64,
    cancelled: AtomicU64,
    snoozed: AtomicU64,
    pub(crate) timeouts: AtomicU64,
    pub(crate) panics: AtomicU64,
    pub(crate) lease_lost: AtomicU64,
    pub(crate) fenced: AtomicU64,
    pub(crate) crashed: AtomicU64,
    released: AtomicU64,
    pub(crate) stuck: AtomicU64,
    pub(crate) unstorable: AtomicU64,
    pub(crate) breakers_tripped: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64, by: u64) {
    counter.fetch_add(by, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn claimed(&self, n: usize) {
        bump(&self.claimed, n as u64);
    }

    pub(crate) fn released(&self, n: u64) {
        bump(&self.released, n);
    }

    pub(crate) fn applied(&self, outcome: &Outcome) {
        let counter = match outcome {
            Outcome::Complete => &self.completed,
            Outcome::Retry { .. } => &self.retried,
            Outcome::Cancel { .. } => &self.cancelled,
            Outcome::Snooze { .. } => &self.snoozed,
            Outcome::Discard { .. } => &self.discarded,
        };
        bump(counter, 1);
    }

    /// The counters; `stuck_now` is the in-flight table's to tell.
    pub(crate) fn snapshot(&self, stuck_now: u64) -> WorkerStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WorkerStats {
            claimed: get(&self.claimed),
            waited: get(&self.waited),
            completed: get(&self.completed),
            retried: get(&self.retried),
            discarded: get(&self.discarded),
            cancelled: get(&self.cancelled),
            snoozed: get(&self.snoozed),
            timeouts: get(&self.timeouts),
            panics: get(&self.panics),
            lease_lost: get(&self.lease_lost),
            fenced: get(&self.fenced),
            crashed: get(&self.crashed),
            released: get(&self.released),
            stuck: get(&self.stuck),
            stuck_now,
            unstorable: get(&self.unstorable),
            breakers_tripped: get(&self.breakers_tripped),
        }
    }
}
