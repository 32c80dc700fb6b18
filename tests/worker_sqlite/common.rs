//! `tests/common` over SQLite: the same jobs and helpers, and a [`Harness`] on a fresh
//! SQLite file instead of a PostgreSQL database.
#![allow(dead_code, unreachable_pub)]

#[path = "../common/mod.rs"]
mod shared;

use job::{JobId, JobRow, JobState, SqliteStore};
use job_core::WorkerBuilder;
pub use shared::*;

/// Starts a worker over a fresh SQLite file and returns everything a test needs.
pub struct Harness {
    pub db: job_testkit::TestSqlite,
    pub store: SqliteStore,
    pub ledger: Ledger,
}

impl Harness {
    pub async fn new() -> Harness {
        let db = job_testkit::TestSqlite::new().await;
        let store = db.store();
        Harness {
            db,
            store,
            ledger: Ledger::default(),
        }
    }

    pub fn worker(&self) -> WorkerBuilder<SqliteStore> {
        worker(&self.store, &self.ledger).register::<SlowRetry>()
    }

    pub async fn row(&self, id: JobId) -> JobRow {
        row(&self.store, id).await
    }

    pub async fn reaches(&self, id: JobId, state: JobState) -> JobRow {
        reaches(&self.store, id, state).await
    }
}
