//! `tests/chaos` against `SqliteStore`: crash faults at every named point and store outages,
//! the same test files over a fresh SQLite file per test. After recovery every job ends in
//! exactly one terminal state, none is lost, none is finalized twice, and no two executions
//! of a job ever overlap.
#![allow(unreachable_pub)]

/// The store the tests run against.
mod backend {
    pub type Backend = job::SqliteStore;
    pub type Guard = job_testkit::TestSqlite;

    pub async fn fresh() -> (Backend, Guard) {
        let db = job_testkit::TestSqlite::new().await;
        (db.store(), db)
    }
}

#[path = "../chaos/faults.rs"]
mod faults;
#[path = "../chaos/outage.rs"]
mod outage;
#[path = "../chaos/support.rs"]
mod support;
