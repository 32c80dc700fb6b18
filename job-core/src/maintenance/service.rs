//! What every maintenance service is to the worker that runs it: a config that validates
//! itself, one pass (`tick`) and the time between passes. The worker's supervisor runs each
//! service of [`services`](super::services) in a task of its own on the shared ticker loop.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::attempt::step::BoxFuture;
use crate::model::error::{BuildError, StoreError};

use super::Ticker;

/// A maintenance service's settings.
pub(crate) trait ServiceConfig {
    /// Whether the settings are usable; `WorkerBuilder::build` asks before start.
    fn validate(&self) -> Result<(), BuildError>;

    /// Time between passes.
    fn interval(&self) -> Duration;
}

/// A maintenance service (River's maintenance services): a pass every `interval`.
pub(crate) trait Service: Send + Sync + 'static {
    /// Its name, in logs.
    fn name(&self) -> &'static str;

    /// Its settings.
    fn config(&self) -> &dyn ServiceConfig;

    /// One pass. Logs what it did; an error is logged by the loop, and the next pass comes
    /// at the next interval.
    fn tick(&mut self) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Once, when the worker stops, after the last pass (the worker bounds the wait). Nothing
    /// by default.
    fn stopped(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// Runs `service` until `stop` fires: a pass every interval (a slow pass delays the next
/// rather than bunching them).
pub(crate) async fn run(mut service: Box<dyn Service>, stop: CancellationToken) {
    let mut ticker = Ticker::new(service.config().interval(), stop);
    while ticker.next().await {
        if let Err(e) = service.tick().await {
            tracing::warn!(service = service.name(), error = %e, "maintenance pass failed");
        }
    }
    service.stopped().await;
}

/// Refuses, as `option` of a service, the first of `durations` (each named) over
/// [`MAX_DURATION`](crate::MAX_DURATION).
pub(crate) fn at_most_max(
    option: &'static str,
    durations: &[(&str, Option<Duration>)],
) -> Result<(), BuildError> {
    for (name, duration) in durations {
        if let Some(problem) = duration.and_then(crate::model::job::too_long) {
            return Err(invalid(option, &format!("{name} {problem}")));
        }
    }
    Ok(())
}

/// Refuses, as `option` of a service, its interval (called `name`) under
/// [`MIN_INTERVAL`](crate::MIN_INTERVAL): its loop would run a pass after pass without sleeping.
pub(crate) fn at_least_min(
    option: &'static str,
    name: &str,
    interval: Duration,
) -> Result<(), BuildError> {
    match crate::worker::too_short(interval) {
        Some(problem) => Err(invalid(option, &format!("{name} {problem}"))),
        None => Ok(()),
    }
}

/// A `BuildError` naming the config `option` of a service.
pub(crate) fn invalid(option: &'static str, reason: &str) -> BuildError {
    BuildError::InvalidOption {
        option,
        reason: reason.to_owned(),
    }
}
