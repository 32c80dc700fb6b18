//! Testing tools for applications built on `job`, and for `job` itself.
//!
//! - [`TestDb`]: a fresh, migrated PostgreSQL database per test, dropped afterwards.
//! - [`perform`] / [`Inline`]: run one job's handler inline and get the outcome a worker would
//!   write.
//! - [`Faults`]: crash an execution at a named point (after claim, before or after perform,
//!   before or after finalize, at heartbeat) as a killed process would.
//! - [`OutageStore`]: make every store call fail or stall for a while (a database outage).

mod db;
mod faults;
mod outage;
mod perform;

pub use db::TestDb;
pub use faults::{Crash, Faults, Point};
pub use outage::OutageStore;
pub use perform::{perform, Inline};
