//! What every maintenance service is to the worker that runs it: a config that validates
//! itself, one pass (`tick`) and the time between passes. The worker's supervisor runs each
//! service of [`services`](super::services) in a task of its own on the shared ticker loop.

use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
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
/// rather than bunching them). A pass that panics (application code runs in some: a periodic
/// job's payload is made and serialized by the scheduler's pass) is logged and the next comes
/// at the next interval, as after an error: one bad pass must not end the service for the
/// life of the process.
pub(crate) async fn run(mut service: Box<dyn Service>, stop: CancellationToken) {
    let mut ticker = Ticker::new(service.config().interval(), stop);
    while ticker.next().await {
        match AssertUnwindSafe(service.tick()).catch_unwind().await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(service = service.name(), error = %e, "maintenance pass failed");
            }
            Err(panic) => tracing::error!(
                service = service.name(),
                panic = %crate::attempt::pipeline::panic_message(panic),
                "maintenance pass panicked; the next pass comes at the next interval"
            ),
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;

    struct Every(Duration);

    impl ServiceConfig for Every {
        fn validate(&self) -> Result<(), BuildError> {
            Ok(())
        }

        fn interval(&self) -> Duration {
            self.0
        }
    }

    /// Panics in its first pass, fails in its second, and stops the loop in its third.
    struct Flaky {
        config: Every,
        passes: Arc<AtomicU32>,
        stop: CancellationToken,
    }

    impl Service for Flaky {
        fn name(&self) -> &'static str {
            "flaky"
        }

        fn config(&self) -> &dyn ServiceConfig {
            &self.config
        }

        fn tick(&mut self) -> BoxFuture<'_, Result<(), StoreError>> {
            Box::pin(async move {
                match self.passes.fetch_add(1, Ordering::SeqCst) {
                    0 => panic!("a periodic job's payload could not be made"),
                    1 => Err(StoreError::new("the database is away")),
                    _ => {
                        self.stop.cancel();
                        Ok(())
                    }
                }
            })
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_pass_that_panics_or_fails_is_followed_by_the_next() {
        let stop = CancellationToken::new();
        let passes = Arc::new(AtomicU32::new(0));
        let service = Flaky {
            config: Every(Duration::from_secs(1)),
            passes: passes.clone(),
            stop: stop.clone(),
        };
        run(Box::new(service), stop).await;
        assert_eq!(passes.load(Ordering::SeqCst), 3);
    }
}
