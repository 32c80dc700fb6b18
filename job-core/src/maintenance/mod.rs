//! Background services every worker runs beside its fetchers, each one file: the stager of due
//! jobs, the rescuer of expired leases, the pruner (and expirer, and vacuum), the scheduler of
//! periodic jobs.
//! [`services`] is the list the supervisor runs; a new service is a file with its config
//! (`Default` and `validate`), its `run_once` and its [`Service`] impl, plus one entry there.

mod pruner;
mod reporter;
mod rescuer;
mod scheduler;
mod service;
mod stager;
mod ticker;

pub use pruner::{Pruned, Pruner, PrunerConfig};
pub use reporter::{Reporter, ReporterConfig};
pub use rescuer::{Rescuer, RescuerConfig};
pub use scheduler::{Periodic, Scheduled, Scheduler, SchedulerConfig};
pub(crate) use service::{run, Service};
pub use stager::{Stager, StagerConfig};
pub(crate) use ticker::Ticker;

use std::time::Duration;

use crate::attempt::registry::Registry;
use crate::contract::store::Store;
use crate::worker::WorkerConfig;

/// The rescuer's settings for a worker whose shortest lease is `shortest_lease`.
fn rescuer_config(config: &WorkerConfig, shortest_lease: Duration) -> RescuerConfig {
    let mut rescuer = config.rescuer;
    // A rescued job comes back within half a lease of its expiry, whatever the interval.
    rescuer.interval = rescuer
        .interval
        .min(shortest_lease / 2)
        .max(crate::MIN_INTERVAL);
    // After a clock jump the live holders renew within their heartbeat period: the hold is at
    // least twice this worker's own (a third of its shortest lease, unless set), which with
    // long leases only (15 minutes: a heartbeat every 5) is longer than the 2-minute default,
    // and the rescuer took leases their holders were about to renew.
    let heartbeat = config.heartbeat_interval.unwrap_or(shortest_lease / 3);
    rescuer.after_clock_jump = rescuer
        .after_clock_jump
        .max(heartbeat.saturating_mul(2).min(crate::MAX_DURATION));
    rescuer
}

/// Every maintenance service of a worker over `store`: one entry per service. `shortest_lease`
/// is the shortest lease of the worker's kinds (the rescuer runs at least every half of it).
pub(crate) fn services<S: Store>(
    store: &S,
    config: &WorkerConfig,
    periodic: &[Periodic],
    shortest_lease: Duration,
    registry: &Registry,
) -> Vec<Box<dyn Service>> {
    let owners = registry
        .handlers()
        .filter_map(|h| Some((h.kind().to_owned(), h.options().owner?.to_owned())))
        .collect();
    let rescuer = rescuer_config(config, shortest_lease);
    crate::telemetry::rescues_counted_from_zero();
    let mut stager = config.stager;
    // A due job becomes claimable within a poll interval, as it did when claims read it.
    stager.interval = stager
        .interval
        .min(config.poll_interval)
        .max(crate::MIN_INTERVAL);
    vec![
        Box::new(Stager::new(store.clone(), stager)),
        Box::new(Rescuer::new(store.clone(), rescuer)),
        Box::new(Pruner::new(store.clone(), config.pruner)),
        Box::new(Scheduler::new(
            store.clone(),
            periodic.to_vec(),
            config.scheduler,
        )),
        Box::new(Reporter::new(
            store.clone(),
            config.reporter,
            config.id.clone(),
            owners,
        )),
    ]
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::rescuer_config;
    use super::service::ServiceConfig;
    use crate::worker::WorkerConfig;

    #[test]
    fn the_clock_jump_hold_covers_twice_the_workers_heartbeat_period() {
        let config = WorkerConfig::default();
        // 30 s leases: a heartbeat every 10 s, and the 2-minute default holds.
        let short = rescuer_config(&config, Duration::from_secs(30));
        assert_eq!(short.after_clock_jump, Duration::from_secs(120));
        // 15-minute leases only: a heartbeat every 5 minutes.
        let long = rescuer_config(&config, Duration::from_secs(900));
        assert_eq!(long.after_clock_jump, Duration::from_secs(600));
        // No kind (no lease): never past what validation of a derived config accepts, though
        // past what a given one may say.
        let none = rescuer_config(&config, Duration::MAX);
        assert!(ServiceConfig::validate(&none).is_ok());
        assert!(none.validate().is_err());
    }
}
