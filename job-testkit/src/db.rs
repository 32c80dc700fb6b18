//! A fresh, migrated PostgreSQL database per test.
//!
//! The server is the one `DATABASE_URL` names, else `postgres://postgres@127.0.0.1:5432/test`;
//! that database is only used as the admin connection. The first test to need it builds a
//! template database `job_tpl_<hash of the migrations>` (guarded by an advisory lock, so test
//! processes racing each other build it once), and every [`TestDb`] is a copy of it:
//! `CREATE DATABASE job_test_<random> TEMPLATE job_tpl_<hash>`, which is fast.

use std::time::Duration;

use job_postgres::{PgStore, MIGRATIONS};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgConnection, PgPool};

/// The admin database when `DATABASE_URL` is not set.
const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Connections in each test database's pool at most: enough for the concurrency tests.
const POOL_SIZE: u32 = 12;

/// A throwaway database with the `job` schema migrated. Dropped by [`TestDb::close`], or on
/// a best-effort basis when the value is dropped (a panicking test leaves nothing behind).
#[derive(Debug)]
pub struct TestDb {
    name: String,
    admin: PgConnectOptions,
    options: PgConnectOptions,
    pool: PgPool,
    dropped: bool,
}

impl TestDb {
    /// Creates a fresh database from the migrated template.
    ///
    /// # Panics
    ///
    /// When no PostgreSQL server answers (the message says how to start one) or any setup
    /// statement fails.
    pub async fn new() -> TestDb {
        let admin = admin_options();
        let mut conn = connect_admin(&admin).await;
        let template = ensure_template(&mut conn, &admin).await;
        let name = format!("job_test_{}", uuid::Uuid::new_v4().simple());
        let create = format!("CREATE DATABASE {name} TEMPLATE {template}");
        conn.execute(create.as_str())
            .await
            .unwrap_or_else(|e| panic!("could not create test database {name}: {e}"));
        let _ = conn.close().await;
        let options = admin.clone().database(&name);
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .acquire_timeout(Duration::from_secs(30))
            .connect_lazy_with(options.clone());
        TestDb {
            name,
            admin,
            options,
            pool,
            dropped: false,
        }
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A URL for it, for code that connects by itself.
    pub fn url(&self) -> String {
        self.options.to_url_lossy().to_string()
    }

    /// Options to connect to it.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.options.clone()
    }

    /// The pool to it (shared; clone it freely).
    pub fn pool(&self) -> PgPool {
        self.pool.clone()
    }

    /// A store on its pool.
    pub fn store(&self) -> PgStore {
        PgStore::new(self.pool.clone())
    }

    /// Closes the pool and drops the database.
    ///
    /// # Panics
    ///
    /// When the drop fails.
    pub async fn close(mut self) {
        self.dropped = true;
        // Closing waits for checked-out connections; one a test leaked (a transaction left
        // open, a listener still running) must not hang it: the drop below forces them off.
        let _ = tokio::time::timeout(Duration::from_secs(5), self.pool.close()).await;
        drop_database(&self.admin, &self.name)
            .await
            .unwrap_or_else(|e| panic!("could not drop test database {}: {e}", self.name));
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        if self.dropped {
            return;
        }
        // Drop runs outside async (or inside a runtime that must not be blocked on itself):
        // do the drop on a thread of its own with a small runtime, and wait for it.
        let admin = self.admin.clone();
        let name = std::mem::take(&mut self.name);
        let dropper = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(drop_database(&admin, &name)).err()
        });
        if let Ok(Some(error)) = dropper.join() {
            eprintln!("job-testkit: could not drop a test database: {error}");
        }
    }
}

fn admin_options() -> PgConnectOptions {
    let url = std::env::var("DATABASE_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    url.parse::<PgConnectOptions>()
        .unwrap_or_else(|e| panic!("DATABASE_URL is not a PostgreSQL URL ({url}): {e}"))
}

async fn connect_admin(admin: &PgConnectOptions) -> PgConnection {
    match admin.connect().await {
        Ok(conn) => conn,
        Err(e) => panic!(
            "no PostgreSQL at {}:{} ({e}): start one with `pg_ctlcluster 15 main start` \
             or set DATABASE_URL to a server this test may create databases on",
            admin.get_host(),
            admin.get_port()
        ),
    }
}

/// Builds the template for the current migrations once, under an advisory lock on the admin
/// database, and returns its name.
async fn ensure_template(conn: &mut PgConnection, admin: &PgConnectOptions) -> String {
    let template = format!("job_tpl_{:016x}", migrations_hash());
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        panic!("could not {what} template database {template}: {e}")
    };
    conn.execute("SELECT pg_advisory_lock(hashtextextended('job_testkit.template', 0))")
        .await
        .unwrap_or_else(|e| fail("lock", &e));
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&template)
            .fetch_one(&mut *conn)
            .await
            .unwrap_or_else(|e| fail("look up", &e));
    if !exists {
        // Build under a temporary name and rename when migrated, so a crash mid-build never
        // leaves a half-migrated template behind.
        let building = format!("{template}_building");
        let build = async {
            conn.execute(format!("DROP DATABASE IF EXISTS {building} WITH (FORCE)").as_str())
                .await?;
            conn.execute(format!("CREATE DATABASE {building}").as_str())
                .await?;
            let pool = PgPoolOptions::new()
                .max_connections(1)
                .connect_with(admin.clone().database(&building))
                .await?;
            let migrated = job_postgres::migrate(&pool).await;
            pool.close().await;
            migrated?;
            conn.execute(format!("ALTER DATABASE {building} RENAME TO {template}").as_str())
                .await?;
            Ok::<_, Box<dyn std::error::Error>>(())
        };
        build.await.unwrap_or_else(|e| fail("build", &*e));
    }
    conn.execute("SELECT pg_advisory_unlock(hashtextextended('job_testkit.template', 0))")
        .await
        .unwrap_or_else(|e| fail("unlock", &e));
    template
}

async fn drop_database(admin: &PgConnectOptions, name: &str) -> Result<(), sqlx::Error> {
    let mut conn = admin.connect().await?;
    conn.execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
        .await?;
    conn.close().await
}

/// FNV-1a over every migration: stable across builds and Rust versions, so one template
/// serves every test process until a migration changes.
fn migrations_hash() -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for migration in MIGRATIONS {
        let version = migration.version.to_le_bytes();
        for byte in version
            .iter()
            .chain(migration.name.as_bytes())
            .chain(migration.sql.as_bytes())
        {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}
