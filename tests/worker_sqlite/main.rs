//! The worker runtime's end-to-end tests that need no SQL of their own (`tests/worker`'s
//! outcomes, drain, prefetch and many workers, and `tests/isolation`'s blocking handlers), run
//! against `SqliteStore`: the same test files, over a harness that makes a fresh SQLite file
//! per test.
#![allow(unreachable_pub)]

mod common;

#[path = "../isolation/blocking.rs"]
mod blocking;
#[path = "../isolation/support.rs"]
mod support;

mod connections;
#[path = "../worker/drain.rs"]
mod drain;
mod held;
mod idle_claims;
#[path = "../worker/many_workers.rs"]
mod many_workers;
#[path = "../worker/outcomes.rs"]
mod outcomes;
#[path = "../worker/prefetch.rs"]
mod prefetch;
