//! Reports the database-derived gauges (`job_jobs`, `job_oldest_due_age_seconds`,
//! `job_dead_letters`) from one worker at a time: every worker runs a reporter, and each pass
//! asks the store for the reporter's role (a row held until a deadline and renewed by its
//! holder), so one worker reads the database for everyone and the others only keep
//! `job_reporter_leader` at 0. Alert on the gauges where `job_reporter_leader == 1` (the
//! README's rules do): a worker that lost the role keeps its last values.

use std::collections::HashSet;
use std::time::Duration;

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
    /// Time between passes: [`MIN_INTERVAL`](crate::MIN_INTERVAL) (10 ms) to [`MAX_DURATION`](crate::MAX_DURATION). Defaults to 15 seconds.
    pub interval: Duration,
    /// Whether this worker takes part (reports when it holds the role). Defaults to `true`.
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

/// Label sets a report set, to set back to zero when a later report no longer has them.
type Seen = HashSet<(&'static str, Vec<(&'static str, String)>)>;

/// Reports the database-derived gauges while this worker holds the reporter's role.
#[derive(Debug, Clone)]
pub struct Reporter<S> {
    store: S,
    config: ReporterConfig,
    holder: String,
    owners: Vec<(String, String)>,
    seen: Seen,
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
            seen: Seen::new(),
        }
    }

    /// One pass: records the owners, takes or keeps the role, and when held reads and sets the
    /// gauges. Returns the report, or `None` when another worker holds the role.
    pub async fn run_once(&mut self) -> Result<Option<Report>, StoreError> {
        let request = ReportRequest {
            holder: self.holder.clone(),
            // Three passes: a leader that misses two keeps its role.
            hold_for: self.config.interval.saturating_mul(3),
            owners: self.owners.clone(),
        };
        let report = self.store.report(&request).await?;
        match &report {
            Some(report) => {
                gauge!(names::REPORTER).set(1.0);
                self.export(report);
            }
            None => gauge!(names::REPORTER).set(0.0),
        }
        Ok(report)
    }

    fn export(&mut self, report: &Report) {
        let mut now = Seen::new();
        let mut set = |name: &'static str, labels: Vec<(&'static str, String)>, value: f64| {
            gauge!(name, &labels).set(value);
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
        for (name, labels) in self.seen.difference(&now) {
            gauge!(*name, labels).set(0.0);
        }
        self.seen = now;
    }
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
                return Ok(());
            }
            let report = self.run_once().await?;
            if let Some(r) = report {
                tracing::debug!(
                    queues = r.oldest_due.len(),
                    dead_letter_kinds = r.dead_letters.len(),
                    "reported the database's gauges"
                );
            }
            Ok(())
        })
    }
}
