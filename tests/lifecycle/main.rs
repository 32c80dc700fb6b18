//! End-to-end tests of the job lifecycle against real PostgreSQL: unique jobs, cancellation,
//! deadlines, dead letters, periodic jobs, pauses, pruning, per-kind concurrency limits,
//! metadata and stats.

#[path = "../common/mod.rs"]
mod common;

mod support;

mod bulk_doors;
mod cancel;
mod compensation;
mod concurrency;
mod dead_letters;
mod deadlines;
mod dependencies;
mod flow;
mod job_rows;
mod macros;
mod metadata;
mod ordering;
mod pauses;
mod pending_door;
mod periodic;
mod pruning;
mod unique;
