//! Makes due jobs claimable: `scheduled` jobs whose time has come and `retryable` jobs whose
//! backoff has passed become `available`, the only state a claim reads. Keeping future and
//! waiting rows out of the claim's reach is what keeps a claim's cost to what it returns (a
//! million jobs scheduled for next month cost it nothing). Every worker runs one, at least
//! every poll interval; `SKIP LOCKED` in the store makes them cooperate, and each pass wakes
//! the queues it filled.

use std::time::Duration;

use crate::attempt::step::BoxFuture;
use crate::contract::store::Store;
use crate::model::error::{BuildError, StoreError};

use super::service::{at_least_min, at_most_max, invalid, Service, ServiceConfig};

/// Stager settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagerConfig {
    /// Time between passes: [`MIN_INTERVAL`](crate::MIN_INTERVAL) (10 ms) to [`MAX_DURATION`](crate::MAX_DURATION). Defaults to 1 second; a worker runs it at least every
    /// [`poll_interval`](crate::WorkerConfig::poll_interval), so a due job waits at most about
    /// that long to become claimable.
    pub interval: Duration,
    /// The most jobs one statement stages; a pass repeats until fewer come back. Defaults to
    /// 5,000.
    pub batch: u32,
}

impl Default for StagerConfig {
    fn default() -> Self {
        StagerConfig {
            interval: Duration::from_secs(1),
            batch: 5000,
        }
    }
}

impl StagerConfig {
    /// Whether the stager can run with these settings.
    pub fn validate(&self) -> Result<(), BuildError> {
        if self.batch == 0 {
            return Err(invalid("stager", "batch must be greater than zero"));
        }
        at_least_min("stager", "interval", self.interval)?;
        at_most_max("stager", &[("interval", Some(self.interval))])
    }
}

/// Moves due jobs where claims find them.
#[derive(Debug, Clone)]
pub struct Stager<S> {
    store: S,
    config: StagerConfig,
}

impl<S: Store> Stager<S> {
    /// A stager over `store`.
    pub fn new(store: S, config: StagerConfig) -> Self {
        Stager { store, config }
    }

    /// One pass: stages every due job, in batches. Returns how many.
    pub async fn run_once(&self) -> Result<u64, StoreError> {
        let mut total = 0;
        loop {
            let n = self.store.stage_due(self.config.batch).await?;
            total += n;
            if n < u64::from(self.config.batch) {
                return Ok(total);
            }
        }
    }
}

impl ServiceConfig for StagerConfig {
    fn validate(&self) -> Result<(), BuildError> {
        StagerConfig::validate(self)
    }

    fn interval(&self) -> Duration {
        self.interval
    }
}

impl<S: Store> Service for Stager<S> {
    fn name(&self) -> &'static str {
        "stager"
    }

    fn config(&self) -> &dyn ServiceConfig {
        &self.config
    }

    fn tick(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let n = self.run_once().await?;
            if n > 0 {
                tracing::debug!(staged = n, "made due jobs available");
            }
            Ok(())
        })
    }
}
