//! `job`: durable background jobs on PostgreSQL, or on an embedded SQLite file
//! ([`SqliteStore`]) where there is no server.
//!
//! Annotate an async function with [`#[job(...)]`](macro@job), enqueue it through the
//! generated typed helper inside your own transaction, and run a [`Worker`] that claims jobs
//! with fenced leases: a job survives crashes of the worker, of its process and of its
//! database connection, runs at least once and never twice at once, and is never finalized by
//! a worker that lost its lease.
//!
//! ```toml
//! [dependencies]
//! job = "0.1"
//! serde = { version = "1", features = ["derive"] }
//! tokio = { version = "1", features = ["macros", "rt-multi-thread"] }
//! ```
//!
//! ```no_run
//! use job::prelude::*;
//!
//! /// Sends an invoice email; `?` on any error makes the attempt retryable.
//! #[job(retry = 5, timeout = "2m", queue = "mail")]
//! async fn send_invoice(ctx: JobContext, invoice_id: i64) -> Result<(), JobError> {
//!     let _ = (ctx, invoice_id);
//!     Ok(())
//! }
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     let pool = job::pool_options().connect("postgres://postgres@127.0.0.1/app").await?;
//!     let store = PgStore::new(pool.clone());
//!     // Creates or upgrades the `job` schema (or install it with `psql -f`, see the README).
//!     store.migrate().await?;
//!
//!     // Enqueue inside your own transaction: the job exists only if it commits.
//!     let mut tx = pool.begin().await?;
//!     SendInvoice { invoice_id: 42 }.enqueue(&mut *tx).await?;
//!     tx.commit().await?;
//!
//!     // Run a worker until SIGTERM or ctrl-c, then drain: finish or release what is running.
//!     let worker = Worker::builder(store).register::<SendInvoice>().queue("mail", 10).build()?;
//!     worker.run_until_signal().await;
//!     Ok(())
//! }
//! ```
//!
//! The README covers the guarantees, writing handlers, the exactly-once tools (unique jobs,
//! completing in your transaction, durable steps), the testkit (`job-testkit`), operations and
//! performance. This crate holds no logic: it re-exports `job-core`, `job-macros`,
//! `job-postgres` and `job-sqlite`, so that every type a program touches is named `job::…`.

// Jobs, their options and what can happen to them.
pub use job_core::{
    AttemptError, AttemptInfo, Backoff, Breaker, Compensate, Deadline, Dependency, DependencyMode,
    DependsOn, Discarded, DiscardedError, EnqueueOptions, ErrorClass, Extensions, Failure, Job,
    JobContext, JobError, JobId, JobOptions, JobRow, JobState, NewJob, OnDuplicate, Outcome,
    RateLimit, RunAt, StopReason, Unique, UniqueScope, DEFAULT_MAX_SNOOZES, DEFAULT_PAYLOAD_LIMIT,
    MAX_DURATION, MAX_ERROR_HISTORY, MAX_ERROR_MESSAGE, MAX_LOADED_STEPS, MAX_NAME_LEN,
    MAX_REFUNDED_INTERRUPTIONS, MAX_STEPS, MAX_STEPS_TOTAL, MAX_STEP_NAME, MAX_STEP_OUTPUT,
    MAX_TAGS, MAX_UNIQUE_KEY_LEN,
};
// The rules every door checks names (kinds, queues, tenants, tags) and payloads by.
pub use job_core::{name_problem, payload_problem};
// Telemetry: metrics, traces, progress.
pub use job_core::{
    current_traceparent, describe_metrics, record_enqueued, valid_traceparent, DeadLetterCount,
    MetricInfo, MetricKind, QueueCount, Report, ReportRequest, MAX_PROGRESS, MAX_PROGRESS_MESSAGE,
    METRICS, NO_OWNER, TRACEPARENT_LEN,
};
// Job results.
pub use job_core::{MAX_JSON_DEPTH, MAX_RESULT};
// Errors.
pub use job_core::{BoxError, BuildError, EnqueueError, StepLimit, StoreError};
// The worker and its maintenance services.
pub use job_core::{
    shutdown_signal, ConnectionBudget, DrainReport, Periodic, Prefetch, Pruned, Pruner,
    PrunerConfig, Reporter, ReporterConfig, Rescuer, RescuerConfig, Scheduled, Scheduler,
    SchedulerConfig, Worker, WorkerBuilder, WorkerConfig, WorkerHandle, WorkerStats, MIN_INTERVAL,
    MIN_LEASE, RELEASE_TIMEOUT,
};
// Operating on stored jobs.
pub use job_core::{
    Admin, Cancelled, JobFilter, Pause, PauseEntry, PausedBy, Redriven, StateCount, Stats,
};
// The storage contract, for stores and wrappers of stores.
pub use job_core::{
    AttemptHooks, BoxFuture, BreakerCount, Call, ClaimKind, ClaimRequest, ClaimedJob, Expired,
    Finalize, Finalized, HeartbeatReport, InvalidClaim, InvalidRenewal, Layered, Lease,
    PruneRequest, Release, Renewal, Rescued, RescuedJob, Returned, SchemaLag, Store, StoreLayer,
    StoreSteps, Tripped, Wakeups, HEARTBEAT_BUSY_WAIT,
};
// Fault injection (see `job-testkit`).
pub use job_core::{Fault, FaultInjector, FaultPoint};
pub use job_macros::job;
// Enqueueing through any backend's executor.
pub use job_core::{Batch, BatchIds, Enqueue, EnqueueExecutor, EnqueueMany};
pub use job_postgres::{
    complete_in, enqueue, enqueue_many, pool_options, schema_script, setup_session,
    Error as PgError, MigrationGaveUp, PgBackend, PgStore, TenantAdmin, ACQUIRE_TIMEOUT,
    LISTEN_CHECK, MAX_MIGRATE_IDLE_LIMIT, MIGRATE_IDLE_LIMIT, MIN_MIGRATE_IDLE_LIMIT,
    POOL_CHECK_TIMEOUT,
};
pub use job_sqlite::{Error as SqliteError, SqliteStore};

/// The SQLite backend's functions whose PostgreSQL twins are at the crate root
/// ([`crate::complete_in`], [`crate::enqueue()`], ...), and its
/// executor marker.
pub mod sqlite {
    pub use job_sqlite::{
        complete_in, enqueue, enqueue_many, migrate, Migration, SqliteBackend, BUSY_TIMEOUT,
        EVERY_QUEUE, MAX_DEDICATED_CONNECTIONS, MIGRATIONS,
    };
}
/// The PostgreSQL connection pool the store and your handlers use (sqlx's).
pub use sqlx::PgPool;
/// The SQLite connection pool of a [`SqliteStore`] (sqlx's).
pub use sqlx::SqlitePool;

/// The names most programs and their tests need: `use job::prelude::*;`.
pub mod prelude {
    pub use crate::{
        complete_in, job, Admin, Enqueue, EnqueueError, Job, JobContext, JobError, JobFilter,
        JobId, JobRow, JobState, Outcome, PgPool, PgStore, Store, Worker, WorkerConfig,
    };
}

/// Paths the `#[job]` macro's generated code uses. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use chrono;
    pub use job_core::__KeyWriter as KeyWriter;
    pub use job_core::__set_returned_result as set_returned_result;
    pub use serde;
    pub use serde_json;
    pub use sqlx::PgExecutor;
}
