//! `job`: durable background jobs on PostgreSQL.
//!
//! Annotate an async function with `#[job(...)]`, enqueue it through the generated typed helper
//! (inside your own transaction when you want), and run a [`Worker`] that claims jobs with
//! fenced leases. See the README for the guarantees and the concepts.
//!
//! This crate holds no logic: it re-exports `job-core`, `job-macros` and `job-postgres`.

pub use job_core::maintenance::{Periodic, PrunerConfig, SchedulerConfig};
pub use job_core::worker::{
    ConnectionBudget, Worker, WorkerBuilder, WorkerConfig, WorkerHandle, WorkerStats,
};
pub use job_core::{
    Admin, Cancelled, Deadline, JobFilter, OnDuplicate, Pause, Redriven, StateCount, Stats, Unique,
    UniqueScope,
};
pub use job_core::{
    AttemptError, AttemptInfo, Backoff, BuildError, EnqueueError, EnqueueOptions, ErrorClass,
    Extensions, Failure, Fault, FaultInjector, FaultPoint, Job, JobContext, JobError, JobId,
    JobOptions, JobRow, JobState, Lease, NewJob, Outcome, Release, RunAt, StopReason, Store,
    StoreError, MAX_ERROR_HISTORY, MAX_ERROR_MESSAGE, MAX_STEP_OUTPUT,
};
pub use job_core::{AttemptHooks, DEFAULT_MAX_SNOOZES};
pub use job_macros::job;
pub use job_postgres::complete_in;
pub use job_postgres::{pool_options, Enqueue, PgStore, TenantAdmin};

/// The names most programs need: `use job::prelude::*;`.
pub mod prelude {
    pub use crate::{
        job, Admin, Enqueue, Job, JobContext, JobError, JobId, PgStore, Store, Worker,
    };
}

/// Paths the `#[job]` macro's generated code uses. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use chrono;
    pub use serde;
    pub use serde_json;
    pub use sqlx::PgExecutor;
}
