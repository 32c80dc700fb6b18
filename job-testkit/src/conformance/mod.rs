//! The store conformance suite: every property of the [`Store`](job_core::Store) contract, as
//! tests any backend runs unchanged.
//!
//! The suite is what defines the contract. Each test takes a fresh, empty store from a
//! [`StoreFactory`] and uses only the `Store` trait (and, for poison and versions, the worker
//! runtime over it): no SQL, no backend internals, no clock but the store's own. Times are
//! shown without comparing clocks: a lease of 50 ms has expired once the test has slept
//! longer than that after the claim; a run time is checked against the row's `created_at`.
//!
//! The contracts, one test each, are documented on the test functions in the modules below:
//! [`enqueue`] (rows as given, scheduling), [`claim`] (order by priority then run time then
//! id, limits, queues, unknown kinds, versions, concurrency limits, exclusivity under eight
//! concurrent claimers), [`finalize`] (each outcome's row, the guard on the token),
//! [`heartbeat`] (renewal, lost leases), [`rescue`] (expired leases only, release),
//! [`unique`] (keys and their scopes, replace, the typed duplicate, concurrent enqueues),
//! [`lifecycle`] (deadlines, pauses, cancel, snooze counts, prune, expire), [`steps`]
//! (durable step outputs under the lease), [`admin`] (list, redrive, purge, stats),
//! [`flow`] (rate limits and circuit breakers),
//! [`wakeups`] (a listener woken by an enqueue or a release) and [`worker`] (unknown kinds,
//! poison payloads, payload versions and upgrades, the snooze limit). The store must
//! implement [`Admin`](job_core::Admin) too.
//!
//! # Running it
//!
//! A backend's test file is one call. PostgreSQL's (`tests/conformance_pg.rs` in the `job`
//! workspace) passes [`PgFactory`](crate::PgFactory), a [`TestDb`](crate::TestDb) per test;
//! SQLite's (`tests/conformance_sqlite.rs`) passes [`SqliteFactory`](crate::SqliteFactory), a
//! [`TestSqlite`](crate::TestSqlite) per test. Another backend passes its own factory, or a
//! closure making a fresh store:
//!
//! ```no_run
//! #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
//! async fn sqlite_store_passes_the_conformance_suite() {
//!     job_testkit::conformance::run(job_testkit::SqliteFactory).await;
//! }
//! ```
//!
//! Tests run eight at a time, each on its own store, and a failure names the test and its
//! message after all have run. To run some of them, set `JOB_CONFORMANCE` to part of their
//! names (`JOB_CONFORMANCE=rescue:: cargo test --test conformance_pg`), or call
//! [`run_one`] with one name from [`names`].

pub mod admin;
pub mod claim;
pub mod enqueue;
mod factory;
pub mod finalize;
pub mod flow;
pub mod heartbeat;
mod jobs;
pub mod lifecycle;
pub mod ordering;
pub mod rescue;
mod runner;
pub mod steps;
mod support;
pub mod unique;
pub mod wakeups;
pub mod worker;

pub use factory::StoreFactory;
pub use runner::{names, run, run_one, FILTER_VAR};
