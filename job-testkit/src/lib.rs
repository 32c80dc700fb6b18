//! Testing tools for applications built on `job`, and for `job` itself.
//!
//! - [`TestDb`]: a fresh, migrated PostgreSQL database per test, dropped afterwards;
//!   [`TestSqlite`]: a fresh, migrated SQLite file per test. [`PrivateCluster`]: a PostgreSQL
//!   cluster of the test's own, to stop and restart under running workers.
//! - [`perform`] / [`Inline`]: run one job's handler inline and get the outcome a worker would
//!   write.
//! - [`Faults`]: crash an execution at a named point (after claim, before or after perform,
//!   before or after a durable step, before or after finalize, at heartbeat) as a killed
//!   process would.
//! - [`enqueued`], [`assert_enqueued`], [`assert_enqueued_with`] ([`Expect`]: args, queue,
//!   priority, run time, tags), [`refute_enqueued`]: what the code under test enqueued, through
//!   the pool or inside its open transaction.
//! - [`Drain`]: run every due job of a queue in the test's own task and get each outcome, on
//!   PostgreSQL or SQLite ([`TestStore`]).
//! - [`TestWorker::for_tests`]: short leases and fast rescues for a worker a test starts, and
//!   [`rescue_now`].
//! - [`wait_for`] a job's state, [`wait_until_idle`] for a queue.
//! - [`OutageStore`]: make every store call fail or stall for a while (a database outage).

mod backend;
pub mod conformance;
#[cfg(feature = "postgres")]
mod db;
mod drain;
mod enqueued;
mod faults;
mod outage;
mod perform;
mod sqlite;
mod wait;
mod worker;

pub use backend::TestStore;
#[cfg(feature = "postgres")]
pub use db::{PgFactory, PrivateCluster, StopMode, TestDb};
pub use drain::{Drain, Drained};
pub use enqueued::{
    assert_enqueued, assert_enqueued_with, enqueued, refute_enqueued, EnqueuedJob, Expect,
    ReadJobs, StoredJob,
};
pub use faults::{Crash, Faults, Point};
pub use outage::{Outage, OutageStore};
pub use perform::{perform, Inline, StepMemory};
pub use sqlite::{SqliteFactory, TestSqlite};
pub use wait::wait_until_idle;
pub use wait::{wait_for, WAIT};
pub use worker::{rescue_now, TestWorker, TEST_LEASE};

/// The names most application tests use: `use job_testkit::prelude::*;`.
pub mod prelude {
    #[cfg(feature = "postgres")]
    pub use crate::TestDb;
    pub use crate::{
        assert_enqueued, assert_enqueued_with, enqueued, perform, refute_enqueued, rescue_now,
        wait_for, wait_until_idle, Drain, Expect, Faults, Inline, Outage, OutageStore, Point,
        StepMemory, TestSqlite, TestWorker,
    };
}
