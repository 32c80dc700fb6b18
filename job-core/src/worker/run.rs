//! Starting a worker and draining it on shutdown.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::contract::store::{Release, Store};
use crate::maintenance::{self, Periodic};
use crate::telemetry::LabelCache;

use super::builder::Worker;
use super::completer::{self, Completion};
use super::deadline::after;
use super::fetcher;
use super::inflight::InFlight;
use super::keeper::Keeper;
use super::shared::Shared;
use super::stats::{Counters, WorkerStats};

/// What shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DrainReport {
    /// Every running job finished before the drain deadline.
    pub finished_in_time: bool,
    /// Leases given back: claimed jobs that never started, and executions stopped by the
    /// drain deadline whose code then ended (each leaves a `released` entry in its history).
    /// An execution of a job given back uncounted
    /// [`MAX_REFUNDED_INTERRUPTIONS`](crate::MAX_REFUNDED_INTERRUPTIONS) times already is not
    /// (logged at WARN): its lease expires and the rescuer counts the attempt.
    pub released: u64,
    /// Executions whose code was still running `shutdown_grace` after the drain deadline
    /// (stuck in code that does not return), including those whose lease was lost or fenced
    /// while it ran: their leases were neither released nor renewed any more, so they expire
    /// in the store and the rescuer takes the jobs. Exit the process after `shutdown()` so that
    /// such code cannot overlap the job's next execution, with `std::process::exit` when this
    /// is above 0: returning from `main` drops the Tokio runtime, which waits for blocking code
    /// to return.
    pub abandoned: u64,
    /// The worker's counters once everything it could write was written: every outcome
    /// applied is counted here, unlike a [`WorkerHandle::stats`] read while the completer may
    /// still be counting one the database already shows.
    pub stats: WorkerStats,
}

/// How long shutdown may wait for the store beyond `drain_timeout + shutdown_grace`, in all:
/// for the give-back of claimed jobs that never started, before the drain (half of it at
/// most), and for the last release of leases, over all its tries (the rest). The drain
/// returns within `drain_timeout + shutdown_grace + RELEASE_TIMEOUT` (and 2 seconds more at
/// most to stop the worker's tasks and close its connections), even when the database hangs.
/// What cannot be written in that time is left in the store, where the leases expire and the
/// rescuer takes the jobs.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long shutdown waits, once the leases are released, for the lease keeper and the
/// maintenance services to stop and for the worker's own connections to close.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long the completer may go on writing past the shutdown grace, for the outcomes of
/// executions that ended at its very end; taken from the time of the last release.
const LAST_OUTCOMES: Duration = Duration::from_millis(100);

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
        self.counters.snapshot(self.inflight.stuck_now())
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

    /// Executions not over yet: claimed (prefetched included), running, or waiting for their
    /// outcome to be written, and those whose lease was lost while their code still runs. Its
    /// counters ([`stats`](Self::stats)) include every execution that is over.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight()
    }

    /// Drains: stops claiming and gives back claimed jobs that never started, waits up to
    /// `drain_timeout` for running jobs, then stops the rest and gives them up to
    /// `shutdown_grace` to end (their leases stay held meanwhile), writes every pending
    /// outcome, and releases the leases of the executions that did not finish. Returns within
    /// `drain_timeout + shutdown_grace +`
    /// [`RELEASE_TIMEOUT`] (and 2 seconds more at most to close), even when handlers never
    /// return or the database hangs: what could not be written by then is left to lease
    /// expiry and the rescuer (see [`DrainReport::abandoned`]).
    pub async fn shutdown(self) -> DrainReport {
        self.shutdown.cancel();
        match self.task.await {
            Ok(report) => report,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }
}

impl<S: Store> Worker<S> {
    /// Spawns the worker's tasks on the current Tokio runtime, and its lease keeper on a
    /// thread of its own. The worker runs its statements on connections of its own, made from
    /// the store's ([`Store::dedicated`]; see [`Worker::connections`]), never on the
    /// application's.
    ///
    /// Before it claims anything or runs its maintenance, the worker asks the store whether its
    /// schema has every migration of this build ([`Store::schema_lag`]), and waits while it
    /// lacks one (logged at ERROR, asked again every 5 seconds) or does not answer (WARN, every
    /// second): migrate before (or while) deploying workers of a new release.
    pub fn start(self) -> WorkerHandle {
        let (tx, rx) = mpsc::unbounded_channel();
        let seed = self.config.rng_seed.unwrap_or_else(|| fastrand::u64(..));
        let id = self.config.id.clone();
        let budget = self.connections();
        // Every call bounded: see `bound.rs`.
        let bound = super::bound::Bound {
            timeout: Some(self.config.store_timeout),
        };
        // The LISTEN connection, when the store opens one apart from its pool (PostgreSQL's:
        // a pool of its own, so that a silent one can be given up without holding one of
        // these), is one of the runtime's.
        let pool_size = budget
            .runtime
            .saturating_sub(self.store.listen_connections())
            .max(1);
        let store = crate::Layered::new(self.store.dedicated("job worker", pool_size), bound);
        let shared = Arc::new(Shared {
            store,
            registry: self.registry,
            state: Arc::new(self.state),
            config: self.config,
            inflight: InFlight::default(),
            counters: Counters::default(),
            faults: self.faults,
            rng: Mutex::new(fastrand::Rng::with_seed(seed)),
            completions: tx,
            executors: TaskTracker::new(),
            breakers: Mutex::default(),
            label_cache: LabelCache::default(),
            tripped: Mutex::default(),
            any_tripped: std::sync::atomic::AtomicBool::new(false),
            step_calls: Arc::new(tokio::sync::Semaphore::new(1)),
        });
        // The keeper bounds each of its calls by its heartbeat period: the layer passes them
        // through (it is there for the type only).
        let unbounded = super::bound::Bound { timeout: None };
        let keeper = Keeper::start(
            shared.clone(),
            crate::Layered::new(self.store, unbounded),
            Some(tokio::runtime::Handle::current()),
        );
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(supervise(
            shared.clone(),
            keeper,
            self.queues,
            self.periodic,
            rx,
            shutdown.clone(),
        ));
        tracing::info!(
            worker = %id,
            connections = budget.runtime,
            lease_keeper_connections = budget.lease_keeper,
            "worker started"
        );
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

/// How often a worker whose store's schema lags this build asks again.
const SCHEMA_RECHECK: Duration = Duration::from_secs(5);

/// How often a worker asks again when the store could not answer (the database is down or
/// restarting, say): sooner, since it is likely up to date.
const SCHEMA_RETRY: Duration = Duration::from_secs(1);

/// Holds the worker, before it claims anything or runs its maintenance, while the store's
/// schema lacks migrations this build needs ([`Store::schema_lag`]), or while the store cannot
/// answer: said at ERROR (a lag) or WARN (no answer), then once a minute, and asked again until
/// the database is migrated and answers. True when it may start; false when it was shut down
/// meanwhile (nothing of it started: no claim, no maintenance pass).
async fn wait_for_schema<S: Store>(
    shared: &Shared<S>,
    shutdown: &CancellationToken,
    give_up: &GiveUp,
) -> bool {
    let mut waited = false;
    let mut said: Option<Instant> = None;
    loop {
        // A shutdown meanwhile lets the question in flight be answered, until `give_up`: a
        // worker started and stopped at once on a database that is up to date still
        // registers its kinds.
        let check = shared.store.schema_lag();
        tokio::pin!(check);
        let answer = tokio::select! {
            answer = &mut check => answer,
            () = shutdown.cancelled() => match tokio::time::timeout_at(give_up.at(shared), check).await {
                Ok(answer) => answer,
                Err(_) => return false,
            },
        };
        if shutdown.is_cancelled() && !matches!(answer, Ok(None)) {
            return false;
        }
        let say = said.is_none_or(|at| at.elapsed() >= Duration::from_secs(60));
        let pause = match answer {
            Ok(None) => {
                if waited {
                    tracing::info!(
                        worker = %shared.config.id,
                        "the job schema is migrated: claims start"
                    );
                }
                return true;
            }
            Ok(Some(lag)) => {
                if say {
                    tracing::error!(
                        worker = %shared.config.id,
                        first_missing = lag.first_missing,
                        recorded = lag.recorded,
                        "{lag}: this worker claims nothing until the database is migrated \
                         (`migrate` or the schema script, as the role that owns the schema; \
                         see the README's Installing the schema); asked again every 5 s"
                    );
                    said = Some(Instant::now());
                }
                SCHEMA_RECHECK
            }
            Err(e) => {
                if say {
                    tracing::warn!(
                        worker = %shared.config.id,
                        error = %e,
                        "could not read which job migrations the database has: this worker \
                         claims nothing until it can; asked again every second"
                    );
                    said = Some(Instant::now());
                }
                SCHEMA_RETRY
            }
        };
        waited = true;
        tokio::select! {
            () = shutdown.cancelled() => return false,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// When the statements of a worker's start (the schema's question, the kinds' record) give
/// up once a shutdown was requested: fixed when the first of them sees the shutdown, within
/// the drain and grace they do not otherwise use (no job has been claimed yet), and
/// [`RELEASE_TIMEOUT`] at most for all of them, so that a hung database cannot hold shutdown
/// past its bound.
#[derive(Default)]
struct GiveUp(std::sync::OnceLock<Instant>);

impl GiveUp {
    fn at<S>(&self, shared: &Shared<S>) -> Instant {
        *self.0.get_or_init(|| {
            let patience = RELEASE_TIMEOUT.min(
                shared
                    .config
                    .drain_timeout
                    .saturating_add(shared.config.shutdown_grace),
            );
            after(Instant::now(), patience)
        })
    }
}

/// Stops a worker shut down before it started (see [`wait_for_schema`]): its lease keeper,
/// which holds nothing, and its connections.
async fn stop_unstarted<S: Store>(shared: &Shared<S>, keeper: Keeper) -> DrainReport {
    let close_by = Instant::now() + CLOSE_TIMEOUT;
    if tokio::time::timeout_at(close_by, keeper.stop())
        .await
        .is_err()
    {
        tracing::warn!("the lease keeper did not stop in time: left to end on its own");
    }
    if tokio::time::timeout_at(close_by, shared.store.close())
        .await
        .is_err()
    {
        tracing::warn!("the worker's connections did not close in time");
    }
    tracing::info!(worker = %shared.config.id, "worker stopped before it started");
    DrainReport {
        finished_in_time: true,
        released: 0,
        abandoned: 0,
        stats: shared.counters.snapshot(0),
    }
}

/// Tells the store what it must know of this worker's kinds before they are claimed (their
/// compensating jobs). When a kind has one, claims wait until the store has it, retrying
/// every second (a discard must never miss its compensation); otherwise one try, logged when
/// it fails, so a worker without compensations never waits on it.
async fn register_kinds<S: Store>(
    shared: &Shared<S>,
    shutdown: &CancellationToken,
    give_up: &GiveUp,
) {
    let kinds: Vec<(String, Option<crate::Compensate>)> = shared
        .registry
        .handlers()
        .map(|h| (h.kind().to_owned(), h.options().compensate))
        .collect();
    let must = kinds.iter().any(|(_, c)| c.is_some());
    // A shutdown requested meanwhile lets the statement in flight finish, until `give_up`:
    // a worker started and stopped at once still registers its kinds, and a hung database
    // cannot hold shutdown past its bound.
    loop {
        let attempt = shared.store.register_kinds(&kinds);
        tokio::pin!(attempt);
        let registered = tokio::select! {
            r = &mut attempt => r,
            () = shutdown.cancelled() => match tokio::time::timeout_at(give_up.at(shared), attempt).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!("shutdown while the kinds were being recorded: not recorded");
                    return;
                }
            },
        };
        match registered {
            Ok(()) => return,
            Err(e) if must => {
                tracing::error!(error = %e, "could not record the kinds' compensating jobs; \
                                 claims wait until it is done");
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not record the kinds (none compensates)");
                return;
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

async fn supervise<S: Store>(
    shared: Arc<Shared<S>>,
    keeper: Keeper,
    queues: Vec<(String, usize)>,
    periodic: Vec<Periodic>,
    completions: mpsc::UnboundedReceiver<Completion>,
    shutdown: CancellationToken,
) -> DrainReport {
    let stop_fetching = CancellationToken::new();
    let stop_completer = CancellationToken::new();
    let stop_services = CancellationToken::new();

    let give_up = GiveUp::default();
    if !wait_for_schema(&shared, &shutdown, &give_up).await {
        return stop_unstarted(&shared, keeper).await;
    }
    register_kinds(&shared, &shutdown, &give_up).await;
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
    let mut completer = tokio::spawn(completer::run(
        shared.clone(),
        completions,
        stop_completer.clone(),
    ));
    let services: Vec<_> = maintenance::services(
        &shared.store,
        &shared.config,
        &periodic,
        shortest_lease(&shared),
        &shared.registry,
    )
    .into_iter()
    .map(|service| tokio::spawn(maintenance::run(service, stop_services.clone())))
    .collect();

    shutdown.cancelled().await;
    tracing::info!(worker = %shared.config.id, "worker draining");
    // Every wait below has a deadline, so that a hung database cannot hold shutdown past
    // `drain_timeout + shutdown_grace + RELEASE_TIMEOUT` (and the close): the fetchers' stop
    // and the last writes share `RELEASE_TIMEOUT`, the running jobs keep their whole drain
    // and grace.
    let began = Instant::now();
    let writes_end = after(
        began,
        shared
            .config
            .drain_timeout
            .saturating_add(shared.config.shutdown_grace)
            .saturating_add(RELEASE_TIMEOUT),
    );
    stop_fetching.cancel();
    // Claimed jobs that never started are released by their fetcher as it stops, which waits
    // for the store `fetcher::STOP_TIMEOUT` at most; the backstop here only guards that.
    let mut released = 0;
    let fetchers_by = began + RELEASE_TIMEOUT;
    for mut f in fetchers {
        match tokio::time::timeout_at(fetchers_by, &mut f).await {
            Ok(n) => released += n.unwrap_or(0),
            Err(_) => {
                tracing::warn!(
                    "a fetcher did not stop in time: its claims in flight are abandoned, and \
                     the jobs it held are left for the final release"
                );
                f.abort();
            }
        }
    }
    let _ = wakeups.await;

    shared.executors.close();
    let drain_ends = after(Instant::now(), shared.config.drain_timeout);
    let grace_ends = after(drain_ends, shared.config.shutdown_grace);
    let finished_in_time = tokio::time::timeout_at(drain_ends, shared.executors.wait())
        .await
        .is_ok();
    if !finished_in_time {
        let n = shared.inflight.abort_running();
        tracing::warn!(
            running = n,
            grace = ?shared.config.shutdown_grace,
            "drain deadline passed: stopping running jobs and waiting for their code to end"
        );
        if tokio::time::timeout_at(grace_ends, shared.executors.wait())
            .await
            .is_err()
        {
            tracing::error!(
                "executions still running after the shutdown grace: abandoning them (their \
                 leases expire and the rescuer takes the jobs)"
            );
        }
    }
    // The outcomes get the rest of the grace, or a whole grace from now when the jobs
    // finished early; then a moment more for those of executions that ended at its end.
    stop_completer.cancel();
    let now = Instant::now();
    let outcomes_by = grace_ends
        .min(after(now, shared.config.shutdown_grace))
        .max(now + LAST_OUTCOMES)
        .min(writes_end);
    if tokio::time::timeout_at(outcomes_by, &mut completer)
        .await
        .is_err()
    {
        tracing::error!(
            "pending outcomes could not be written in time (the database does not answer): \
             releasing those jobs instead"
        );
        completer.abort();
    }

    let leftovers = shared.inflight.take_leftovers();
    for info in &leftovers.abandoned {
        tracing::error!(
            id = info.id,
            kind = %info.kind,
            attempt = info.attempt,
            "abandoned on shutdown with its code still running: its lease will expire"
        );
    }
    let release_by = writes_end.min(Instant::now() + RELEASE_TIMEOUT);
    released += release(&shared, &leftovers.releases, release_by).await;

    // Stopping the keeper and the services and closing the connections wait for the store
    // too (a statement in flight, a connection to end): bounded together.
    let close_by = Instant::now() + CLOSE_TIMEOUT;
    stop_services.cancel();
    let mut services = services;
    let (keeper_stopped, services_stopped) = tokio::join!(
        tokio::time::timeout_at(close_by, keeper.stop()),
        tokio::time::timeout_at(close_by, async {
            for service in &mut services {
                let _ = service.await;
            }
        }),
    );
    if keeper_stopped.is_err() {
        tracing::warn!("the lease keeper did not stop in time: left to end on its own");
    }
    if services_stopped.is_err() {
        tracing::warn!("maintenance passes still waiting for the store: stopped");
        services.iter().for_each(JoinHandle::abort);
    }
    if tokio::time::timeout_at(close_by, shared.store.close())
        .await
        .is_err()
    {
        tracing::warn!("the worker's connections did not close in time");
    }
    let abandoned = leftovers.abandoned.len() as u64;
    tracing::info!(worker = %shared.config.id, released, abandoned, "worker stopped");
    DrainReport {
        finished_in_time,
        released,
        abandoned,
        stats: shared.counters.snapshot(0),
    }
}

/// Gives back the leases left at the end of shutdown, trying until `deadline` at most (and
/// [`RELEASE_TIMEOUT`] at most). Returns how many the store released; those it could not
/// release expire in the store.
async fn release<S: Store>(shared: &Shared<S>, releases: &[Release], deadline: Instant) -> u64 {
    if releases.is_empty() {
        return 0;
    }
    let tries = async {
        for attempt in 1..=3u32 {
            match shared.store.release(releases).await {
                Ok(n) => {
                    shared.counters.released(n);
                    let refused = (releases.len() as u64).saturating_sub(n);
                    if refused > 0 {
                        tracing::warn!(
                            refused,
                            "leases not given back on shutdown: the store no longer held them, \
                             or their jobs were given back uncounted MAX_REFUNDED_INTERRUPTIONS \
                             times already; they expire in the store, and the rescuer counts \
                             those attempts"
                        );
                    }
                    return n;
                }
                Err(e) => {
                    tracing::warn!(error = %e, attempt, "release on shutdown failed");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
                }
            }
        }
        0
    };
    match tokio::time::timeout_at(deadline, tries).await {
        Ok(n) => n,
        Err(_) => {
            tracing::warn!(
                leases = releases.len(),
                "release on shutdown timed out: those leases expire in the store, and the \
                 rescuer takes the jobs"
            );
            0
        }
    }
}

/// The shortest lease of the registered kinds.
fn shortest_lease<S>(shared: &Shared<S>) -> Duration {
    shared
        .config
        .shortest_lease(&shared.registry)
        .unwrap_or(Duration::from_secs(30))
}
