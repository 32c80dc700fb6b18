//! The embedded SQLite store of the `job` framework: [`SqliteStore`] implements
//! [`job_core::Store`] on sqlx's SQLite driver, in one database file (WAL mode). It owns its
//! migrations, every SQL statement (one file each under `src/sql/`) and in-process wake-ups,
//! and no policy.
//!
//! It is for one machine: a desktop tool, a CLI, a small service, tests. Writers are
//! serialized (SQLite has one writer at a time), so a worker's claims, heartbeats and
//! finalizes queue behind each other and behind the application's own write transactions.
//! Several processes may share one file; they find each other's new jobs by polling.
//!
//! Enqueue through a connection ([`enqueue()`], [`enqueue_many`], or job-core's typed
//! `Enqueue` and the `#[job]` helpers through [`SqliteBackend`]'s executors) to make a job
//! part of your own transaction, and [`complete_in`] to complete one in a handler's own
//! transaction.

mod admin;
mod busy;
mod enqueue;
mod error;
mod history;
mod lease;
mod listen;
mod maintenance;
mod migrate;
mod row;
mod sql;
mod steps;
mod store;
mod text;
mod time;
mod writer;

pub use enqueue::{enqueue, enqueue_many, SqliteBackend};
pub use error::Error;
pub use listen::EVERY_QUEUE;
pub use migrate::{migrate, Migration, MIGRATIONS};
pub use steps::complete_in;
pub use store::{SqliteStore, BUSY_TIMEOUT, MAX_DEDICATED_CONNECTIONS};

#[cfg(test)]
mod tests {
    use job_core::{ClaimRequest, NewJob, Store};

    use crate::SqliteStore;

    fn is_send<T: Send>(_: T) {}

    /// The worker and the conformance suite spawn these futures: each must be `Send` for any
    /// lifetime, which sqlx's executor bounds make easy to break.
    #[allow(dead_code)]
    fn store_futures_are_send(s: SqliteStore) {
        let claim = ClaimRequest {
            queue: String::new(),
            kinds: vec![],
            limit: 1,
            worker_id: String::new(),
        };
        is_send(SqliteStore::open("x"));
        is_send(s.migrate());
        is_send(s.enqueue(NewJob::new("a", "{}")));
        is_send(s.claim(&claim));
        is_send(s.heartbeat(&[]));
        is_send(s.finalize(&[]));
        is_send(s.release(&[]));
        is_send(s.rescue_expired(1));
        is_send(s.expire(1));
        is_send(s.get(1));
    }
}
