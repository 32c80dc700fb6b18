//! Reports the database-derived gauges (`job_jobs`, `job_oldest_due_age_seconds`,
//! `job_dead_letters`) from one worker at a time: every worker runs a reporter, and each pass
//! asks the store for the reporter's role (a row held until a deadline and renewed by its
//! holder), so one worker reads the database for everyone. `job_reporter_leader` is 1 while a
//! reporter of the process holds the role; one that stops holding it sets the gauges it
//! reported back to zero. Alert on the gauges where `job_reporter_leader == 1` (the README's
//! rules do).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics::gauge;

use crate::attempt::step::BoxFuture;
use crate::contract::report::{Report, ReportRequest};
use crate::contract::store::Store;
use crate::model::error::{BuildError, StoreError};
use crate::telemetry::{names, NO_OWNER};

use super::service::{at_least_min, at_most_max, Service, ServiceConfig};

/// Reporter settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReporterConfig {
    /// Time between passes: [`MIN_INTERVAL`](crate::MIN_INTERVAL) (10 ms) to
    /// [`MAX_DURATION`](crate::MAX_DURATION). Defaults to 15 seconds. The role's holder reads
    /// the gauges less often when reading them takes long: it waits at least 250 times as long
    /// as the last reading took (at most 5 minutes, unless the interval is longer), and its
    /// passes in between only keep the role.
    pub interval: Duration,
    /// Whether this worker takes part (reports when it holds the role). Defaults to `true`.
    /// A worker that does not still records the owners of its kinds, once.
    pub enabled: bool,
}

impl Default for ReporterConfig {
    fn default() -> Self {
        ReporterConfig {
            interval: Duration::from_secs(15),
            enabled: true,
        }
    }
}

impl ReporterConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), BuildError> {
        at_least_min("reporter.interval", "the interval", self.interval)?;
        at_most_max(
            "reporter.interval",
            &[("the interval", Some(self.interval))],
        )
    }
}

impl ServiceConfig for ReporterConfig {
    fn validate(&self) -> Result<(), BuildError> {
        ReporterConfig::validate(self)
    }

    fn interval(&self) -> Duration {
        self.interval
    }
}

/// One gauge series: its name and labels.
type Series = (&'static str, Vec<(&'static str, String)>);

/// Which reporter of this process set each database gauge last (by [`Reporter::id`]): a
/// reporter sets back to zero only the gauges it set last, when a later reading of its own has
/// them no more (a queue emptied, the dead letters purged) or when it stops holding the role
/// (another worker's reporter, perhaps in this process, reports then: what it set would
/// otherwise stay, a purged dead letter counted for good). Without the owner, a reporter that
/// lost the role without noticing set what it had reported back to zero on its next pass,
/// over what the process's new holder had just reported (the gauges are the process's, not a
/// reporter's).
static OWNERS: Mutex<Option<HashMap<Series, u64>>> = Mutex::new(None);

/// The next [`Reporter::id`].
static NEXT_REPORTER: AtomicU64 = AtomicU64::new(1);

/// [`OWNERS`], locked: a gauge is set, or set back to zero, with its owner under the lock, so
/// that two reporters of the process never interleave between the two.
fn owners() -> std::sync::MutexGuard<'static, Option<HashMap<Series, u64>>> {
    OWNERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Sets back to zero the gauges reporter `me` set last but those `keep` holds, and forgets
/// them.
fn zero_own(owners: &mut HashMap<Series, u64>, me: u64, keep: &HashSet<Series>) {
    owners.retain(|key, owner| {
        if *owner != me || keep.contains(key) {
            return true;
        }
        gauge!(key.0, &key.1).set(0.0);
        false
    });
}

/// This process's reporters that hold the role: `job_reporter_leader` is 1 while any does.
/// Set by each reporter alone, the unlabelled gauge was the last one's word: a second
/// worker's refused pass set it to 0 under the first one's role.
static HOLDING: AtomicUsize = AtomicUsize::new(0);

/// Whether one reporter (and its clones) holds the role, counted in [`HOLDING`]; it stops
/// holding when the last of them is dropped (a worker aborted before it released the role).
#[derive(Debug, Default)]
struct Holding(AtomicBool);

impl Holding {
    fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    fn set(&self, held: bool) {
        if self.0.swap(held, Ordering::AcqRel) != held {
            if held {
                HOLDING.fetch_add(1, Ordering::AcqRel);
            } else {
                HOLDING.fetch_sub(1, Ordering::AcqRel);
            }
        }
        let any = HOLDING.load(Ordering::Acquire) > 0;
        gauge!(names::REPORTER).set(if any { 1.0 } else { 0.0 });
    }
}

impl Drop for Holding {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// The reporter's holder waits at least this many times as long as reading the gauges took
/// before it reads them again, so that they cost at most 1/250 (0.4%) of one core of the
/// database whatever the table holds. Counting the jobs per queue and state reads every waiting
/// row: with 1,100,000 waiting (a million scheduled for next month) a reading took about 200 ms
/// as a parallel scan, which every 15 s was 1.0-1.5% of a core on an otherwise idle system.
/// Readings that take under 60 ms keep the configured interval. The passes in between keep the
/// role without reading.
const GAUGE_SHARE: u32 = 250;

/// The longest time between two readings, however slow they are.
const LONGEST_GAP: Duration = Duration::from_secs(300);

/// The time until the next reading of the gauges, after one that took `took`: [`GAUGE_SHARE`]
/// times as long, but never under `interval` and, unless the interval is longer, never over
/// [`LONGEST_GAP`].
fn next_gap(took: Duration, interval: Duration) -> Duration {
    took.saturating_mul(GAUGE_SHARE)
        .min(LONGEST_GAP)
        .max(interval)
}

/// Reports the database-derived gauges while this worker holds the reporter's role.
#[derive(Debug, Clone)]
pub struct Reporter<S> {
    store: S,
    config: ReporterConfig,
    holder: String,
    owners: Vec<(String, String)>,
    /// This reporter (and its clones) among the process's: see [`OWNERS`].
    id: u64,
    /// When the holder reads the gauges next (see [`GAUGE_SHARE`]); until then its passes
    /// only keep the role.
    next: Option<Instant>,
    /// Whether the last pass found this worker holding the role.
    held: Arc<Holding>,
    /// Whether a worker that does not report (`enabled: false`) has recorded its owners.
    owners_recorded: bool,
    /// Until when this reporter leaves the role to the other workers, after a reading that
    /// failed: see [`Service::tick`].
    yield_until: Option<Instant>,
}

impl<S: Store> Reporter<S> {
    /// A reporter over `store` for the worker `holder`, which runs kinds with these `owners`
    /// (`(kind, owner)`).
    pub fn new(
        store: S,
        config: ReporterConfig,
        holder: impl Into<String>,
        owners: Vec<(String, String)>,
    ) -> Self {
        Reporter {
            store,
            config,
            holder: holder.into(),
            owners,
            id: NEXT_REPORTER.fetch_add(1, Ordering::Relaxed),
            next: None,
            held: Arc::default(),
            owners_recorded: false,
            yield_until: None,
        }
    }

    /// One pass: records the owners, takes or keeps the role, and when held reads and sets the
    /// gauges. Returns the report, or `None` when another worker holds the role.
    pub async fn run_once(&mut self) -> Result<Option<Report>, StoreError> {
        self.pass(true).await
    }

    /// One pass as a worker runs it every interval: it reads the gauges only when their next
    /// reading is due (see the module), and otherwise only keeps the role. For tests of what
    /// the passes in between do.
    #[doc(hidden)]
    pub async fn worker_pass(&mut self) -> Result<(), StoreError> {
        Service::tick(self).await
    }

    /// A pass that reads the gauges when the role is held if `read`, else only keeps the role
    /// (its report is empty and not exported).
    async fn pass(&mut self, read: bool) -> Result<Option<Report>, StoreError> {
        let now = Instant::now();
        if self.yield_until.is_some_and(|until| now < until) {
            return Ok(None);
        }
        let request = ReportRequest {
            holder: self.holder.clone(),
            // Three passes: a leader that misses two keeps its role.
            hold_for: self.config.interval.saturating_mul(3),
            owners: self.owners.clone(),
            read,
        };
        let report = match self.store.report(&request).await {
            Ok(report) => report,
            Err(e) => {
                // Its gauges are no longer read: not the leader any more as far as the alert
                // rules go (they multiply by `job_reporter_leader`), so stale values fire none.
                self.stop_holding();
                if read {
                    // A reading that failed (a statement timeout on a large table, a privilege
                    // this worker lacks, say) gives the role up, and leaves it to the other
                    // workers for three intervals: the pass renews the role before it reads,
                    // and a holder that could renew but not read kept the role for good while
                    // no worker reported.
                    let _ = self.give_up().await;
                    self.yield_until = Some(now + self.config.interval.saturating_mul(3));
                }
                return Err(e);
            }
        };
        match &report {
            Some(report) => {
                self.held.set(true);
                if read {
                    export(report, self.id);
                }
            }
            None => self.stop_holding(),
        }
        Ok(report)
    }

    /// Not the holder (any more): not counted as one, and the gauges it set back to zero
    /// (but those another reporter of this process has set since). It reads them as soon as it
    /// holds the role again: until then `job_reporter_leader` would say 1 over gauges at zero
    /// (a keep-role pass that failed once, then held again, waited up to five minutes for its
    /// next reading).
    fn stop_holding(&mut self) {
        self.held.set(false);
        self.next = None;
        zero_own(
            owners().get_or_insert_with(HashMap::new),
            self.id,
            &HashSet::new(),
        );
    }

    /// Gives the role up, if this worker held it at its last pass, so that another worker
    /// takes it at its next pass instead of after three intervals: the role is kept until
    /// now, which has then passed. A worker calls it when it stops.
    pub async fn release(&mut self) -> Result<(), StoreError> {
        if !self.held.get() {
            return Ok(());
        }
        self.give_up().await
    }

    /// Gives the role up whether or not the last pass held it (a pass that renewed it and then
    /// failed to read has stopped holding it already).
    async fn give_up(&mut self) -> Result<(), StoreError> {
        // No longer reading, whether the release answers or not: a worker that stopped with
        // the database unreachable kept reporting 1 beside the next holder.
        self.stop_holding();
        self.next = None;
        let request = ReportRequest {
            holder: self.holder.clone(),
            hold_for: Duration::ZERO,
            owners: Vec::new(),
            read: false,
        };
        self.store.report(&request).await?;
        Ok(())
    }
}

/// Sets the database gauges from `report` as reporter `me`, and back to zero those it set
/// last that this report has not ([`OWNERS`]).
fn export(report: &Report, me: u64) {
    let mut guard = owners();
    let owners = guard.get_or_insert_with(HashMap::new);
    let mut now = HashSet::new();
    let mut set = |name: &'static str, labels: Vec<(&'static str, String)>, value: f64| {
        gauge!(name, &labels).set(value);
        owners.insert((name, labels.clone()), me);
        now.insert((name, labels));
    };
    for c in &report.jobs {
        let labels = vec![
            ("queue", c.queue.clone()),
            ("state", c.state.as_str().into()),
        ];
        set(names::JOBS, labels, c.count as f64);
    }
    for (queue, age) in &report.oldest_due {
        set(
            names::OLDEST_DUE,
            vec![("queue", queue.clone())],
            age.as_secs_f64(),
        );
    }
    for d in &report.dead_letters {
        let owner = d.owner.clone().unwrap_or_else(|| NO_OWNER.to_owned());
        let labels = vec![
            ("queue", d.queue.clone()),
            ("kind", d.kind.clone()),
            ("owner", owner),
        ];
        set(names::DEAD_LETTERS, labels, d.count as f64);
    }
    for p in &report.paused {
        let labels = vec![
            ("scope", p.what.scope().to_owned()),
            ("name", p.what.name().to_owned()),
            ("paused_by", p.paused_by.as_str().to_owned()),
        ];
        set(names::PAUSED, labels, 1.0);
    }
    // What an earlier report had and this one has not is now zero (a queue emptied, the
    // dead letters purged).
    zero_own(owners, me, &now);
}

impl<S: Store> Service for Reporter<S> {
    fn name(&self) -> &'static str {
        "reporter"
    }

    fn config(&self) -> &dyn ServiceConfig {
        &self.config
    }

    fn tick(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            if !self.config.enabled {
                // Owners are recorded by the workers that run the kinds, reporting or not:
                // the dead letters' `owner` label and `JobRow::owner` come from them. Once,
                // without taking the role (it is held until now, so it lapses at once).
                if !self.owners_recorded && !self.owners.is_empty() {
                    let request = ReportRequest {
                        holder: self.holder.clone(),
                        hold_for: Duration::ZERO,
                        owners: self.owners.clone(),
                        read: false,
                    };
                    self.store.report(&request).await?;
                    self.owners_recorded = true;
                }
                return Ok(());
            }
            let started = Instant::now();
            let read = self.next.is_none_or(|next| started >= next);
            let report = match self.pass(read).await {
                Ok(report) => report,
                Err(e) => {
                    // A reading that failed (a statement timeout on a large table, say) is
                    // spaced as one that took as long: trying again every interval would
                    // spend that much each time, and log each time.
                    if read {
                        self.next =
                            Some(started + next_gap(started.elapsed(), self.config.interval));
                    }
                    return Err(e);
                }
            };
            match report {
                Some(r) if read => {
                    let took = started.elapsed();
                    let gap = next_gap(took, self.config.interval);
                    self.next = Some(started + gap);
                    tracing::debug!(
                        queues = r.oldest_due.len(),
                        dead_letter_kinds = r.dead_letters.len(),
                        took_ms = took.as_millis() as u64,
                        next_in_s = gap.as_secs(),
                        "reported the database's gauges"
                    );
                }
                Some(_) => {}
                // Another worker holds the role: whoever gets it next reads at once.
                None => self.next = None,
            }
            Ok(())
        })
    }

    fn stopped(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Err(e) = self.release().await {
                tracing::debug!(error = %e, "the reporter's role was not given up: it lapses");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INTERVAL: Duration = Duration::from_secs(15);

    #[test]
    fn a_quick_reading_keeps_the_interval() {
        assert_eq!(next_gap(Duration::from_millis(20), INTERVAL), INTERVAL);
        assert_eq!(next_gap(Duration::ZERO, INTERVAL), INTERVAL);
    }

    #[test]
    fn a_slow_reading_waits_250_times_as_long() {
        assert_eq!(
            next_gap(Duration::from_millis(290), INTERVAL),
            Duration::from_millis(72_500)
        );
    }

    #[test]
    fn the_gap_never_exceeds_five_minutes_nor_falls_under_the_interval() {
        assert_eq!(next_gap(Duration::from_secs(3600), INTERVAL), LONGEST_GAP);
        let long_interval = Duration::from_secs(600);
        assert_eq!(
            next_gap(Duration::from_secs(3600), long_interval),
            long_interval
        );
    }
}
