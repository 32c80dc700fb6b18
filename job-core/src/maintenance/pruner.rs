//! Keeps the table small and honest: deletes completed and cancelled jobs after their
//! retention, discards waiting jobs past their deadline (class `expired`) and cancels waiting
//! jobs whose cancellation was requested while they ran. Discarded jobs (dead letters) are
//! kept until purged. Every worker runs one; the store's bounded, `SKIP LOCKED` statements let
//! them cooperate.

use std::time::Duration;

use tokio::time::Instant;

use crate::attempt::step::BoxFuture;
use crate::contract::store::{Expired, PruneRequest, Store};
use crate::model::error::{BuildError, StoreError};

use super::service::{at_least_min, at_most_max, invalid, Service, ServiceConfig};

/// Pruner settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrunerConfig {
    /// How long completed jobs are kept after they finished. Defaults to 24 hours.
    pub completed_retention: Duration,
    /// How long cancelled jobs are kept after they finished. Defaults to 7 days.
    pub cancelled_retention: Duration,
    /// Time between passes: [`MIN_INTERVAL`](crate::MIN_INTERVAL) (10 ms) to [`MAX_DURATION`](crate::MAX_DURATION). Defaults to 10 seconds.
    pub interval: Duration,
    /// The most rows one call of the store deletes or updates (on PostgreSQL one statement;
    /// on SQLite, transactions of at most 16 MiB of payloads, results, histories and steps
    /// each); a pass repeats until fewer come back. Defaults to 1,000.
    pub batch: u32,
    /// How often the pruner asks the store to vacuum the job tables ([`Store::vacuum`]), which
    /// it does only where the database would not (PostgreSQL with autovacuum off) and enough
    /// rows changed: without vacuum, every claim steps over the dead row versions of all jobs
    /// run since, and slows down. Where the database does vacuum, the store only refreshes
    /// the statistics of a table that grew far past them (PostgreSQL: `ANALYZE`), so that
    /// plans made on an empty table do not outlive its growth. A store whose role may not vacuum
    /// (PostgreSQL: not the tables' owner) reports it, and the pruner logs it at WARN once.
    /// `None` never asks.
    /// Defaults to 10 seconds.
    pub vacuum_interval: Option<Duration>,
}

impl Default for PrunerConfig {
    fn default() -> Self {
        PrunerConfig {
            completed_retention: Duration::from_secs(24 * 3600),
            cancelled_retention: Duration::from_secs(7 * 24 * 3600),
            interval: Duration::from_secs(10),
            batch: 1000,
            vacuum_interval: Some(Duration::from_secs(10)),
        }
    }
}

/// What a pruner pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Finished jobs deleted.
    pub deleted: u64,
    /// Jobs ended because they could not run any more.
    pub expired: Expired,
}

/// Deletes old finished jobs and ends jobs that must not run.
#[derive(Debug, Clone)]
pub struct Pruner<S> {
    store: S,
    config: PrunerConfig,
    /// When the store was last asked to vacuum.
    vacuumed: Instant,
    /// The last vacuum failure reported at WARN: one that keeps failing the same way (the
    /// worker's role does not own the tables) is reported once, then at DEBUG.
    vacuum_failure: Option<String>,
}

impl<S: Store> Pruner<S> {
    /// A pruner over `store`.
    pub fn new(store: S, config: PrunerConfig) -> Self {
        Pruner {
            store,
            config,
            vacuumed: Instant::now(),
            vacuum_failure: None,
        }
    }

    /// Asks the store to vacuum when `vacuum_interval` has passed since the last time.
    async fn vacuum_when_due(&mut self) {
        let Some(every) = self.config.vacuum_interval else {
            return;
        };
        if self.vacuumed.elapsed() < every {
            return;
        }
        self.vacuumed = Instant::now();
        match self.store.vacuum().await {
            Ok(ran) => {
                if ran {
                    tracing::debug!("vacuumed or analyzed the job tables");
                }
                if self.vacuum_failure.take().is_some() {
                    tracing::info!("the job tables can be vacuumed again");
                }
            }
            Err(e) => {
                let failure = e.to_string();
                if self.vacuum_failure.as_ref() == Some(&failure) {
                    tracing::debug!(error = %failure, "vacuum failed again");
                } else {
                    tracing::warn!(error = %failure, "vacuum failed");
                    self.vacuum_failure = Some(failure);
                }
            }
        }
    }

    /// One pass: expires, then prunes, each in batches until a batch comes back short.
    pub async fn run_once(&self) -> Result<Pruned, StoreError> {
        let batch = self.config.batch;
        let mut total = Pruned::default();
        loop {
            let e = self.store.expire(batch).await?;
            crate::telemetry::expired(&e);
            total.expired.discarded += e.discarded;
            total.expired.cancelled += e.cancelled;
            if e.discarded + e.cancelled < u64::from(batch) {
                break;
            }
        }
        let request = PruneRequest {
            completed_retention: self.config.completed_retention,
            cancelled_retention: self.config.cancelled_retention,
            batch,
        };
        loop {
            let n = self.store.prune(&request).await?;
            total.deleted += n;
            if n < u64::from(batch) {
                return Ok(total);
            }
        }
    }
}

impl PrunerConfig {
    /// Whether the pruner can run with these settings.
    pub fn validate(&self) -> Result<(), BuildError> {
        if self.batch == 0 {
            return Err(invalid("pruner", "batch must be greater than zero"));
        }
        at_least_min("pruner", "interval", self.interval)?;
        if self.vacuum_interval.is_some_and(|v| v.is_zero()) {
            return Err(invalid(
                "pruner",
                "vacuum_interval must be greater than zero",
            ));
        }
        at_most_max(
            "pruner",
            &[
                ("interval", Some(self.interval)),
                ("completed_retention", Some(self.completed_retention)),
                ("cancelled_retention", Some(self.cancelled_retention)),
                ("vacuum_interval", self.vacuum_interval),
            ],
        )
    }
}

impl ServiceConfig for PrunerConfig {
    fn validate(&self) -> Result<(), BuildError> {
        PrunerConfig::validate(self)
    }

    fn interval(&self) -> Duration {
        self.interval
    }
}

impl<S: Store> Service for Pruner<S> {
    fn name(&self) -> &'static str {
        "pruner"
    }

    fn config(&self) -> &dyn ServiceConfig {
        &self.config
    }

    /// Vacuums every `vacuum_interval` (at the first pass that far from the last one), then
    /// expires and prunes.
    fn tick(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            self.vacuum_when_due().await;
            let p = self.run_once().await?;
            if p.deleted + p.expired.discarded + p.expired.cancelled > 0 {
                tracing::info!(
                    deleted = p.deleted,
                    expired = p.expired.discarded,
                    cancelled = p.expired.cancelled,
                    "pruned jobs"
                );
            }
            Ok(())
        })
    }
}
