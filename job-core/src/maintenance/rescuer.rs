//! Recovers jobs whose lease expired: the worker holding them died, was killed or lost the
//! database for longer than the lease. Only expired leases are touched; a live lease is never
//! taken away. Every worker runs one; `SKIP LOCKED` in the store makes them cooperate.
//!
//! A lease's end is in the database's time, and a holder fences itself by its own monotonic
//! clock. When the wall clock jumps forward (a machine that slept, a clock stepped by NTP, a
//! virtual machine restored), every lease looks expired at once while its holder, whose
//! monotonic clock did not move (Linux and macOS do not count a sleep in it), still runs its
//! job and will renew it at its next heartbeat. On SQLite the database's time is this machine's
//! wall clock, so every process on the file sees the jump; on PostgreSQL it is the server's. So
//! each pass first compares how far this process's wall clock moved since the last pass with
//! how far its monotonic clock did: when the wall clock moved more than a second further, the
//! rescuer takes nothing for [`RescuerConfig::after_clock_jump`], in which the live holders
//! renew their leases (a renewal never moves a lease's end back, and does not look at it).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::attempt::step::BoxFuture;
use crate::contract::store::{Rescued, Store};
use crate::model::error::{BuildError, StoreError};

use super::service::{at_least_min, at_most_max, invalid, Service, ServiceConfig};

/// Rescuer settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RescuerConfig {
    /// Time between passes: [`MIN_INTERVAL`](crate::MIN_INTERVAL) (10 ms) to [`MAX_DURATION`](crate::MAX_DURATION). Defaults to 5 seconds.
    pub interval: Duration,
    /// The most jobs one statement rescues; a pass repeats until fewer come back. After a
    /// statement that failed (one the database did not answer within the worker's
    /// `store_timeout`, as under a backlog of expired leases too large for it, or one the
    /// server cancelled) the next takes half as many, down to 1, and each answered one lets
    /// the next take a tenth of this more, up to this. Defaults to 1,000.
    pub batch: u32,
    /// How long the rescuer takes nothing after this process's wall clock moved more than a
    /// second further than its monotonic clock between two passes (a sleep, a clock step):
    /// long enough for every live holder to renew its leases, so at least the longest
    /// heartbeat period of the workers on the database (a third of their longest lease by
    /// default). Leases that ran out meanwhile are rescued after it. At most
    /// [`MAX_AFTER_CLOCK_JUMP`](Self::MAX_AFTER_CLOCK_JUMP) (1 day): `build()` refuses more,
    /// naming `rescuer` and `after_clock_jump`. Defaults to 2 minutes; a worker holds at least
    /// twice its own heartbeat period, whatever this says.
    pub after_clock_jump: Duration,
}

impl RescuerConfig {
    /// The longest [`after_clock_jump`](Self::after_clock_jump): 1 day. The hold covers the
    /// heartbeat periods of the workers on the database (a day's covers leases of 3 days); a
    /// longer one would rescue nothing for as long after every sleep of the machine or step
    /// of its clock, while jobs of dead workers wait. A worker whose own heartbeat period
    /// is longer still holds twice that.
    pub const MAX_AFTER_CLOCK_JUMP: Duration = Duration::from_secs(24 * 3600);
}

impl Default for RescuerConfig {
    fn default() -> Self {
        RescuerConfig {
            interval: Duration::from_secs(5),
            batch: 1000,
            after_clock_jump: Duration::from_secs(120),
        }
    }
}

/// How much further than the monotonic clock the wall clock may move between two passes before
/// it counts as a jump: far above any drift or NTP slewing (at most 0.05% of the time).
const CLOCK_JUMP: Duration = Duration::from_secs(1);

/// The size of the rescuer's next statement: [`RescuerConfig::batch`], halved after a
/// statement that failed and grown back by a tenth of the batch after each answered one
/// (additive increase, multiplicative decrease). Before it, a batch the database could not
/// rescue within `store_timeout` timed out on every pass, each rolled back: nothing was
/// rescued however long the rescuer tried.
#[derive(Debug)]
struct Batch {
    configured: u32,
    next: AtomicU32,
}

impl Batch {
    fn new(configured: u32) -> Self {
        Batch {
            configured,
            next: AtomicU32::new(configured),
        }
    }

    /// The size of the next statement.
    fn next(&self) -> u32 {
        self.next.load(Ordering::Relaxed)
    }

    /// After a statement of `size` failed: half of it, at least 1 (and at most the batch).
    fn failed(&self, size: u32) -> u32 {
        let next = (size / 2).max(1).min(self.configured);
        self.next.store(next, Ordering::Relaxed);
        next
    }

    /// After a statement of `size` was answered: a tenth of the batch more, up to the batch.
    fn answered(&self, size: u32) {
        let step = (self.configured / 10).max(1);
        let next = size.saturating_add(step).min(self.configured);
        self.next.store(next, Ordering::Relaxed);
    }
}

impl Clone for Batch {
    fn clone(&self) -> Self {
        Batch {
            configured: self.configured,
            next: AtomicU32::new(self.next()),
        }
    }
}

/// Puts expired leases back to work.
#[derive(Debug, Clone)]
pub struct Rescuer<S> {
    store: S,
    config: RescuerConfig,
    /// The size of the next statement.
    batch: Batch,
    /// The wall clock (`SystemTime::now`, unless a test moves it).
    wall: fn() -> SystemTime,
    /// Both clocks at the last pass.
    last: Option<(SystemTime, Instant)>,
    /// No rescue before this, after a jump of the wall clock.
    hold_until: Option<Instant>,
}

impl<S: Store> Rescuer<S> {
    /// A rescuer over `store`.
    pub fn new(store: S, config: RescuerConfig) -> Self {
        Rescuer {
            store,
            batch: Batch::new(config.batch),
            config,
            wall: SystemTime::now,
            last: None,
            hold_until: None,
        }
    }

    /// Reads the wall clock from `wall` instead of [`SystemTime::now`]: for tests of what a
    /// jump of the clock does.
    #[doc(hidden)]
    pub fn wall_clock(mut self, wall: fn() -> SystemTime) -> Self {
        self.wall = wall;
        self
    }

    /// One pass as a worker runs it: [`run_once`](Self::run_once), unless the wall clock jumped
    /// forward less than [`RescuerConfig::after_clock_jump`] ago (see the module's docs), when
    /// it rescues nothing.
    pub async fn pass(&mut self) -> Result<Rescued, StoreError> {
        let (wall, now) = ((self.wall)(), Instant::now());
        if let Some((last_wall, last_now)) = self.last.replace((wall, now)) {
            let moved = wall.duration_since(last_wall).unwrap_or_default();
            let elapsed = now.duration_since(last_now);
            if moved > elapsed + CLOCK_JUMP {
                let hold = self.config.after_clock_jump;
                tracing::warn!(
                    jump = ?(moved - elapsed),
                    hold = ?hold,
                    "the wall clock moved further than this process's monotonic clock (a sleep \
                     or a clock step): every lease may look expired while its holder still \
                     runs, so no lease is rescued until the holders have renewed theirs"
                );
                self.hold_until = Some(now + hold);
            }
        }
        if self.hold_until.is_some_and(|until| now < until) {
            return Ok(Rescued::default());
        }
        self.hold_until = None;
        self.rescue(Some(wall)).await
    }

    /// One pass: rescues every job whose lease has expired, in batches (see
    /// [`RescuerConfig::batch`] for their size).
    pub async fn run_once(&self) -> Result<Rescued, StoreError> {
        self.rescue(None).await
    }

    /// Rescues in batches; with `checked_at`, through
    /// [`Store::rescue_expired_checked`]: only leases expired by the wall clock the pass
    /// checked, whatever the clock does while the batches run.
    async fn rescue(&self, checked_at: Option<SystemTime>) -> Result<Rescued, StoreError> {
        let mut total = Rescued::default();
        loop {
            let size = self.batch.next();
            let answer = match checked_at {
                Some(at) => self.store.rescue_expired_checked(size, at).await,
                None => self.store.rescue_expired(size).await,
            };
            let r = match answer {
                Ok(r) => r,
                Err(e) => {
                    let next = self.batch.failed(size);
                    if next < size {
                        tracing::warn!(
                            error = %e,
                            batch = size,
                            next,
                            "a rescue statement failed: the next rescues fewer jobs, so that \
                             one the database cannot finish in time does not fail every pass"
                        );
                    }
                    return Err(e);
                }
            };
            self.batch.answered(size);
            crate::telemetry::rescued(&r);
            let done = r.retried + r.discarded < u64::from(size);
            total.add(r);
            if done {
                return Ok(total);
            }
        }
    }
}

/// The most jobs, and workers, a rescue's log line names; it counts the rest.
const NAMED_IN_LOG: usize = 20;

/// The rescued jobs for the log: `id kind (state)`, the first [`NAMED_IN_LOG`] of them.
fn named_jobs(r: &Rescued) -> String {
    let named: Vec<String> = r
        .jobs
        .iter()
        .take(NAMED_IN_LOG)
        .map(|j| format!("{} {} ({})", j.id, j.kind, j.state))
        .collect();
    with_rest(named.join(", "), r.jobs.len().saturating_sub(NAMED_IN_LOG))
}

/// The workers whose leases expired, each once, the first [`NAMED_IN_LOG`] of them.
fn named_workers(r: &Rescued) -> String {
    let mut workers: Vec<&str> = r
        .jobs
        .iter()
        .map(|j| j.worker.as_deref().unwrap_or("(unknown)"))
        .collect();
    workers.sort_unstable();
    workers.dedup();
    let rest = workers.len().saturating_sub(NAMED_IN_LOG);
    workers.truncate(NAMED_IN_LOG);
    with_rest(workers.join(", "), rest)
}

fn with_rest(named: String, rest: usize) -> String {
    if rest == 0 {
        named
    } else {
        format!("{named} and {rest} more")
    }
}

impl RescuerConfig {
    /// Whether the rescuer can run with these settings.
    pub fn validate(&self) -> Result<(), BuildError> {
        if self.after_clock_jump > Self::MAX_AFTER_CLOCK_JUMP {
            return Err(invalid(
                "rescuer",
                &format!(
                    "after_clock_jump must be at most 1 day (RescuerConfig::MAX_AFTER_CLOCK_JUMP), \
                     got {:?}",
                    self.after_clock_jump
                ),
            ));
        }
        self.validate_derived()
    }

    /// The checks that also hold for the settings a worker derives from these
    /// (`maintenance::services`), whose hold after a clock jump, at least twice the worker's
    /// own heartbeat period, may pass [`MAX_AFTER_CLOCK_JUMP`](Self::MAX_AFTER_CLOCK_JUMP).
    fn validate_derived(&self) -> Result<(), BuildError> {
        if self.batch == 0 {
            return Err(invalid("rescuer", "batch must be greater than zero"));
        }
        at_least_min("rescuer", "interval", self.interval)?;
        at_most_max(
            "rescuer",
            &[
                ("interval", Some(self.interval)),
                ("after_clock_jump", Some(self.after_clock_jump)),
            ],
        )
    }
}

impl ServiceConfig for RescuerConfig {
    /// The worker's derived settings: the given ones passed [`RescuerConfig::validate`]
    /// first (`WorkerBuilder::build`).
    fn validate(&self) -> Result<(), BuildError> {
        self.validate_derived()
    }

    fn interval(&self) -> Duration {
        self.interval
    }
}

impl<S: Store> Service for Rescuer<S> {
    fn name(&self) -> &'static str {
        "rescuer"
    }

    fn config(&self) -> &dyn ServiceConfig {
        &self.config
    }

    fn tick(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let r = self.pass().await?;
            if r.retried + r.discarded > 0 {
                // Warned: a lease runs out only when its worker died, hung or lost the
                // database for longer than the lease.
                tracing::warn!(
                    retried = r.retried,
                    discarded = r.discarded,
                    jobs = %named_jobs(&r),
                    workers = %named_workers(&r),
                    "rescued jobs with expired leases: their workers stopped renewing them"
                );
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{named_jobs, named_workers, Batch, NAMED_IN_LOG};
    use crate::contract::store::{Rescued, RescuedJob};
    use crate::model::state::JobState;

    fn rescued(n: usize, workers: usize) -> Rescued {
        Rescued {
            retried: n as u64,
            discarded: 0,
            jobs: (0..n)
                .map(|i| RescuedJob {
                    id: i as i64 + 1,
                    kind: "mail.send".into(),
                    worker: (i % workers != 0).then(|| format!("w{}", i % workers)),
                    state: JobState::Retryable,
                })
                .collect(),
        }
    }

    #[test]
    fn the_log_names_the_rescued_jobs_and_their_workers() {
        let r = rescued(3, 2);
        assert_eq!(
            named_jobs(&r),
            "1 mail.send (retryable), 2 mail.send (retryable), 3 mail.send (retryable)"
        );
        assert_eq!(named_workers(&r), "(unknown), w1");
    }

    #[test]
    fn the_log_names_a_bounded_number_and_counts_the_rest() {
        let r = rescued(1000, 500);
        let jobs = named_jobs(&r);
        assert_eq!(jobs.matches("mail.send").count(), NAMED_IN_LOG, "{jobs}");
        assert!(jobs.ends_with(" and 980 more"), "{jobs}");
        let workers = named_workers(&r);
        assert_eq!(workers.matches(", ").count(), NAMED_IN_LOG - 1, "{workers}");
        assert!(workers.ends_with(" and 480 more"), "{workers}");
    }

    #[test]
    fn the_batch_halves_after_a_failed_statement_and_grows_back_by_a_tenth() {
        let batch = Batch::new(1000);
        assert_eq!(batch.next(), 1000);
        let halvings: Vec<u32> = (0..11).map(|_| batch.failed(batch.next())).collect();
        assert_eq!(
            halvings,
            [500, 250, 125, 62, 31, 15, 7, 3, 1, 1, 1],
            "halved down to 1"
        );
        let mut grown = Vec::new();
        for _ in 0..12 {
            batch.answered(batch.next());
            grown.push(batch.next());
        }
        assert_eq!(
            grown,
            [101, 201, 301, 401, 501, 601, 701, 801, 901, 1000, 1000, 1000],
            "grown back by a tenth, up to the batch"
        );
        // A batch under 10 grows back one at a time.
        let small = Batch::new(3);
        assert_eq!(small.failed(3), 1);
        small.answered(1);
        assert_eq!(small.next(), 2);
    }
}
