//! What every task of one worker shares: the store handle, the registry, the in-flight table,
//! the counters, the completer's inbox. The keeper reaches it from its own thread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;

use crate::attempt::context::Extensions;
use crate::attempt::fault::{Fault, FaultInjector, FaultPoint};
use crate::attempt::registry::Registry;
use crate::contract::store::{BreakerCount, Lease};
use crate::model::attempt_info::AttemptInfo;
use crate::telemetry::{JobLabels, LabelCache};

use super::completer::Completion;
use super::config::WorkerConfig;
use super::inflight::InFlight;
use super::stats::{bump, Counters};

/// What every task of one worker shares.
pub(crate) struct Shared<S> {
    pub(crate) store: S,
    pub(crate) registry: Registry,
    pub(crate) state: Arc<Extensions>,
    pub(crate) config: WorkerConfig,
    pub(crate) inflight: InFlight,
    pub(crate) counters: Counters,
    pub(crate) faults: Option<Arc<dyn FaultInjector>>,
    pub(crate) rng: Mutex<fastrand::Rng>,
    pub(crate) completions: mpsc::UnboundedSender<Completion>,
    /// Tracks executor tasks so shutdown can wait for them.
    pub(crate) executors: TaskTracker,
    /// Ended attempts of kinds with a circuit breaker, not yet added to the database's counts
    /// (the completer adds them after each batch it writes).
    pub(crate) breakers: Mutex<HashMap<String, BreakerCount>>,
    /// The metric labels built so far, one set per kind and queue.
    pub(crate) label_cache: LabelCache,
    /// Kinds whose circuit breaker this worker saw trip, and when it learned of it: a job of
    /// such a kind claimed before then (waiting in the prefetch buffer) is given back instead
    /// of started (see [`Shared::claimed_before_its_breaker_tripped`]).
    pub(crate) tripped: Mutex<HashMap<String, tokio::time::Instant>>,
    /// Whether `tripped` holds anything: the executor's check costs one load until then.
    pub(crate) any_tripped: std::sync::atomic::AtomicBool,
    /// The permits of every execution's step store calls (see `StoreSteps::sharing`): one,
    /// the connection the worker's budget gives steps and releases.
    pub(crate) step_calls: Arc<tokio::sync::Semaphore>,
}

impl<S> Shared<S> {
    /// The metric labels of `job`: its queue, kind and its kind's owner.
    pub(crate) fn labels(&self, job: &AttemptInfo) -> JobLabels {
        self.label_cache.get(&job.queue, &job.kind, || {
            self.registry.get(&job.kind).and_then(|h| h.options().owner)
        })
    }

    /// This worker saw `kind`'s circuit breaker trip (the kind is paused cluster-wide).
    pub(crate) fn breaker_tripped(&self, kind: &str) {
        self.tripped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(kind.to_owned(), tokio::time::Instant::now());
        self.any_tripped
            .store(true, std::sync::atomic::Ordering::Release);
    }

    /// Whether the job of `lease`, of `kind`, was claimed before this worker saw `kind`'s
    /// breaker trip: it waited in the prefetch buffer, and starting it now would spend an
    /// attempt on what the breaker paused. A job claimed after the trip was claimed once the
    /// pause had ended (an operator's resume, or its cool-down), and runs.
    pub(crate) fn claimed_before_its_breaker_tripped(&self, kind: &str, lease: &Lease) -> bool {
        if !self.any_tripped.load(std::sync::atomic::Ordering::Acquire) {
            return false;
        }
        let Some(tripped) = self
            .tripped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(kind)
            .copied()
        else {
            return false;
        };
        self.inflight
            .claimed_at(lease)
            .is_some_and(|claimed| claimed < tripped)
    }

    /// Counts an ended attempt of `kind` for its circuit breaker, when it has one.
    pub(crate) fn count_for_breaker(&self, kind: &str, failed: bool) {
        let Some(breaker) = self.registry.get(kind).and_then(|h| h.options().breaker) else {
            return;
        };
        let mut counts = self.breakers.lock().unwrap_or_else(|e| e.into_inner());
        let count = counts
            .entry(kind.to_owned())
            .or_insert_with(|| BreakerCount {
                kind: kind.to_owned(),
                breaker,
                attempts: 0,
                failures: 0,
            });
        count.attempts = count.attempts.saturating_add(1);
        count.failures = count.failures.saturating_add(u32::from(failed));
    }

    /// Asks the injector, if any, whether the execution crashes at `point`; counts crashes.
    pub(crate) fn crashes_at(&self, point: FaultPoint, job: &AttemptInfo) -> bool {
        let crashed = self
            .faults
            .as_ref()
            .is_some_and(|f| f.at(point, job) == Fault::Crash);
        if crashed {
            bump(&self.counters.crashed, 1);
            tracing::warn!(%point, id = job.id, kind = %job.kind, "injected crash");
        }
        crashed
    }
}
