//! Background services every worker runs beside its fetchers.

mod pruner;
mod rescuer;
mod scheduler;
mod ticker;

pub use pruner::{Expired, PruneRequest, Pruned, Pruner, PrunerConfig};
pub use rescuer::{Rescuer, RescuerConfig};
pub use scheduler::{Periodic, Scheduled, Scheduler, SchedulerConfig};
pub(crate) use ticker::Ticker;
