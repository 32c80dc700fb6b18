//! Starting a worker and draining it on shutdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::context::{AttemptInfo, Extensions};
use crate::fault::{Fault, FaultInjector, FaultPoint};
use crate::maintenance::{Periodic, Pruner, Rescuer, Scheduler};
use crate::registry::Registry;
use crate::store::Store;

use super::builder::Worker;
use super::completer::{self, Completion};
use super::config::WorkerConfig;
use super::inflight::InFlight;
use super::stats::{bump, Counters, WorkerStats};
use super::{fetcher, heartbeat};

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
}

impl<S> Shared<S> {
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

/// What shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Every running job finished before the drain deadline.
    pub finished_in_time: bool,
    /// Leases given back because their jobs had not finished.
    pub released: u64,
}

/// A running worker. Dropping it does not stop the worker; call [`shutdown`](Self::shutdown).
pub struct WorkerHandle {
    id: String,
    shared: Arc<dyn StatsSource>,
    shutdown: CancellationToken,
    task: JoinHandle<DrainReport>,
}

trait StatsSource: Send + Sync {
    fn stats(&self) -> WorkerStats;
    fn in_flight(&self) -> usize;
}

impl<S: Send + Sync> StatsSource for Shared<S> {
    fn stats(&self) -> WorkerStats {
        self.counters.snapshot()
    }

    fn in_flight(&self) -> usize {
        self.inflight.len()
    }
}

impl WorkerHandle {
    /// The worker's id (`locked_by`).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Counters since start.
    pub fn stats(&self) -> WorkerStats {
        self.shared.stats()
    }

    /// Leases currently held.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight()
    }

    /// Drains: stops claiming, waits up to the drain timeout for running jobs, writes every
    /// pending outcome, then releases the leases of jobs that did not finish.
    pub async fn shutdown(self) -> DrainReport {
        self.shutdown.cancel();
        match self.task.await {
            Ok(report) => report,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

impl<S: Store> Worker<S> {
    /// Spawns the worker's tasks on the current Tokio runtime.
    pub fn start(self) -> WorkerHandle {
        let (tx, rx) = mpsc::unbounded_channel();
        let seed = self.config.rng_seed.unwrap_or_else(|| fastrand::u64(..));
        let id = self.config.id.clone();
        let shared = Arc::new(Shared {
            store: self.store,
            registry: self.registry,
            state: Arc::new(self.state),
            config: self.config,
            inflight: InFlight::default(),
            counters: Counters::default(),
            faults: self.faults,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            completions: tx,
            executors: TaskTracker::new(),
        });
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(supervise(
            shared.clone(),
            self.queues,
            self.periodic,
            rx,
            shutdown.clone(),
        ));
        WorkerHandle {
            id,
            shared,
            shutdown,
            task,
        }
    }

    /// Runs until `signal` completes, then drains (see [`WorkerHandle::shutdown`]).
    pub async fn run_until(self, signal: impl std::future::Future<Output = ()>) -> DrainReport {
        let handle = self.start();
        signal.await;
        handle.shutdown().await
    }
}

async fn supervise<S: Store>(
    shared: Arc<Shared<S>>,
    queues: Vec<(String, usize)>,
    periodic: Vec<Periodic>,
    completions: mpsc::UnboundedReceiver<Completion>,
    shutdown: CancellationToken,
) -> DrainReport {
    let stop_fetching = CancellationToken::new();
    let stop_completer = CancellationToken::new();
    let stop_services = CancellationToken::new();

    let wake: HashMap<String, Arc<Notify>> = queues
        .iter()
        .map(|(q, _)| (q.clone(), Arc::new(Notify::new())))
        .collect();
    let wakeups = tokio::spawn(fetcher::forward_wakeups(
        shared.clone(),
        wake.clone(),
        stop_fetching.clone(),
    ));
    let fetchers: Vec<_> = queues
        .into_iter()
        .map(|(queue, concurrency)| {
            let notify = wake[&queue].clone();
            tokio::spawn(fetcher::run(
                shared.clone(),
                queue,
                concurrency,
                notify,
                stop_fetching.clone(),
            ))
        })
        .collect();
    let completer = tokio::spawn(completer::run(
        shared.clone(),
        completions,
        stop_completer.clone(),
    ));
    let heartbeat = tokio::spawn(heartbeat::run(shared.clone(), stop_services.clone()));
    let rescuer = tokio::spawn(
        Rescuer::new(shared.store.clone(), shared.config.rescuer).run(stop_services.clone()),
    );
    let pruner = tokio::spawn(
        Pruner::new(shared.store.clone(), shared.config.pruner).run(stop_services.clone()),
    );
    let scheduler = tokio::spawn(
        Scheduler::new(shared.store.clone(), periodic, shared.config.scheduler)
            .run(stop_services.clone()),
    );
    tracing::info!(worker = %shared.config.id, "worker started");

    shutdown.cancelled().await;
    tracing::info!(worker = %shared.config.id, "worker draining");
    stop_fetching.cancel();
    // Claimed jobs that never started are released by their fetcher as it stops.
    let mut released = 0;
    for f in fetchers {
        released += f.await.unwrap_or(0);
    }
    let _ = wakeups.await;

    shared.executors.close();
    let finished_in_time =
        tokio::time::timeout(shared.config.drain_timeout, shared.executors.wait())
            .await
            .is_ok();
    if !finished_in_time {
        let n = shared.inflight.abort_running();
        tracing::warn!(running = n, "drain deadline passed: stopping running jobs");
        shared.executors.wait().await;
    }
    stop_completer.cancel();
    let _ = completer.await;

    let leases = shared.inflight.take_all();
    if !leases.is_empty() {
        for attempt in 1..=3u32 {
            match shared.store.release(&leases).await {
                Ok(n) => {
                    released += n;
                    shared.counters.released(n);
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, attempt, "release on shutdown failed");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                }
            }
        }
    }
    stop_services.cancel();
    let _ = heartbeat.await;
    let _ = rescuer.await;
    let _ = pruner.await;
    let _ = scheduler.await;
    tracing::info!(worker = %shared.config.id, released, "worker stopped");
    DrainReport {
        finished_in_time,
        released,
    }
}
