//! Assembling a worker: its store, jobs, queues, state and settings.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::attempt::context::Extensions;
use crate::attempt::fault::FaultInjector;
use crate::attempt::registry::Registry;
use crate::contract::store::Store;
use crate::maintenance::{self, Periodic, PrunerConfig};
use crate::model::error::BuildError;
use crate::model::job::{too_long, Job};
use crate::model::new_job::name_problem;

use super::config::{store_timeout_too_short, too_short, WorkerConfig, MIN_INTERVAL, MIN_LEASE};

/// A configured worker, ready to [`start`](Worker::start).
pub struct Worker<S: Store> {
    pub(crate) store: S,
    pub(crate) registry: Registry,
    pub(crate) queues: Vec<(String, usize)>,
    pub(crate) state: Extensions,
    pub(crate) config: WorkerConfig,
    pub(crate) faults: Option<Arc<dyn FaultInjector>>,
    pub(crate) periodic: Vec<Periodic>,
}

impl<S: Store> Worker<S> {
    /// Starts configuring a worker over `store`.
    pub fn builder(store: S) -> WorkerBuilder<S> {
        WorkerBuilder {
            store,
            registry: Registry::new(),
            queues: Vec::new(),
            state: Extensions::new(),
            config: WorkerConfig::default(),
            faults: None,
            periodic: Vec::new(),
        }
    }

    /// This worker's id, recorded as `locked_by`.
    pub fn id(&self) -> &str {
        &self.config.id
    }

    /// The connections this worker opens of its own, besides the application's pool: the
    /// lease keeper's, on its own thread, and the rest of the runtime's (claims, at most two
    /// in flight per queue; the completer; releases; durable steps; maintenance; the LISTEN
    /// connection), sized by [`WorkerConfig::connections`]. Handlers never use them, so
    /// handlers holding every connection of the application's pool cannot delay a heartbeat,
    /// a claim or an outcome; size the application's pool for the handlers alone.
    pub fn connections(&self) -> ConnectionBudget {
        ConnectionBudget {
            lease_keeper: super::keeper::KEEPER_CONNECTIONS,
            runtime: self
                .config
                .connections
                .unwrap_or_else(|| default_connections(self.queues.len())),
        }
    }
}

/// The database connections a worker opens of its own (see [`Worker::connections`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionBudget {
    /// The lease keeper's: 3.
    pub lease_keeper: u32,
    /// The rest of the runtime's.
    pub runtime: u32,
}

impl ConnectionBudget {
    /// Both together: the most connections the worker holds at once.
    pub fn total(&self) -> u32 {
        self.lease_keeper.saturating_add(self.runtime)
    }
}

/// The default runtime connections: two claims in flight per queue, plus the completer, the
/// LISTEN connection, maintenance and one for steps and releases.
fn default_connections(queues: usize) -> u32 {
    u32::try_from(queues)
        .unwrap_or(u32::MAX / 4)
        .saturating_mul(2)
        .saturating_add(4)
}

/// The fewest runtime connections a worker can work with: one claim per queue, the completer,
/// the LISTEN connection and one for the rest.
fn min_connections(queues: usize) -> u32 {
    u32::try_from(queues)
        .unwrap_or(u32::MAX / 4)
        .saturating_add(3)
}

/// Builds a [`Worker`].
///
/// ```no_run
/// # use job_core::{Job, Store, Worker};
/// # fn demo<S: Store, SendInvoice: Job>(store: S) -> Result<(), job_core::BuildError> {
/// let worker = Worker::builder(store)
///     .register::<SendInvoice>()
///     .queue("mail", 10)
///     .build()?;
/// # Ok(()) }
/// ```
pub struct WorkerBuilder<S: Store> {
    store: S,
    registry: Registry,
    queues: Vec<(String, usize)>,
    state: Extensions,
    config: WorkerConfig,
    faults: Option<Arc<dyn FaultInjector>>,
    periodic: Vec<Result<Periodic, BuildError>>,
}

impl<S: Store> WorkerBuilder<S> {
    /// Runs jobs of type `J`. Two types under one kind make [`build`](Self::build) fail.
    pub fn register<J: Job>(mut self) -> Self {
        self.registry.register::<J>();
        self
    }

    /// Claims from `queue` with at most `concurrency` jobs running at once.
    pub fn queue(mut self, queue: impl Into<String>, concurrency: usize) -> Self {
        self.queues.push((queue.into(), concurrency));
        self
    }

    /// Makes `value` available to handlers through [`JobContext::state`](crate::JobContext::state).
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(value);
        self
    }

    /// Replaces the settings.
    pub fn config(mut self, config: WorkerConfig) -> Self {
        self.config = config;
        self
    }

    /// Changes some settings in place, keeping the others:
    /// `.configure(|c| c.drain_timeout = Duration::from_secs(5))`.
    pub fn configure(mut self, change: impl FnOnce(&mut WorkerConfig)) -> Self {
        change(&mut self.config);
        self
    }

    /// Sets the worker's id (`locked_by`).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.config.id = id.into();
        self
    }

    /// Sets the idle poll interval ([`WorkerConfig::poll_interval`]): [`MIN_INTERVAL`] (10 ms)
    /// to [`MAX_DURATION`](crate::MAX_DURATION); [`build`](Self::build) refuses another.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.config.poll_interval = every;
        self
    }

    /// Sets how many claimed jobs each queue may hold beyond its running ones: a number for
    /// a fixed prefetch (`0` claims only free slots), or a [`Prefetch`](crate::Prefetch) (see
    /// [`WorkerConfig::prefetch`]; the default is [`Prefetch::AUTO`](crate::Prefetch::AUTO)).
    pub fn prefetch(mut self, jobs: impl Into<crate::worker::Prefetch>) -> Self {
        self.config.prefetch = jobs.into();
        self
    }

    /// Sets how long shutdown waits for running jobs.
    pub fn drain_timeout(mut self, timeout: Duration) -> Self {
        self.config.drain_timeout = timeout;
        self
    }

    /// Sets how many connections the worker opens for its own statements, apart from the
    /// lease keeper's (see [`WorkerConfig::connections`]).
    pub fn connections(mut self, connections: u32) -> Self {
        self.config.connections = Some(connections);
        self
    }

    /// Enqueues a `J` made by `make` for every period of the cron expression `schedule`
    /// (5 fields, or 6 with seconds first: `"0 */5 * * * *"` is every five minutes). Every
    /// worker with the same schedule may declare it: each period is enqueued once, decided by
    /// its unique key (see [`Scheduler`](crate::maintenance::Scheduler)). An expression that
    /// does not parse makes [`build`](Self::build) fail with
    /// [`BuildError::InvalidSchedule`]; `make` is called once here, and a job that would be
    /// refused (its payload or options), or a `make` that panics, makes it fail with
    /// [`BuildError::InvalidOption`] `periodic`. A later job refused all the same is logged, naming the schedule, and that
    /// period skipped; the other schedules go on. One schedule per kind: a second one of the
    /// same kind makes `build` fail with [`BuildError::InvalidOption`] `periodic`.
    pub fn periodic<J, F>(mut self, schedule: &str, make: F) -> Self
    where
        J: Job,
        F: Fn() -> J + Send + Sync + 'static,
    {
        self.periodic.push(Periodic::new::<J, F>(schedule, make));
        self
    }

    /// Sets how long finished jobs are kept and how often the pruner runs.
    pub fn pruner(mut self, config: PrunerConfig) -> Self {
        self.config.pruner = config;
        self
    }

    /// Installs a fault injector (see `job-testkit`'s `Faults`). Production workers have none,
    /// and then the fault points cost one branch each.
    pub fn faults(mut self, injector: impl FaultInjector) -> Self {
        self.faults = Some(Arc::new(injector));
        self
    }

    /// Checks the configuration and returns the worker.
    pub fn build(self) -> Result<Worker<S>, BuildError> {
        self.registry.check()?;
        if self.queues.is_empty() {
            return Err(BuildError::NoQueues);
        }
        // A set, not a scan of the queues before each: 40,000 queues took 8 s in build().
        let mut seen = HashSet::with_capacity(self.queues.len());
        for (queue, concurrency) in &self.queues {
            // The rule every door applies: a queue no enqueue can fill is a mistake.
            if let Some(problem) = name_problem(queue) {
                return Err(invalid("queue", format!("queue {queue:?} {problem}")));
            }
            if *concurrency == 0 || *concurrency > MAX_CONCURRENCY {
                return Err(invalid(
                    "queue",
                    format!(
                        "concurrency of queue `{queue}` must be 1 to {MAX_CONCURRENCY}, \
                         got {concurrency}"
                    ),
                ));
            }
            if !seen.insert(queue.as_str()) {
                return Err(invalid("queue", format!("queue `{queue}` is listed twice")));
            }
        }
        // A kind whose default queue this worker does not run: its jobs wait unless another
        // worker runs that queue (a worker may register a kind to claim it from a queue its
        // enqueues name, so this is no error).
        for h in self.registry.handlers() {
            let queue = h.options().queue;
            if !seen.contains(queue) {
                tracing::warn!(
                    kind = h.kind(),
                    queue,
                    "this worker registers a kind whose queue it does not run: its jobs wait in \
                     that queue unless another worker runs it (add `.queue(\"{queue}\", n)`)"
                );
            }
        }
        let c = &self.config;
        // Stored as `locked_by` and named in lease_expired messages.
        if let Some(problem) = name_problem(&c.id) {
            return Err(invalid("id", format!("worker id {:?} {problem}", c.id)));
        }
        // A fetcher with nothing to do claims once per poll interval.
        if let Some(problem) = too_short(c.poll_interval) {
            return Err(invalid("poll_interval", problem));
        }
        if c.claim_batch == 0 {
            return Err(invalid("claim_batch", "must be at least 1".into()));
        }
        if c.prefetch.max() > MAX_PREFETCH {
            return Err(invalid(
                "prefetch",
                format!("must be at most {MAX_PREFETCH}, got {}", c.prefetch.max()),
            ));
        }
        if c.prefetch_ttl.is_zero() {
            return Err(invalid("prefetch_ttl", "must be greater than zero".into()));
        }
        if c.shutdown_grace.is_zero() {
            return Err(invalid(
                "shutdown_grace",
                "must be greater than zero".into(),
            ));
        }
        if c.stuck_after.is_zero() {
            return Err(invalid("stuck_after", "must be greater than zero".into()));
        }
        // The pool allocates a slot per connection when the worker starts (at u32::MAX, an
        // allocation of 300 GB that aborts the process), and every connection is a server
        // process (on SQLite, a thread): a budget past the bound is a mistake, whether set or
        // taken from the number of queues.
        let least = min_connections(self.queues.len());
        if least > MAX_CONNECTIONS {
            return Err(invalid(
                "connections",
                format!(
                    "a worker with {} queues needs at least {least} connections of its own \
                     (one claim per queue, the completer, the LISTEN connection and one for \
                     the rest), more than the most a worker opens ({MAX_CONNECTIONS}): \
                     run the queues on several workers",
                    self.queues.len()
                ),
            ));
        }
        match c.connections {
            Some(n) if n > MAX_CONNECTIONS => {
                return Err(invalid(
                    "connections",
                    format!("must be at most {MAX_CONNECTIONS}, got {n}"),
                ));
            }
            None if default_connections(self.queues.len()) > MAX_CONNECTIONS => {
                return Err(invalid(
                    "connections",
                    format!(
                        "a worker with {} queues takes 2 connections per queue + 4 by \
                         default, {}, more than the most a worker opens \
                         ({MAX_CONNECTIONS}): set `connections` ({least} to \
                         {MAX_CONNECTIONS}) or run the queues on several workers",
                        self.queues.len(),
                        default_connections(self.queues.len())
                    ),
                ));
            }
            _ => {}
        }
        if let Some(n) = c.connections {
            if n < least {
                return Err(invalid(
                    "connections",
                    format!(
                        "a worker with {} queue(s) needs at least {least} connections of its \
                         own (one claim per queue, the completer, the LISTEN connection and \
                         one for the rest), got {n}",
                        self.queues.len()
                    ),
                ));
            }
        }
        if let Some(problem) = store_timeout_too_short(c.store_timeout) {
            return Err(invalid("store_timeout", problem));
        }
        if c.finalize_batch == 0 {
            return Err(invalid("finalize_batch", "must be at least 1".into()));
        }
        // Every deadline the worker computes from these must stay far inside its clock, and
        // a lease far inside the times the tables accept.
        let durations = [
            ("poll_interval", Some(c.poll_interval)),
            ("prefetch_ttl", Some(c.prefetch_ttl)),
            ("drain_timeout", Some(c.drain_timeout)),
            ("shutdown_grace", Some(c.shutdown_grace)),
            ("stuck_after", Some(c.stuck_after)),
            ("store_timeout", Some(c.store_timeout)),
            ("heartbeat_interval", c.heartbeat_interval),
            ("lease", c.lease),
        ];
        for (option, duration) in durations {
            if let Some(problem) = duration.and_then(too_long) {
                return Err(invalid(option, problem));
            }
        }
        for h in self.registry.handlers() {
            let options = h.options();
            // The table's CHECKs, which every enqueue applies: a kind outside them could only
            // be enqueued by overriding the option each time.
            if options.priority < 0 {
                return Err(invalid(
                    "priority",
                    format!(
                        "the priority of `{}` must be 0 or more, got {}",
                        h.kind(),
                        options.priority
                    ),
                ));
            }
            if options.max_attempts < 1 {
                return Err(invalid(
                    "max_attempts",
                    format!(
                        "the max_attempts of `{}` must be at least 1, got {}",
                        h.kind(),
                        options.max_attempts
                    ),
                ));
            }
            // No enqueue can override the version, and a claim takes versions 1 to it: none.
            if h.version() < 1 {
                return Err(invalid(
                    "version",
                    format!(
                        "the version of `{}` must be at least 1, got {}",
                        h.kind(),
                        h.version()
                    ),
                ));
            }
            // What the database enqueues on a discard, with the table's CHECKs: a compensating
            // kind outside them could not be recorded, and claims would wait on it for ever.
            if let Some(c) = options.compensate {
                if c.priority < 0 || c.max_attempts < 1 || c.version < 1 {
                    return Err(invalid(
                        "compensate",
                        format!(
                            "the compensating job `{}` of `{}` needs a priority of 0 or more, \
                             max_attempts and a version of at least 1, got {}, {} and {}",
                            c.kind,
                            h.kind(),
                            c.priority,
                            c.max_attempts,
                            c.version
                        ),
                    ));
                }
            }
            if options.timeout.is_zero() {
                return Err(invalid(
                    "timeout",
                    format!("the timeout of `{}` must be greater than zero", h.kind()),
                ));
            }
            // `Backoff::new` refuses it; written as a struct, every retry would follow at once.
            if options.backoff.base.is_zero() {
                return Err(invalid(
                    "backoff",
                    format!(
                        "the backoff base of `{}` must be greater than zero",
                        h.kind()
                    ),
                ));
            }
            // `Backoff::new` refuses it too: every delay is drawn under the cap, so a cap below
            // the base shortens every retry's wait, and a zero cap retries at once.
            if options.backoff.cap < options.backoff.base {
                return Err(invalid(
                    "backoff",
                    format!(
                        "the backoff cap of `{}` ({:?}) is below its base ({:?})",
                        h.kind(),
                        options.backoff.cap,
                        options.backoff.base
                    ),
                ));
            }
            for (option, duration) in [("timeout", options.timeout), ("lease", options.lease)] {
                if let Some(problem) = too_long(duration) {
                    return Err(invalid(
                        option,
                        format!("the {option} of `{}` {problem}", h.kind()),
                    ));
                }
            }
        }
        let shortest = c.shortest_lease(&self.registry).unwrap_or(Duration::MAX);
        if shortest < MIN_LEASE {
            return Err(invalid(
                "lease",
                format!("leases must be at least 30ms (MIN_LEASE), got {shortest:?}"),
            ));
        }
        if let Some(every) = c.heartbeat_interval {
            if every < MIN_INTERVAL || every >= shortest / 2 {
                return Err(invalid(
                    "heartbeat_interval",
                    format!(
                        "must be at least 10ms (MIN_INTERVAL) and under half the shortest lease \
                         ({shortest:?}), got {every:?}"
                    ),
                ));
            }
        }
        for h in self.registry.handlers() {
            let options = h.options();
            if options.concurrency == Some(0) {
                return Err(invalid(
                    "concurrency",
                    format!("the concurrency limit of `{}` must be at least 1", h.kind()),
                ));
            }
            let flow = [
                (
                    "rate",
                    options.rate.and_then(|r| r.problem()),
                    options.rate.is_some(),
                ),
                (
                    "breaker",
                    options.breaker.and_then(|b| b.problem()),
                    options.breaker.is_some(),
                ),
            ];
            for (option, problem, set) in flow {
                if let Some(problem) = problem {
                    return Err(invalid(
                        option,
                        format!("the {option} of `{}`: {problem}", h.kind()),
                    ));
                }
                if set && !self.store.supports_flow_control() {
                    return Err(invalid(
                        option,
                        format!(
                            "`{}` has a {option}, which this store does not enforce",
                            h.kind()
                        ),
                    ));
                }
            }
        }
        let periodic = self.periodic.into_iter().collect::<Result<Vec<_>, _>>()?;
        // Scheduling a kind another worker runs is allowed (a scheduler apart from the
        // workers); a kind no worker runs piles up a job per period, never run nor pruned.
        for entry in periodic
            .iter()
            .filter(|p| self.registry.get(p.kind()).is_none())
        {
            tracing::warn!(
                kind = entry.kind(),
                schedule = entry.expression(),
                "this worker schedules a kind it does not register: some other worker must run \
                 it, or its jobs wait for good, one a period"
            );
        }
        // A period's unique key names the kind and the period's start: a second schedule of
        // one kind would share the first one's keys, and every period they share would run
        // once, for whichever enqueued first, with nothing logged.
        for (i, entry) in periodic.iter().enumerate() {
            if let Some(first) = periodic[..i].iter().find(|p| p.kind() == entry.kind()) {
                return Err(BuildError::InvalidOption {
                    option: "periodic",
                    reason: format!(
                        "`{}` has two schedules (`{}` and `{}`): a period's unique key is the \
                         kind and the period's start, so periods the two share would run once; \
                         give each schedule a kind of its own",
                        entry.kind(),
                        first.expression(),
                        entry.expression()
                    ),
                });
            }
        }
        // A period's unique key (held until the job is pruned) is all that keeps a look that
        // comes late, and catches up on the periods since its last, from enqueueing one that
        // another worker ran already: completed periods must outlive how far back it looks.
        // So must cancelled ones: a period cancelled to skip it keeps its key only as long.
        if !periodic.is_empty() {
            for (option, retention, what) in [
                (
                    "completed_retention",
                    c.pruner.completed_retention,
                    "a period that ran and was pruned",
                ),
                (
                    "cancelled_retention",
                    c.pruner.cancelled_retention,
                    "a period cancelled to skip it, once pruned,",
                ),
            ] {
                if retention <= c.scheduler.looks_back() {
                    return Err(invalid(
                        option,
                        format!(
                            "{retention:?} is not longer than how far back the scheduler \
                             catches up on periods ({:?}: its interval and 60 s): {what} could \
                             be enqueued again by a look that came late",
                            c.scheduler.looks_back()
                        ),
                    ));
                }
            }
        }
        // Each maintenance service checks its own settings: the rescuer's and the stager's as
        // given, before `services` shortens their intervals to the leases and the poll.
        c.rescuer.validate()?;
        c.stager.validate()?;
        for service in maintenance::services(&self.store, c, &periodic, shortest, &self.registry) {
            service.config().validate()?;
        }
        Ok(Worker {
            periodic,
            store: self.store,
            registry: self.registry,
            queues: self.queues,
            state: self.state,
            config: self.config,
            faults: self.faults,
        })
    }
}

/// The most connections a worker opens of its own, apart from the lease keeper's
/// ([`WorkerConfig::connections`], or the default taken from the number of queues).
const MAX_CONNECTIONS: u32 = 10_000;
/// The most jobs one queue of one worker may run at once.
const MAX_CONCURRENCY: usize = 100_000;
/// The most claimed jobs one queue of one worker may hold beyond its running ones.
const MAX_PREFETCH: usize = 100_000;

fn invalid(option: &'static str, reason: String) -> BuildError {
    BuildError::InvalidOption { option, reason }
}

#[cfg(test)]
mod tests {
    use super::ConnectionBudget;

    #[test]
    fn a_budget_total_saturates_instead_of_overflowing() {
        let budget = ConnectionBudget {
            lease_keeper: 3,
            runtime: u32::MAX,
        };
        assert_eq!(budget.total(), u32::MAX);
    }
}
