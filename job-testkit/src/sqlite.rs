//! A fresh SQLite database per test: a migrated file in a temporary directory.

use job_sqlite::SqliteStore;
use tempfile::TempDir;

use crate::conformance::StoreFactory;

/// A migrated SQLite database in a temporary directory of its own, deleted on drop.
#[derive(Debug)]
pub struct TestSqlite {
    store: SqliteStore,
    dir: TempDir,
}

impl TestSqlite {
    /// Creates the directory and the database file (`job.db`) and migrates it.
    ///
    /// # Panics
    ///
    /// When the directory or the database cannot be made.
    pub async fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("job-test-")
            .tempdir()
            .expect("a temporary directory for a test database");
        let store = SqliteStore::open(dir.path().join("job.db"))
            .await
            .expect("a fresh sqlite database");
        TestSqlite { store, dir }
    }

    /// A handle on the store (cheap: the pool is shared).
    pub fn store(&self) -> SqliteStore {
        self.store.clone()
    }

    /// The store's pool, for the test's own statements and transactions (as
    /// `TestDb::pool`): enqueue in a transaction of the application's, read its tables.
    pub fn pool(&self) -> sqlx::SqlitePool {
        self.store.pool().clone()
    }

    /// The database file.
    pub fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("job.db")
    }

    /// Closes the store's pool, then deletes the directory.
    pub async fn close(self) {
        self.store.pool().close().await;
        drop(self.dir);
    }
}

/// The [`StoreFactory`] of [`SqliteStore`]: a [`TestSqlite`] per test.
///
/// ```no_run
/// #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
/// async fn sqlite_store_passes_the_conformance_suite() {
///     job_testkit::conformance::run(job_testkit::SqliteFactory).await;
/// }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SqliteFactory;

impl StoreFactory for SqliteFactory {
    type Store = SqliteStore;
    type Guard = TestSqlite;

    async fn create(&self) -> (SqliteStore, TestSqlite) {
        let db = TestSqlite::new().await;
        (db.store(), db)
    }

    async fn dispose(&self, db: TestSqlite) {
        db.close().await;
    }
}
