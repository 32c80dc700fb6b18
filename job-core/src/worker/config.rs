//! Worker settings.

use std::time::Duration;

use crate::maintenance::{
    PrunerConfig, ReporterConfig, RescuerConfig, SchedulerConfig, StagerConfig,
};

/// The shortest period of a worker's loops: [`WorkerConfig::poll_interval`],
/// [`WorkerConfig::heartbeat_interval`] and each maintenance service's `interval`.
/// [`WorkerBuilder::build`](crate::WorkerBuilder::build) refuses a shorter one, naming it: each
/// pass of these loops is a statement (or, for the scheduler, a look at the clock), and under a
/// period of a nanosecond the loop never sleeps, keeping a core and the database busy.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// The shortest lease a worker takes, a kind's own ([`JobOptions::lease`](crate::JobOptions),
/// `#[job(lease)]`) or [`WorkerConfig::lease`]: 30 ms. The lease keeper renews a lease every
/// third of it, at least [`MIN_INTERVAL`] apart.
/// [`WorkerBuilder::build`](crate::WorkerBuilder::build) refuses a shorter one, naming it, as
/// `#[job(lease)]` does at compile time.
pub const MIN_LEASE: Duration = Duration::from_millis(30);

/// What is wrong with a loop's period under [`MIN_INTERVAL`], if it is.
pub(crate) fn too_short(interval: Duration) -> Option<String> {
    (interval < MIN_INTERVAL)
        .then(|| format!("must be at least 10ms (MIN_INTERVAL), got {interval:?}"))
}

/// The shortest [`WorkerConfig::store_timeout`]: 1 second. It bounds a call, not a loop's
/// period: a claim or a rescue pass given up on the worker's side may still commit in the
/// database, leaving leases the worker never tracks, and a bound of milliseconds gives up
/// calls a busy but healthy database would have answered.
pub(crate) const MIN_STORE_TIMEOUT: Duration = Duration::from_secs(1);

/// What is wrong with a [`WorkerConfig::store_timeout`] under [`MIN_STORE_TIMEOUT`], if it is.
pub(crate) fn store_timeout_too_short(timeout: Duration) -> Option<String> {
    (timeout < MIN_STORE_TIMEOUT).then(|| {
        format!(
            "must be at least 1s (a call's bound, not a loop's period: a call given up may \
             still commit in the database), got {timeout:?}"
        )
    })
}

/// How many claimed jobs a queue holds beyond its running ones: [`WorkerConfig::prefetch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Prefetch {
    /// As many as the queue's slots finish during two claim round trips, measured claim by
    /// claim, up to `max`. A queue of jobs that take longer than that, or 100 ms or more,
    /// holds none: it claims its free slots only, as `Fixed(0)` does, and other workers' free
    /// slots take the rest.
    Auto {
        /// The most jobs held. Defaults to 1,000.
        max: usize,
    },
    /// Exactly this many (0: claim only free slots).
    Fixed(usize),
}

impl Prefetch {
    /// The default: `Auto` up to 1,000 jobs.
    pub const AUTO: Prefetch = Prefetch::Auto { max: 1000 };

    /// The most jobs this setting ever holds.
    pub fn max(&self) -> usize {
        match *self {
            Prefetch::Auto { max } | Prefetch::Fixed(max) => max,
        }
    }
}

impl Default for Prefetch {
    fn default() -> Self {
        Prefetch::AUTO
    }
}

impl std::fmt::Display for Prefetch {
    /// `auto (max N)` or the fixed number.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Prefetch::Auto { max } => write!(f, "auto (max {max})"),
            Prefetch::Fixed(n) => write!(f, "{n}"),
        }
    }
}

impl From<usize> for Prefetch {
    /// A fixed prefetch of `jobs`.
    fn from(jobs: usize) -> Self {
        Prefetch::Fixed(jobs)
    }
}

/// How a worker runs. Every field has a default suited to production. Every duration, here and
/// in the maintenance services' configs, is at most [`MAX_DURATION`](crate::MAX_DURATION)
/// (100 years), and every period of a loop at least [`MIN_INTERVAL`] (10 ms):
/// [`WorkerBuilder::build`](crate::WorkerBuilder::build) refuses another, naming it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct WorkerConfig {
    /// Recorded as `locked_by` on every claim. Defaults to `worker-<pid>-<random>`.
    pub id: String,
    /// How often an idle fetcher looks for due jobs when no notification arrives (scheduled
    /// and retried jobs become due without one): [`MIN_INTERVAL`] (10 ms) to
    /// [`MAX_DURATION`](crate::MAX_DURATION). Defaults to 1 second.
    pub poll_interval: Duration,
    /// The most jobs one claim statement takes. Defaults to 200.
    pub claim_batch: u32,
    /// How many claimed jobs a queue may hold beyond its running ones, waiting for a free
    /// execution slot. With prefetch, the next claim runs while the last one's jobs execute,
    /// so short jobs run at the rate of batched claims instead of one claim round trip per few
    /// jobs; the cost is that a prefetched job holds its lease while it waits behind running
    /// ones (renewed by the heartbeat, released at once on shutdown), where another worker's
    /// free slot could have taken it, and it counts against its kind's cluster-wide
    /// concurrency limit like a running one.
    ///
    /// Defaults to [`Prefetch::Auto`]: the queue holds about as many jobs as its slots start
    /// during two claim round trips, so queues of short jobs claim in large batches and queues
    /// of slow jobs claim only their free slots (nothing waits in one worker while another has
    /// room). [`Prefetch::Fixed`] holds a set number; `Fixed(0)` claims only free slots.
    pub prefetch: Prefetch,
    /// How long a prefetched job may wait for a free slot. When the oldest has waited this
    /// long (the slots are taken by long jobs), every prefetched job is given back for other
    /// workers (attempt not counted), and the queue claims no more than its free slots until
    /// a slot is free with nothing waiting for it. Defaults to 5 seconds.
    pub prefetch_ttl: Duration,
    /// The most outcomes one finalize statement writes. Defaults to 1,000.
    pub finalize_batch: usize,
    /// How long shutdown waits for running jobs before stopping them. Defaults to 30 seconds.
    pub drain_timeout: Duration,
    /// How long shutdown gives the executions it stopped after `drain_timeout` to end, and
    /// the outcomes of those that did to be written. Stopped executions keep their leases
    /// (renewed) until their code ends; those still running after this are abandoned: their
    /// leases are neither released nor renewed and expire in the store. `shutdown()` returns
    /// within `drain_timeout + shutdown_grace +`
    /// [`RELEASE_TIMEOUT`](crate::worker::RELEASE_TIMEOUT) (the give-back of unstarted jobs and
    /// the release of the leases left), and 2 seconds more at most to close, even when the
    /// database hangs. Defaults to 10 seconds.
    pub shutdown_grace: Duration,
    /// How long an execution's code may run past its timeout, or past being told to stop (a
    /// lost lease, a cancel, a shutdown), before it is reported stuck: logged at ERROR,
    /// counted in [`WorkerStats::stuck`](crate::worker::WorkerStats::stuck) and recorded in
    /// the job row's `stuck_since` (through `Admin`). A stuck execution keeps its slot and its
    /// lease until its code returns. Defaults to 10 seconds.
    pub stuck_after: Duration,
    /// The most connections the worker opens for its own statements (claims, outcomes,
    /// releases, durable steps, maintenance and the LISTEN connection), apart from the
    /// application's pool and from the three connections of the lease keeper. `None` (the
    /// default) takes 2 per queue + 4. At most 10,000, set or taken from the queues:
    /// [`build`](crate::WorkerBuilder::build) refuses more, naming `connections`, and so a
    /// worker of 4,999 queues or more needs this set (one per queue + 3 at least), and one of
    /// 9,998 or more is refused: run its queues on several workers. See
    /// [`Worker::connections`](crate::worker::Worker::connections).
    pub connections: Option<u32>,
    /// How long the worker waits for the answer to any one call to its store (a claim, a
    /// batch of outcomes, a release, a durable step, a maintenance pass) before giving it up
    /// as if the connection were lost: at least 1 second ([`build`](crate::WorkerBuilder::build)
    /// refuses a shorter one, naming it). A call given up may still commit in the database (a
    /// claim's leases, a rescue pass), so the bound is for a database that stopped answering,
    /// never for a slow one. A connection whose server or network goes silent (a host that
    /// vanished, a firewall dropping the flow) never answers and never fails; without a
    /// bound, one such call would stall its loop for as long as the kernel keeps the socket
    /// (about 15 minutes, or for ever when nothing was left unacknowledged). The loop tries again on another connection, as
    /// after any lost connection. The lease keeper bounds its heartbeats by the heartbeat
    /// period instead; the pruner's VACUUM (only when autovacuum is off) gets 6 hours, or this
    /// when longer (PostgreSQL bounds the ANALYZE it runs where autovacuum does by 5
    /// minutes). Defaults to 60 seconds: far above any call of a healthy database, which
    /// answers in milliseconds.
    pub store_timeout: Duration,
    /// The heartbeat period: at least [`MIN_INTERVAL`] (10 ms) and under half the shortest
    /// lease of the registered jobs. Defaults to a third of that lease.
    pub heartbeat_interval: Option<Duration>,
    /// A lease for every kind this worker runs, in place of each kind's own (`#[job(lease)]`).
    /// Tests set it short, so that a crashed execution comes back in a fraction of a second
    /// without changing the job's production lease (`job-testkit`'s `TestWorker::for_tests`).
    /// Defaults to `None`: each kind's own lease.
    pub lease: Option<Duration>,
    /// The stager of due jobs. Defaults to [`StagerConfig::default`]; it runs at least every
    /// [`poll_interval`](Self::poll_interval).
    pub stager: StagerConfig,
    /// The rescuer of expired leases. Defaults to [`RescuerConfig::default`]; it runs at least
    /// every half of the shortest registered lease.
    pub rescuer: RescuerConfig,
    /// The pruner of finished jobs and expirer of deadlines. Defaults to
    /// [`PrunerConfig::default`].
    pub pruner: PrunerConfig,
    /// The scheduler of periodic jobs. Defaults to [`SchedulerConfig::default`].
    pub scheduler: SchedulerConfig,
    /// The reporter of the database-derived gauges (one worker at a time reports). Defaults
    /// to [`ReporterConfig::default`].
    pub reporter: ReporterConfig,
    /// Seeds the backoff jitter, for deterministic tests. Defaults to a random seed.
    pub rng_seed: Option<u64>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            id: format!("worker-{}-{:08x}", std::process::id(), fastrand::u32(..)),
            poll_interval: Duration::from_secs(1),
            claim_batch: 200,
            prefetch: Prefetch::default(),
            prefetch_ttl: Duration::from_secs(5),
            finalize_batch: 1000,
            drain_timeout: Duration::from_secs(30),
            shutdown_grace: Duration::from_secs(10),
            stuck_after: Duration::from_secs(10),
            connections: None,
            store_timeout: Duration::from_secs(60),
            heartbeat_interval: None,
            lease: None,
            stager: StagerConfig::default(),
            rescuer: RescuerConfig::default(),
            pruner: PrunerConfig::default(),
            scheduler: SchedulerConfig::default(),
            reporter: ReporterConfig::default(),
            rng_seed: None,
        }
    }
}

impl WorkerConfig {
    /// The lease a claim of `kind_lease` takes on this worker: [`lease`](Self::lease) when set.
    pub(crate) fn lease_of(&self, kind_lease: Duration) -> Duration {
        self.lease.unwrap_or(kind_lease)
    }

    /// The shortest lease this worker's claims take, of the registered kinds.
    pub(crate) fn shortest_lease(&self, registry: &crate::Registry) -> Option<Duration> {
        registry.shortest_lease().map(|l| self.lease_of(l))
    }
}
