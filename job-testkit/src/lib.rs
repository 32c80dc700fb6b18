//! Testing tools for applications built on `job`, and for `job` itself.
//!
//! - [`TestDb`]: a fresh, migrated PostgreSQL database per test, dropped afterwards.
//! - [`perform`] / [`Inline`]: run one job's handler inline and get the outcome a worker would
//!   write.
//! - [`Faults`]: crash an execution at a named point (after claim, before or after perform,
//!   before or after a durable step, before or after finalize, at heartbeat) as a killed
//!   process would.
//! - [`enqueued`], [`assert_enqueued`], [`refute_enqueued`]: what the code under test enqueued.
//! - [`Drain`]: run every due job of a queue in the test's own task and get each outcome.
//! - [`OutageStore`]: make every store call fail or stall for a while (a database outage).

pub mod conformance;
mod db;
mod drain;
mod enqueued;
mod faults;
mod outage;
mod perform;

pub use db::{PgFactory, TestDb};
pub use drain::{Drain, Drained};
pub use enqueued::{assert_enqueued, enqueued, refute_enqueued, EnqueuedJob};
pub use faults::{Crash, Faults, Point};
pub use outage::{Outage, OutageStore};
pub use perform::{perform, Inline, StepMemory};
