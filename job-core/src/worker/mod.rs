//! The worker runtime: fetchers claim jobs into free slots, executors run them, the lease
//! keeper (on a thread and connections of its own) renews every lease and fences, a completer
//! writes outcomes in batches, and the rescuer recovers expired leases. Shutdown drains: stop
//! claiming, wait, stop what is left and wait for its code to end, release.

mod bound;
mod builder;
mod completer;
mod config;
mod deadline;
mod executor;
mod fetcher;
mod gauges;
mod inflight;
mod keeper;
mod run;
mod shared;
mod signal;
mod stats;

pub use builder::{ConnectionBudget, Worker, WorkerBuilder};
pub(crate) use config::too_short;
pub use config::{Prefetch, WorkerConfig, MIN_INTERVAL, MIN_LEASE};
pub use run::{DrainReport, WorkerHandle, RELEASE_TIMEOUT};
pub use signal::shutdown_signal;
pub use stats::WorkerStats;
