//! Periodic jobs: every worker runs a scheduler that enqueues each schedule's next period
//! ahead of time, as a `scheduled` job due at the period's start, under the unique key
//! `periodic:<kind>:<period start, RFC 3339>` held [`UniqueScope::UntilPruned`]. Schedulers on
//! many workers therefore never double-fire a period: the store's unique index decides, not a
//! lock and not a worker's clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use croner::parser::{CronParser, Seconds};
use croner::Cron;

use crate::attempt::step::BoxFuture;
use crate::contract::store::Store;
use crate::model::error::{BuildError, EnqueueError, StoreError};
use crate::model::job::Job;
use crate::model::new_job::{
    EnqueueOptions, NewJob, OnDuplicate, RunAt, UniqueScope, DEFAULT_PAYLOAD_LIMIT,
};

use super::service::{at_least_min, at_most_max, Service, ServiceConfig};

/// Scheduler settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchedulerConfig {
    /// Time between looks at the schedules: [`MIN_INTERVAL`](crate::MIN_INTERVAL) (10 ms) to
    /// [`MAX_DURATION`](crate::MAX_DURATION). Each look enqueues, for every schedule, its
    /// periods that start before the next look and at least its next one (at most 100,000,
    /// which only an interval over 100,000 s with a schedule of every second reaches; the
    /// next look goes on from there), so this bounds nothing but how far ahead periods are
    /// enqueued. A look that came late also enqueues the periods it missed, at most 100 of
    /// them (see [`Scheduled::gaps`]). Defaults to 1 second.
    pub interval: Duration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            interval: Duration::from_secs(1),
        }
    }
}

type MakeJob = dyn Fn(EnqueueOptions) -> Result<NewJob, EnqueueError> + Send + Sync;

/// One schedule: a kind, a cron expression (5 fields, or 6 with seconds first) and the
/// payload each period enqueues.
#[derive(Clone)]
pub struct Periodic {
    kind: &'static str,
    expression: String,
    cron: Cron,
    make: Arc<MakeJob>,
}

impl std::fmt::Debug for Periodic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Periodic")
            .field("kind", &self.kind)
            .field("expression", &self.expression)
            .finish_non_exhaustive()
    }
}

impl Periodic {
    /// A schedule of `J` on `expression`, each period's payload made by `make`. An expression
    /// that does not parse, or that has no period after now, is a
    /// [`BuildError::InvalidSchedule`] naming it. `make` is called
    /// once here, and a job that every door would refuse (a payload with a NUL, over the size
    /// limit, bad options), or a `make` or `Serialize` that panics, is a
    /// [`BuildError::InvalidOption`] `periodic` naming the kind and the expression; a later period's job refused all the same is logged and skipped (see
    /// [`Scheduler::run_once`]).
    pub fn new<J, F>(expression: &str, make: F) -> Result<Periodic, BuildError>
    where
        J: Job,
        F: Fn() -> J + Send + Sync + 'static,
    {
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(expression)
            .map_err(|e| BuildError::InvalidSchedule {
                kind: J::KIND.to_owned(),
                expression: expression.to_owned(),
                reason: e.to_string(),
            })?;
        // An expression that parses may still never fire (30 February, a year gone by): every
        // look would skip it, silently, walking the calendar to find nothing.
        if cron.find_next_occurrence(&Utc::now(), false).is_err() {
            return Err(BuildError::InvalidSchedule {
                kind: J::KIND.to_owned(),
                expression: expression.to_owned(),
                reason: "it has no period after now".to_owned(),
            });
        }
        let periodic = Periodic {
            kind: J::KIND,
            expression: expression.to_owned(),
            cron,
            make: Arc::new(move |options| NewJob::build(&make(), options, DEFAULT_PAYLOAD_LIMIT)),
        };
        // One sample, so that a schedule whose every job is refused fails at the door. The
        // application's closure and `Serialize` run here: a panic is a refusal too, not one
        // that escapes the builder.
        if let Err(refused) = periodic.job_guarded(Utc::now()) {
            return Err(BuildError::InvalidOption {
                option: "periodic",
                reason: format!(
                    "the job of `{}` on schedule `{expression}` is refused: {refused}",
                    J::KIND
                ),
            });
        }
        Ok(periodic)
    }

    /// The scheduled kind.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// The cron expression as given.
    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The first period starting strictly after `t`.
    pub fn next_after(&self, t: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron.find_next_occurrence(&t, false).ok()
    }

    /// The unique key of the period starting at `period`.
    pub fn key(&self, period: DateTime<Utc>) -> String {
        format!(
            "periodic:{}:{}",
            self.kind,
            period.to_rfc3339_opts(SecondsFormat::Millis, true)
        )
    }

    /// The job of the period starting at `period`.
    pub fn job_for(&self, period: DateTime<Utc>) -> Result<NewJob, EnqueueError> {
        (self.make)(EnqueueOptions {
            run_at: RunAt::At(period),
            unique_key: Some(self.key(period)),
            unique_scope: UniqueScope::UntilPruned,
            on_duplicate: OnDuplicate::Keep,
            ..EnqueueOptions::default()
        })
    }

    /// [`job_for`](Self::job_for), with a panic of the application's closure or `Serialize`
    /// made a refusal of the job rather than one that unwinds through the caller.
    fn job_guarded(&self, period: DateTime<Utc>) -> Result<NewJob, EnqueueError> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.job_for(period)))
            .unwrap_or_else(|panic| {
                Err(EnqueueError::InvalidOption {
                    option: "periodic",
                    reason: format!(
                        "making the job panicked: {}",
                        crate::attempt::pipeline::panic_message(panic)
                    ),
                })
            })
    }
}

/// Enqueues the periods of its schedules.
#[derive(Debug)]
pub struct Scheduler<S> {
    store: S,
    entries: Vec<Periodic>,
    config: SchedulerConfig,
    /// Per entry, the last period this scheduler saw enqueued (by itself or another).
    last: Mutex<Vec<Option<DateTime<Utc>>>>,
    /// Per entry, whether this scheduler said that it has no period after now.
    ended: Vec<std::sync::atomic::AtomicBool>,
}

/// The most periods of one schedule a look that came late enqueues among those it missed
/// (due already): the rest of them are skipped, said at WARN and counted as a gap.
const MAX_CATCH_UP_PERIODS: usize = 100;

/// The most periods of one schedule a look enqueues ahead of now (those starting before the
/// next look): a look a day covers a schedule of every second. Only a scheduler interval over
/// 100,000 s with a schedule that dense reaches it; the next look goes on from there.
const MAX_PERIODS_AHEAD: usize = 100_000;

/// How far behind now a look catches up on periods it missed (it came late), beyond one
/// interval.
const CATCH_UP: Duration = Duration::from_secs(60);

impl SchedulerConfig {
    /// How far back a look may enqueue a period: one interval and [`CATCH_UP`]. A period's
    /// unique key is all that keeps a late look from enqueueing it again, so completed
    /// periods must be kept (the pruner's `completed_retention`) longer than this.
    pub(crate) fn looks_back(&self) -> Duration {
        self.interval.saturating_add(CATCH_UP)
    }
}

/// What a scheduler look did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scheduled {
    /// Periods this scheduler enqueued.
    pub enqueued: u64,
    /// Periods another scheduler had enqueued already.
    pub duplicates: u64,
    /// Periods whose job was refused (its payload or options, by this side or the
    /// database): logged at WARN, naming the schedule, and not tried again.
    pub refused: u64,
    /// Schedules whose periods since this scheduler's last look it did not catch up on (the
    /// look came more than one interval and 60 s after the last: the clock stepped forward,
    /// or the process or the database was away; or it came late by more than 100 of the
    /// schedule's periods): logged at WARN with the first such period.
    pub gaps: u64,
    /// Schedules found to have no period after now (an expression with a year that has
    /// passed): logged at WARN once, the first time this scheduler finds it.
    pub ended: u64,
}

impl<S: Store> Scheduler<S> {
    /// A scheduler of `entries` over `store`.
    pub fn new(store: S, entries: Vec<Periodic>, config: SchedulerConfig) -> Self {
        let last = Mutex::new(vec![None; entries.len()]);
        let ended = entries.iter().map(|_| Default::default()).collect();
        Scheduler {
            store,
            entries,
            config,
            last,
            ended,
        }
    }

    /// One look at `now`: enqueues the next period of every schedule, and any other that
    /// starts before the next look (`now` plus the interval), unless this scheduler already
    /// saw it enqueued. A duplicate (another worker got there first) is no error. A
    /// refused job (its payload or options) is one schedule's mistake: it is logged at WARN
    /// with the schedule and the refusal, that period is not tried again, and the other
    /// schedules go on. A store error that is no refusal (the database does not answer) ends
    /// the look; the next one tries every schedule again.
    pub async fn run_once(&self, now: DateTime<Utc>) -> Result<Scheduled, StoreError> {
        let mut done = Scheduled::default();
        // Every period that starts before the next look, so that a schedule more frequent
        // than the looks loses none (each look enqueued one period, and the others were
        // never enqueued); at least the next one.
        let horizon = chrono::Duration::from_std(self.config.interval)
            .ok()
            .and_then(|ahead| now.checked_add_signed(ahead))
            .unwrap_or(now);
        // A look that comes late (a slow pass, a timer's jitter) starts from the last period
        // this scheduler saw, when that is recent: the periods between it and now are
        // enqueued too, due at once. After a longer gap (the database away for minutes, a
        // process just started) it starts from now, as cron does, rather than run a backlog.
        let catch_up = chrono::Duration::from_std(self.config.interval + CATCH_UP)
            .ok()
            .and_then(|back| now.checked_sub_signed(back))
            .unwrap_or(now);
        for (i, entry) in self.entries.iter().enumerate() {
            let last = self.lock()[i];
            // From the last period seen, even one ahead of now (enqueued by an earlier look):
            // the periods up to it were enqueued, and walking them again would spend the
            // look's bounds on them.
            let mut after = match last {
                Some(last) if last >= catch_up => last,
                _ => now,
            };
            if let Some(missed) = last
                .filter(|last| *last < catch_up)
                .and_then(|last| entry.next_after(last))
                .filter(|first| *first <= now)
            {
                // Said, so that a skipped run is never silent: the clock stepped forward, or
                // the process (or the database) was away longer than a look catches up.
                tracing::warn!(
                    kind = entry.kind,
                    schedule = %entry.expression,
                    first_missed = %missed,
                    resumed_at = %now,
                    "periodic periods missed: the last period this scheduler saw enqueued is \
                     further back than a look catches up (one interval and 60 s: the clock \
                     stepped forward, or the process or the database was away), and it goes \
                     on from now; the periods between ran only if another worker's scheduler \
                     enqueued them"
                );
                done.gaps += 1;
            }
            // Whether a period after now was reached: the look goes on until one is, and then
            // up to the horizon.
            let mut ahead = after > now;
            // Periods missed (due already) and periods ahead this look enqueued: each bounded
            // on its own, so that a look on time always covers its own periods.
            let (mut missed, mut upcoming) = (0, 0);
            loop {
                let Some(period) = entry.next_after(after) else {
                    // An expression with a year (`0 0 9 1 1 * 2026`) ends: said once, rather
                    // than a schedule that silently never fires again.
                    if !ahead && !self.ended[i].swap(true, std::sync::atomic::Ordering::Relaxed) {
                        tracing::warn!(
                            kind = entry.kind,
                            schedule = %entry.expression,
                            "periodic schedule ended: its expression has no period after now; \
                             remove it from the worker"
                        );
                        done.ended += 1;
                    }
                    break;
                };
                if ahead && period > horizon {
                    break;
                }
                if period <= now {
                    if missed == MAX_CATCH_UP_PERIODS {
                        // Late by more periods than a look catches up on: the rest are
                        // skipped, and said, as after a longer gap.
                        tracing::warn!(
                            kind = entry.kind,
                            schedule = %entry.expression,
                            first_missed = %period,
                            resumed_at = %now,
                            "periodic periods missed: this look came late by more than the \
                             {MAX_CATCH_UP_PERIODS} periods it catches up on, and it goes on \
                             from now; the periods between ran only if another worker's \
                             scheduler enqueued them"
                        );
                        done.gaps += 1;
                        after = now;
                        continue;
                    }
                    missed += 1;
                } else {
                    if upcoming == MAX_PERIODS_AHEAD {
                        break;
                    }
                    upcoming += 1;
                }
                after = period;
                ahead |= period > now;
                // The application's closure and `Serialize` run here: a panic is this
                // schedule's refusal, not the end of the look for the schedules after it.
                let enqueued = match entry.job_guarded(period) {
                    Ok(job) => self.store.enqueue(job).await,
                    Err(refused) => Err(refused),
                };
                match enqueued {
                    Ok(_) => done.enqueued += 1,
                    Err(EnqueueError::Duplicate { .. }) => done.duplicates += 1,
                    Err(EnqueueError::Store(e)) if !e.is_refused() => return Err(e),
                    Err(refused) => {
                        tracing::warn!(
                            kind = entry.kind,
                            schedule = %entry.expression,
                            %period,
                            error = %crate::model::text::capped(&refused),
                            "periodic job refused: this period of the schedule is skipped"
                        );
                        done.refused += 1;
                    }
                }
                self.lock()[i] = Some(period);
            }
        }
        Ok(done)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Option<DateTime<Utc>>>> {
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl SchedulerConfig {
    /// Whether the scheduler can run with these settings.
    pub fn validate(&self) -> Result<(), BuildError> {
        at_least_min("scheduler", "interval", self.interval)?;
        at_most_max("scheduler", &[("interval", Some(self.interval))])
    }
}

impl ServiceConfig for SchedulerConfig {
    fn validate(&self) -> Result<(), BuildError> {
        SchedulerConfig::validate(self)
    }

    fn interval(&self) -> Duration {
        self.interval
    }
}

impl<S: Store> Service for Scheduler<S> {
    fn name(&self) -> &'static str {
        "scheduler"
    }

    fn config(&self) -> &dyn ServiceConfig {
        &self.config
    }

    /// One look at the clock; nothing to do without schedules.
    fn tick(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            if !self.entries.is_empty() {
                self.run_once(Utc::now()).await?;
            }
            Ok(())
        })
    }
}
