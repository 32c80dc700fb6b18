//! The metrics the framework emits through the `metrics` facade. Nothing is recorded until
//! the application installs a recorder (an exporter such as `metrics-exporter-prometheus`);
//! until then each call costs a load and a branch. [`METRICS`] is the one table of names,
//! units and labels, which the README repeats and [`describe_metrics`] hands to the recorder.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{counter, histogram, Key, Label, Level, Metadata, SharedString};

use crate::model::new_job::NewJob;
use crate::model::outcome::Outcome;

/// The `owner` label of a kind that names none (`#[job(owner = "..")]`).
pub const NO_OWNER: &str = "none";

/// The metric names, as constants for the code that emits them.
pub(crate) mod names {
    pub(crate) const ENQUEUED: &str = "job_enqueued_total";
    pub(crate) const STARTED: &str = "job_started_total";
    pub(crate) const FINISHED: &str = "job_finished_total";
    pub(crate) const LEASE_LOST: &str = "job_lease_lost_total";
    pub(crate) const FENCED: &str = "job_fenced_total";
    pub(crate) const STUCK: &str = "job_stuck_total";
    pub(crate) const PROGRESS: &str = "job_progress_reports_total";
    pub(crate) const DURATION: &str = "job_execution_duration_seconds";
    pub(crate) const QUEUE_WAIT: &str = "job_queue_wait_seconds";
    pub(crate) const IN_FLIGHT: &str = "job_in_flight";
    pub(crate) const FREE_SLOTS: &str = "job_free_slots";
    pub(crate) const PREFETCHED: &str = "job_prefetched";
    pub(crate) const JOBS: &str = "job_jobs";
    pub(crate) const OLDEST_DUE: &str = "job_oldest_due_age_seconds";
    pub(crate) const DEAD_LETTERS: &str = "job_dead_letters";
    pub(crate) const REPORTER: &str = "job_reporter_leader";
    pub(crate) const BREAKER_TRIPS: &str = "job_breaker_trips_total";
    pub(crate) const PAUSED: &str = "job_paused";
    pub(crate) const RESCUED: &str = "job_rescued_total";
    pub(crate) const EXPIRED: &str = "job_expired_total";
}

/// What kind of metric one of [`METRICS`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up (Prometheus: `counter`).
    Counter,
    /// A current value (Prometheus: `gauge`).
    Gauge,
    /// A distribution of observations (Prometheus: `summary` or `histogram`, the exporter's
    /// choice).
    Histogram,
}

/// One metric the framework emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricInfo {
    /// Its name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: MetricKind,
    /// Its unit (`jobs`, `seconds`).
    pub unit: &'static str,
    /// Its labels.
    pub labels: &'static [&'static str],
    /// What it counts or measures.
    pub help: &'static str,
}

const JOB: &[&str] = &["queue", "kind", "owner"];

/// Every metric the framework emits: the worker's (counted where it happens), the enqueue's,
/// and the database-derived gauges of the reporter (one worker at a time).
pub const METRICS: &[MetricInfo] = &[
    MetricInfo {
        name: names::ENQUEUED,
        kind: MetricKind::Counter,
        unit: "jobs",
        labels: &["queue", "kind"],
        help: "Jobs inserted by this process through the Rust enqueue (typed helpers, \
               Enqueue, enqueue_many); duplicates refused are not counted",
    },
    MetricInfo {
        name: names::STARTED,
        kind: MetricKind::Counter,
        unit: "jobs",
        labels: JOB,
        help: "Attempts whose handler started",
    },
    MetricInfo {
        name: names::FINISHED,
        kind: MetricKind::Counter,
        unit: "jobs",
        labels: &["queue", "kind", "owner", "outcome", "class"],
        help: "Outcomes written, by outcome (completed, retried, snoozed, cancelled, discarded) \
               and error class (none, error, timeout, panic, terminal, poison, ...)",
    },
    MetricInfo {
        name: names::RESCUED,
        kind: MetricKind::Counter,
        unit: "jobs",
        labels: &["outcome"],
        help: "Attempts whose lease expired (their worker was killed, paused or cut off in \
               the attempt), ended by this process's rescuer: retried, or discarded when it \
               was the last attempt (class lease_expired); the dying worker counts nothing",
    },
    MetricInfo {
        name: names::EXPIRED,
        kind: MetricKind::Counter,
        unit: "jobs",
        labels: &["outcome"],
        help: "Waiting jobs this process's pruner ended at their deadline: discarded (class \
               expired), or cancelled when a cancel was requested",
    },
    MetricInfo {
        name: names::LEASE_LOST,
        kind: MetricKind::Counter,
        unit: "jobs",
        labels: JOB,
        help: "Executions stopped, or outcomes dropped, because the lease was lost",
    },
    MetricInfo {
        name: names::FENCED,
        kind: MetricKind::Counter,
        unit: "jobs",
        labels: JOB,
        help: "Executions the worker stopped itself because their lease could not be renewed \
               in time (or was too close to expiry to start)",
    },
    MetricInfo {
        name: names::STUCK,
        kind: MetricKind::Counter,
        unit: "jobs",
        labels: JOB,
        help: "Executions reported stuck: their code ran stuck_after past its timeout or stop",
    },
    MetricInfo {
        name: names::PROGRESS,
        kind: MetricKind::Counter,
        unit: "reports",
        labels: JOB,
        help: "Progress reports of handlers (ctx.progress); the latest of each job is stored \
               with it and shown by Admin",
    },
    MetricInfo {
        name: names::DURATION,
        kind: MetricKind::Histogram,
        unit: "seconds",
        labels: &["queue", "kind", "owner", "outcome"],
        help: "How long attempts ran, from the handler's start until its code ended",
    },
    MetricInfo {
        name: names::QUEUE_WAIT,
        kind: MetricKind::Histogram,
        unit: "seconds",
        labels: JOB,
        help: "From when a job became due (its run_at) until its handler started",
    },
    MetricInfo {
        name: names::IN_FLIGHT,
        kind: MetricKind::Gauge,
        unit: "jobs",
        labels: &["queue"],
        help: "Execution slots of the queue taken, summed over this process's workers",
    },
    MetricInfo {
        name: names::FREE_SLOTS,
        kind: MetricKind::Gauge,
        unit: "jobs",
        labels: &["queue"],
        help: "Execution slots of the queue free, summed over this process's workers (0 with \
               work waiting: saturated)",
    },
    MetricInfo {
        name: names::PREFETCHED,
        kind: MetricKind::Gauge,
        unit: "jobs",
        labels: &["queue"],
        help: "Claimed jobs of the queue waiting for a slot, holding their leases, summed over \
               this process's workers",
    },
    MetricInfo {
        name: names::JOBS,
        kind: MetricKind::Gauge,
        unit: "jobs",
        labels: &["queue", "state"],
        help: "Jobs in the database per queue and state (scheduled, available, retryable, \
               running, discarded), from the reporter",
    },
    MetricInfo {
        name: names::OLDEST_DUE,
        kind: MetricKind::Gauge,
        unit: "seconds",
        labels: &["queue"],
        help: "How long the oldest due job of the queue has been waiting (0 when none is due), \
               from the reporter",
    },
    MetricInfo {
        name: names::DEAD_LETTERS,
        kind: MetricKind::Gauge,
        unit: "jobs",
        labels: &["queue", "kind", "owner"],
        help: "Discarded jobs (dead letters) per queue, kind and owner, from the reporter",
    },
    MetricInfo {
        name: names::BREAKER_TRIPS,
        kind: MetricKind::Counter,
        unit: "",
        labels: &["kind"],
        help: "Times this worker's outcomes tripped the kind's circuit breaker, pausing the kind",
    },
    MetricInfo {
        name: names::PAUSED,
        kind: MetricKind::Gauge,
        unit: "",
        labels: &["scope", "name", "paused_by"],
        help: "1 while the queue or kind is paused, by an operator or a circuit breaker \
               (`paused_by`), from the reporter; the reason is in `job paused`",
    },
    MetricInfo {
        name: names::REPORTER,
        kind: MetricKind::Gauge,
        unit: "",
        labels: &[],
        help: "1 while this worker is the one reporting the database-derived gauges, else 0",
    },
];

/// Hands the name, unit and help of every metric in [`METRICS`] to the installed recorder, so
/// that an exporter can show them (Prometheus: `# HELP` lines). Call it once after installing
/// the recorder; metrics are emitted whether or not it is called.
pub fn describe_metrics() {
    for m in METRICS {
        let unit = match m.unit {
            "seconds" => Some(metrics::Unit::Seconds),
            "jobs" => Some(metrics::Unit::Count),
            _ => None,
        };
        let help = m.help;
        match (m.kind, unit) {
            (MetricKind::Counter, Some(u)) => metrics::describe_counter!(m.name, u, help),
            (MetricKind::Counter, None) => metrics::describe_counter!(m.name, help),
            (MetricKind::Gauge, Some(u)) => metrics::describe_gauge!(m.name, u, help),
            (MetricKind::Gauge, None) => metrics::describe_gauge!(m.name, help),
            (MetricKind::Histogram, Some(u)) => metrics::describe_histogram!(m.name, u, help),
            (MetricKind::Histogram, None) => metrics::describe_histogram!(m.name, help),
        }
    }
}

/// Counts jobs a backend inserted (`job_enqueued_total`): a backend's enqueue calls this once
/// the insert succeeded, for each job it inserted.
pub fn record_enqueued(job: &NewJob) {
    counter!(
        names::ENQUEUED,
        "queue" => job.queue.clone(),
        "kind" => job.kind.clone(),
    )
    .increment(1);
}

/// Counts a circuit breaker this worker's outcomes tripped (`job_breaker_trips_total`).
pub(crate) fn breaker_tripped(kind: &str) {
    counter!(names::BREAKER_TRIPS, "kind" => kind.to_owned()).increment(1);
}

/// Counts what one rescue statement ended (`job_rescued_total`). Counted where it is written:
/// the worker whose attempt it was died or was cut off, and counted nothing.
pub(crate) fn rescued(r: &crate::contract::store::Rescued) {
    for (outcome, n) in [("retried", r.retried), ("discarded", r.discarded)] {
        if n > 0 {
            counter!(names::RESCUED, "outcome" => outcome).increment(n);
        }
    }
}

/// Exposes `job_rescued_total` and `job_expired_total` from 0 when a worker starts its
/// maintenance. Created at their first increment, they started at that increment's count:
/// `increase()` over a series whose first sample is already 1 sees nothing, so the rescues of a
/// single worker that kept restarting (each life rescuing the last one's jobs) never fired
/// `JobWorkersDyingWithWork`.
pub(crate) fn rescues_counted_from_zero() {
    for outcome in ["retried", "discarded"] {
        counter!(names::RESCUED, "outcome" => outcome).increment(0);
    }
    for outcome in ["discarded", "cancelled"] {
        counter!(names::EXPIRED, "outcome" => outcome).increment(0);
    }
}

/// Counts what one expire statement ended (`job_expired_total`).
pub(crate) fn expired(e: &crate::contract::store::Expired) {
    for (outcome, n) in [("discarded", e.discarded), ("cancelled", e.cancelled)] {
        if n > 0 {
            counter!(names::EXPIRED, "outcome" => outcome).increment(n);
        }
    }
}

/// The labels of one job's metrics: its queue, kind and owner. Built once per queue and kind
/// (see [`LabelCache`]); its values are shared strings, so a clone for each metric emitted
/// copies no text.
#[derive(Debug, Clone)]
pub(crate) struct JobLabels(Arc<LabelSet>);

/// What [`JobLabels`] share: the labels, and the keys of the metrics every successful job
/// emits, built with them once rather than for each job (a key handed to the recorder by
/// reference is what `counter!` and `histogram!` build and hand over on every call).
#[derive(Debug)]
struct LabelSet {
    labels: [Label; 3],
    started: Key,
    queue_wait: Key,
    completed: Key,
    completed_duration: Key,
}

/// `base`, then `more`.
fn labels_with(base: &[Label], more: &[(&'static str, &'static str)]) -> Vec<Label> {
    let mut labels = Vec::with_capacity(base.len() + more.len());
    labels.extend_from_slice(base);
    labels.extend(more.iter().map(|(k, v)| Label::new(*k, *v)));
    labels
}

/// The metadata `counter!` and `histogram!` give the recorder from this module.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

impl JobLabels {
    pub(crate) fn new(queue: &str, kind: &str, owner: Option<&str>) -> Self {
        let shared = |s: &str| SharedString::from_shared(Arc::<str>::from(s));
        let labels = [
            Label::new("queue", shared(queue)),
            Label::new("kind", shared(kind)),
            Label::new("owner", shared(owner.unwrap_or(NO_OWNER))),
        ];
        let with = |more: &[(&'static str, &'static str)]| labels_with(&labels, more);
        let (name, class) = outcome_labels(&Outcome::Complete);
        JobLabels(Arc::new(LabelSet {
            started: Key::from_parts(names::STARTED, labels.to_vec()),
            queue_wait: Key::from_parts(names::QUEUE_WAIT, labels.to_vec()),
            completed: Key::from_parts(
                names::FINISHED,
                with(&[("outcome", name), ("class", class)]),
            ),
            completed_duration: Key::from_parts(names::DURATION, with(&[("outcome", name)])),
            labels,
        }))
    }

    fn base(&self) -> Vec<Label> {
        self.0.labels.to_vec()
    }

    fn with(&self, more: &[(&'static str, &'static str)]) -> Vec<Label> {
        labels_with(&self.0.labels, more)
    }

    /// A handler started, `waited` after the job became due.
    pub(crate) fn started(&self, waited: Duration) {
        let set = &*self.0;
        metrics::with_recorder(|r| r.register_counter(&set.started, &METADATA)).increment(1);
        metrics::with_recorder(|r| r.register_histogram(&set.queue_wait, &METADATA))
            .record(waited.as_secs_f64());
    }

    /// An outcome was written; `ran_for` is how long its handler ran, when it ran.
    pub(crate) fn finished(&self, outcome: &Outcome, ran_for: Option<Duration>) {
        if matches!(outcome, Outcome::Complete) {
            let set = &*self.0;
            metrics::with_recorder(|r| r.register_counter(&set.completed, &METADATA)).increment(1);
            if let Some(ran_for) = ran_for {
                metrics::with_recorder(|r| {
                    r.register_histogram(&set.completed_duration, &METADATA)
                })
                .record(ran_for.as_secs_f64());
            }
            return;
        }
        let (name, class) = outcome_labels(outcome);
        counter!(
            names::FINISHED,
            self.with(&[("outcome", name), ("class", class)])
        )
        .increment(1);
        if let Some(ran_for) = ran_for {
            histogram!(names::DURATION, self.with(&[("outcome", name)]))
                .record(ran_for.as_secs_f64());
        }
    }

    /// The lease was lost: the execution stopped or its outcome dropped.
    pub(crate) fn lease_lost(&self) {
        counter!(names::LEASE_LOST, self.base()).increment(1);
    }

    /// The worker fenced the execution.
    pub(crate) fn fenced(&self) {
        counter!(names::FENCED, self.base()).increment(1);
    }

    /// The execution was reported stuck.
    pub(crate) fn stuck(&self) {
        counter!(names::STUCK, self.base()).increment(1);
    }

    /// The handler reported progress.
    pub(crate) fn progress(&self) {
        counter!(names::PROGRESS, self.base()).increment(1);
    }
}

/// The [`JobLabels`] of each kind and queue a worker has run, built on first use. A worker
/// runs only its registered kinds from its configured queues, so this stays small.
#[derive(Debug, Default)]
pub(crate) struct LabelCache(Mutex<HashMap<String, Vec<(String, JobLabels)>>>);

impl LabelCache {
    /// The labels of `kind` in `queue`; `owner` is asked only when they are first built.
    pub(crate) fn get<'a>(
        &self,
        queue: &str,
        kind: &str,
        owner: impl FnOnce() -> Option<&'a str>,
    ) -> JobLabels {
        let mut cache = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let cached = cache
            .get(kind)
            .and_then(|queues| queues.iter().find(|(q, _)| q == queue));
        if let Some((_, labels)) = cached {
            return labels.clone();
        }
        let labels = JobLabels::new(queue, kind, owner());
        cache
            .entry(kind.to_owned())
            .or_default()
            .push((queue.to_owned(), labels.clone()));
        labels
    }
}

/// The `outcome` and `class` labels of an outcome.
fn outcome_labels(outcome: &Outcome) -> (&'static str, &'static str) {
    match outcome {
        Outcome::Complete => ("completed", "none"),
        Outcome::Retry { failure, .. } => ("retried", failure.class.as_str()),
        Outcome::Snooze { .. } => ("snoozed", "none"),
        Outcome::Cancel { .. } => ("cancelled", "none"),
        Outcome::Discard { failure } => ("discarded", failure.class.as_str()),
    }
}

/// The saturation gauges of one worker's queue. Each worker adds its own slots to the
/// process's gauges of the queue (and takes them back when it stops), so that two workers of
/// one process on the same queue show their sum: each set them to its own values, the last
/// one's word, and a stopped worker's free slots stayed advertised for good. Their keys are
/// built once: they change at every start and end of a job, and a key built for each (its
/// label's text copied) would cost two allocations a gauge.
#[derive(Debug)]
pub(crate) struct QueueSlots {
    in_flight: Key,
    free: Key,
    prefetched: Key,
    /// What this worker added to each, last time (`None`: nothing yet, and a gauge it has not
    /// touched would not be shown at all).
    added: Mutex<Option<[usize; 3]>>,
}

impl QueueSlots {
    pub(crate) fn new(queue: &str) -> Self {
        let key = |name| Key::from_parts(name, vec![Label::new("queue", queue.to_owned())]);
        QueueSlots {
            in_flight: key(names::IN_FLIGHT),
            free: key(names::FREE_SLOTS),
            prefetched: key(names::PREFETCHED),
            added: Mutex::new(None),
        }
    }

    /// Sets this worker's part of the gauges.
    pub(crate) fn set(&self, in_flight: usize, free: usize, prefetched: usize) {
        let mut guard = self.added.lock().unwrap_or_else(|e| e.into_inner());
        let first = guard.is_none();
        let added = guard.get_or_insert([0; 3]);
        for (i, (key, value)) in [
            (&self.in_flight, in_flight),
            (&self.free, free),
            (&self.prefetched, prefetched),
        ]
        .into_iter()
        .enumerate()
        {
            let was = added[i];
            if value != was || first {
                let gauge = metrics::with_recorder(|r| r.register_gauge(key, &METADATA));
                if value >= was {
                    gauge.increment((value - was) as f64);
                } else {
                    gauge.decrement((was - value) as f64);
                }
                added[i] = value;
            }
        }
    }
}

impl Drop for QueueSlots {
    /// The worker is gone: its slots with it.
    fn drop(&mut self) {
        self.set(0, 0, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(labels: &JobLabels) -> Vec<(String, String)> {
        labels
            .0
            .labels
            .iter()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect()
    }

    #[test]
    fn the_label_cache_keeps_one_set_per_kind_and_queue() {
        let cache = LabelCache::default();
        let mut asked = 0;
        let mut owner = || {
            asked += 1;
            Some("billing")
        };
        let a = cache.get("mail", "send", &mut owner);
        let again = cache.get("mail", "send", &mut owner);
        let other_queue = cache.get("bulk", "send", &mut owner);
        let other_kind = cache.get("mail", "receipt", || None);
        assert_eq!(asked, 2, "the owner is asked once per kind and queue");
        assert!(Arc::ptr_eq(&a.0, &again.0), "a second call reuses the set");
        let pair = |k: &str, v: &str| (k.to_owned(), v.to_owned());
        assert_eq!(
            values(&a),
            [
                pair("queue", "mail"),
                pair("kind", "send"),
                pair("owner", "billing")
            ]
        );
        assert_eq!(
            values(&other_queue),
            [
                pair("queue", "bulk"),
                pair("kind", "send"),
                pair("owner", "billing")
            ]
        );
        assert_eq!(
            values(&other_kind),
            [
                pair("queue", "mail"),
                pair("kind", "receipt"),
                pair("owner", NO_OWNER)
            ]
        );
    }
}
