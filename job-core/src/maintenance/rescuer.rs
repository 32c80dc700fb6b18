//! Recovers jobs whose lease expired: the worker holding them died, was killed or lost the
//! database for longer than the lease. Only expired leases are touched; a live lease is never
//! taken away. Every worker runs one; `SKIP LOCKED` in the store makes them cooperate.

use std::time::Duration;

use crate::attempt::step::BoxFuture;
use crate::contract::store::{Rescued, Store};
use crate::model::error::{BuildError, StoreError};

use super::service::{at_least_min, at_most_max, invalid, Service, ServiceConfig};

/// Rescuer settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RescuerConfig {
    /// Time between passes: [`MIN_INTERVAL`](crate::MIN_INTERVAL) (10 ms) to [`MAX_DURATION`](crate::MAX_DURATION). Defaults to 5 seconds.
    pub interval: Duration,
    /// The most jobs one statement rescues; a pass repeats until fewer come back. Defaults to
    /// 1,000.
    pub batch: u32,
}

impl Default for RescuerConfig {
    fn default() -> Self {
        RescuerConfig {
            interval: Duration::from_secs(5),
            batch: 1000,
        }
    }
}

/// Puts expired leases back to work.
#[derive(Debug, Clone)]
pub struct Rescuer<S> {
    store: S,
    config: RescuerConfig,
}

impl<S: Store> Rescuer<S> {
    /// A rescuer over `store`.
    pub fn new(store: S, config: RescuerConfig) -> Self {
        Rescuer { store, config }
    }

    /// One pass: rescues every job whose lease has expired, in batches.
    pub async fn run_once(&self) -> Result<Rescued, StoreError> {
        let mut total = Rescued::default();
        loop {
            let r = self.store.rescue_expired(self.config.batch).await?;
            total.retried += r.retried;
            total.discarded += r.discarded;
            if r.retried + r.discarded < u64::from(self.config.batch) {
                return Ok(total);
            }
        }
    }
}

impl RescuerConfig {
    /// Whether the rescuer can run with these settings.
    pub fn validate(&self) -> Result<(), BuildError> {
        if self.batch == 0 {
            return Err(invalid("rescuer", "batch must be greater than zero"));
        }
        at_least_min("rescuer", "interval", self.interval)?;
        at_most_max("rescuer", &[("interval", Some(self.interval))])
    }
}

impl ServiceConfig for RescuerConfig {
    fn validate(&self) -> Result<(), BuildError> {
        RescuerConfig::validate(self)
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
            let r = self.run_once().await?;
            if r.retried + r.discarded > 0 {
                tracing::info!(
                    retried = r.retried,
                    discarded = r.discarded,
                    "rescued jobs with expired leases"
                );
            }
            Ok(())
        })
    }
}
