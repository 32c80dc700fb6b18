//! Background services every worker runs beside its fetchers.

mod pruner;
mod rescuer;
mod scheduler;

pub use pruner::{Expired, PruneRequest, Pruned, Pruner, PrunerConfig};
pub use rescuer::{Rescuer, RescuerConfig};
pub use scheduler::{Periodic, Scheduled, Scheduler, SchedulerConfig};
