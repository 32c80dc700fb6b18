//! The worker runtime: fetchers claim jobs into free slots, executors run them, one heartbeat
//! renews every lease, a completer writes outcomes in batches, and the rescuer recovers expired
//! leases. Shutdown drains: stop claiming, wait, release what is left.

mod builder;
mod completer;
mod config;
mod executor;
mod fetcher;
mod heartbeat;
mod inflight;
mod run;
mod stats;

pub use builder::{Worker, WorkerBuilder};
pub use config::WorkerConfig;
pub use run::{DrainReport, WorkerHandle};
pub use stats::WorkerStats;
