//! The PostgreSQL store of the `job` framework: [`PgStore`] implements
//! [`job_core::Store`] on sqlx. It owns the migrations (schema `job`), every SQL statement
//! (one file each under `src/sql/`), LISTEN/NOTIFY wake-ups and the bulk insert, and no policy.
//!
//! Enqueue through any executor ([`enqueue()`], or job-core's typed `Enqueue` through
//! [`PgBackend`]'s executors) to make a job part of your own transaction, and [`complete_in`] to complete one in a handler's own transaction.

mod admin;
mod complete;
mod enqueue;
mod error;
mod inspect;
mod lease;
mod listen;
mod migrate;
mod migrate_watch;
mod pool;
mod report;
mod row;
mod sql;
mod steps;
mod store;
mod summary;

pub use admin::TenantAdmin;
pub use complete::complete_in;
pub use enqueue::{dependencies_of, enqueue, enqueue_many, enqueue_with_dependencies, PgBackend};
pub use error::Error;
pub use inspect::{
    Check, Overview, Page, PageRequest, QueueOverview, ShowSteps, ShownStep, ShownSteps,
    StepRecord, OVERVIEW_QUEUES,
};
pub use listen::CHANNEL;
pub use listen::LISTEN_CHECK;
pub use migrate::{
    migrate, migrate_with_idle_limit, script as schema_script, Migration, MAX_MIGRATE_IDLE_LIMIT,
    MIGRATE_IDLE_LIMIT, MIGRATIONS, MIN_MIGRATE_IDLE_LIMIT,
};
pub use migrate_watch::MigrationGaveUp;
pub use pool::{pool_options, setup_session, ACQUIRE_TIMEOUT, POOL_CHECK_TIMEOUT};
pub use store::PgStore;
pub use summary::{JobSummary, LastError, SUMMARY_CLASS_CHARS, SUMMARY_MESSAGE_CHARS};
