//! Crash faults at every named point and store outages: after recovery every job ends in
//! exactly one terminal state, none is lost, none is finalized twice, and no two executions of
//! a job ever overlap.
#![allow(unreachable_pub)]

/// The store the tests run against: PostgreSQL here, SQLite in `tests/chaos_sqlite`.
mod backend {
    pub type Backend = job::PgStore;
    pub type Guard = job_testkit::TestDb;

    pub async fn fresh() -> (Backend, Guard) {
        let db = job_testkit::TestDb::new().await;
        (db.store(), db)
    }
}

mod blackhole;
mod faults;
mod outage;
#[path = "../common/silence.rs"]
mod silence;
mod support;
