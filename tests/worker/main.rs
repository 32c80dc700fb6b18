//! End-to-end tests of the worker runtime against real PostgreSQL.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod drain;
mod drop_panics;
mod durations;
mod leases;
mod many_workers;
mod outage;
mod outcomes;
mod prefetch;
mod rescue_batch;
mod schema;
mod shutdown;
mod transactions;
