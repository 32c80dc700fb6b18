//! A fresh, migrated PostgreSQL database per test, on whichever server the machine offers
//! (see [`TestDb`]); the private fallback cluster is in `db/cluster.rs`.

mod admin;
mod cluster;
mod hold;

pub use cluster::{PrivateCluster, StopMode};

use std::time::Duration;

use job_postgres::{PgStore, MIGRATIONS};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, Executor, PgConnection, PgPool};

use crate::conformance::StoreFactory;

/// The admin database when `DATABASE_URL` is not set.
const DEFAULT_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// Replaces [`DEFAULT_URL`]: the server to try before falling back to a private cluster.
const DEFAULT_URL_VAR: &str = "JOB_TESTKIT_DEFAULT_URL";

/// How long the first connection to a server may take before it counts as not answering.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections in each test database's pool at most: enough for the concurrency tests.
const POOL_SIZE: u32 = 12;

/// A throwaway database with the `job` schema migrated. Dropped by [`TestDb::close`], or on
/// a best-effort basis when the value is dropped (a panicking test leaves nothing behind).
/// A `TestDb` in a `static` (one database shared by a test binary's tests, in a `OnceCell`)
/// is never dropped: Rust runs no destructor of a static, so its database is left on the
/// server (`job_test_<uuid>`; `DROP DATABASE` it, or give each test its own `TestDb`).
///
/// # Which server
///
/// Found once per process, in this order:
///
/// 1. `DATABASE_URL`, when set. It must answer: if it does not, the test fails naming it,
///    and nothing else is tried.
/// 2. The local default, `postgres://postgres@127.0.0.1:5432/test` (or
///    `JOB_TESTKIT_DEFAULT_URL`). A server that answers but refuses (authentication, a
///    missing database) fails the test.
/// 3. When nothing answers there: a private throwaway cluster from the machine's own
///    PostgreSQL binaries (`JOB_TESTKIT_PG_BINDIR`, else `pg_config --bindir`, the newest
///    `/usr/lib/postgresql/*/bin`, `PATH`). It lives in `job-testkit-pg<major>-<user>` under
///    the temporary directory (or `JOB_TESTKIT_CLUSTER_DIR`): `initdb` with trust
///    authentication, then `pg_ctl start` on a free port of 127.0.0.1 only, its unix socket
///    in its data directory, durability off; as the `postgres` user (through `runuser` or
///    `su`) when the tests run as root. Test processes racing to start it take turns under
///    a lock file; the first one starts it (a few seconds), the others use it. It is left
///    running for later test runs, until `$(cat <dir>/bindir)/pg_ctl -D <dir>/data stop`
///    or a reboot.
///
/// If none of that works, the panic says what was tried and how to start a server.
///
/// On that server, the first test builds a template database `job_tpl_<hash of the
/// migrations>` (under an advisory lock, so racing processes build it once), and every
/// `TestDb` is a copy of it (`CREATE DATABASE … TEMPLATE …`), which is fast.
///
/// # Restart hold
///
/// `job.rescue_expired` rescues no lease in the first 15 seconds of a server's life
/// (migration 0041: the holders reconnecting after a restart renew first). A test that
/// crashes an execution on a server started a moment before (the private cluster above, a CI
/// job that starts PostgreSQL just before `cargo test`) would see its job rescued only after
/// that, past [`wait_for`](crate::wait_for)'s 10 seconds. So the first `TestDb` of a process
/// reads the hold from the rescue function and the server's start from
/// `job.server_started_at()`, and when the server is younger than the hold, waits the rest
/// of it once (saying so on stderr); later ones do not wait. A server restarted after that
/// (a [`PrivateCluster`] a test restarts) holds its rescues again, as in production.
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
    /// The server is found once per process (see [which server](TestDb#which-server)); the
    /// first test on a machine without one waits a few seconds for the private cluster. On a
    /// server that started less than 15 seconds ago, the first `TestDb` of the process also
    /// waits out the [restart hold](TestDb#restart-hold), saying so on stderr.
    ///
    /// # Panics
    ///
    /// When no PostgreSQL server answers and no private cluster can be started (the message
    /// says what was tried and how to start one), or any setup statement fails or does not
    /// finish in time: a connection (30 s, and 30 s more while the server has too many
    /// clients), the template's lock held by another session (2 minutes; the message names
    /// its server process), `CREATE DATABASE` (60 s).
    pub async fn new() -> TestDb {
        let admin = admin_options().await;
        let mut conn = connect_admin(&admin).await;
        let template = ensure_template(&mut conn, &admin).await;
        let name = format!("job_test_{}", uuid::Uuid::new_v4().simple());
        let create = format!("CREATE DATABASE {name} TEMPLATE {template}");
        admin::bounded(
            admin::STATEMENT_TIMEOUT,
            "CREATE DATABASE",
            conn.execute(create.as_str()),
        )
        .await
        .unwrap_or_else(|e| panic!("could not create test database {name}: {e}"));
        let _ = conn.close().await;
        let options = admin.clone().database(&name);
        hold::wait_out(&options, &at(&admin)).await;
        // The application's pool as the README advises: never handed out inside a transaction.
        let pool = job_postgres::pool_options()
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

    /// Closes the pool and drops the database. A server at its connection limit (53300) is
    /// tried again for up to 30 s; the drop itself may take 60 s.
    ///
    /// # Panics
    ///
    /// When the drop fails.
    pub async fn close(mut self) {
        self.dropped = true;
        // Closing waits for checked-out connections; one a test leaked (a transaction left
        // open, a listener still running) must not hang it: the drop below forces them off.
        let _ = tokio::time::timeout(Duration::from_secs(5), self.pool.close()).await;
        admin::drop_database(&self.admin, &self.name)
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
            runtime.block_on(admin::drop_database(&admin, &name)).err()
        });
        if let Ok(Some(error)) = dropper.join() {
            eprintln!("job-testkit: could not drop a test database: {error}");
        }
    }
}

/// A [`StoreFactory`] for the conformance suite: each store is a [`PgStore`] on its own
/// [`TestDb`], dropped when the test ends.
///
/// ```no_run
/// #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
/// async fn pg_store_passes_the_conformance_suite() {
///     job_testkit::conformance::run(job_testkit::PgFactory).await;
/// }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct PgFactory;

impl StoreFactory for PgFactory {
    type Store = PgStore;
    type Guard = TestDb;

    async fn create(&self) -> (PgStore, TestDb) {
        let db = TestDb::new().await;
        (db.store(), db)
    }

    async fn dispose(&self, db: TestDb) {
        db.close().await;
    }
}

/// The admin connection's options, found once per process. A failure is remembered too:
/// every later test fails at once with it, rather than trying again (a server that does not
/// answer costs the probe's 10 s each time).
async fn admin_options() -> PgConnectOptions {
    static SERVER: tokio::sync::OnceCell<Result<PgConnectOptions, String>> =
        tokio::sync::OnceCell::const_new();
    let mut first = false;
    let found = SERVER
        .get_or_init(|| {
            first = true;
            find_server()
        })
        .await;
    match found {
        Ok(options) => options.clone(),
        Err(why) if first => panic!("{why}"),
        Err(why) => panic!("{why} (found by this process's first TestDb; not tried again)"),
    }
}

/// `DATABASE_URL` if set (and it must answer), else the local default if it answers, else
/// the private cluster.
async fn find_server() -> Result<PgConnectOptions, String> {
    if let Some(url) = std::env::var("DATABASE_URL").ok().filter(|u| !u.is_empty()) {
        let options = parse_url("DATABASE_URL", &url)?;
        if let Err(e) = probe(&options).await {
            return Err(format!(
                "DATABASE_URL names a PostgreSQL server at {} that cannot be used ({e}): start \
                 it, point DATABASE_URL to a server this test may create databases on, or \
                 unset it to use the local default or a private throwaway cluster",
                at(&options)
            ));
        }
        return Ok(options);
    }
    let (name, url) = match std::env::var(DEFAULT_URL_VAR)
        .ok()
        .filter(|u| !u.is_empty())
    {
        Some(url) => (DEFAULT_URL_VAR, url),
        None => ("the default URL", DEFAULT_URL.to_owned()),
    };
    let default = parse_url(name, &url)?;
    let unreachable = match probe(&default).await {
        Ok(()) => return Ok(default),
        Err(Probe::Unreachable(e)) => e,
        Err(e) => {
            return Err(format!(
                "the PostgreSQL server at {} ({name}) cannot be used ({e}): set DATABASE_URL to a \
             server this test may create databases on",
                at(&default)
            ))
        }
    };
    let started = tokio::task::spawn_blocking(cluster::ensure)
        .await
        .unwrap_or_else(|e| Err(format!("starting it panicked: {e}")));
    let port = started.map_err(|why| {
        format!(
            "no PostgreSQL answers at {} ({name}: {unreachable}), and no private throwaway \
             cluster could be started: {why}. Start a server (`pg_ctlcluster 15 main start`, \
             `pg_ctl -D <datadir> start`) or set DATABASE_URL to a server this test may \
             create databases on",
            at(&default)
        )
    })?;
    let private = PgConnectOptions::new()
        .host("127.0.0.1")
        .port(port)
        .username(cluster::SUPERUSER)
        .database("postgres");
    if let Err(e) = probe(&private).await {
        return Err(format!(
            "the private PostgreSQL cluster at {} was started but cannot be used: {e}",
            at(&private)
        ));
    }
    Ok(private)
}

fn parse_url(name: &str, url: &str) -> Result<PgConnectOptions, String> {
    url.parse::<PgConnectOptions>()
        .map_err(|e| format!("{name} is not a PostgreSQL URL ({url}): {e}"))
}

fn at(options: &PgConnectOptions) -> String {
    format!("{}:{}", options.get_host(), options.get_port())
}

/// Why a server could not be used.
#[derive(Debug)]
enum Probe {
    /// Nothing answers: refused, unreachable or silent.
    Unreachable(String),
    /// Something answered and refused (authentication, a missing database, ...).
    Refused(sqlx::Error),
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Probe::Unreachable(e) => f.write_str(e),
            Probe::Refused(e) => write!(f, "{e}"),
        }
    }
}

async fn probe(options: &PgConnectOptions) -> Result<(), Probe> {
    match tokio::time::timeout(PROBE_TIMEOUT, options.connect()).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(sqlx::Error::Io(e))) => Err(Probe::Unreachable(e.to_string())),
        Ok(Err(e)) => Err(Probe::Refused(e)),
        Err(_) => Err(Probe::Unreachable(format!(
            "no answer within {PROBE_TIMEOUT:?}"
        ))),
    }
}

async fn connect_admin(admin: &PgConnectOptions) -> PgConnection {
    admin::connect(admin).await.unwrap_or_else(|e| {
        panic!(
            "could not connect to the PostgreSQL server at {} any more: {e}",
            at(admin)
        )
    })
}

/// Builds the template for the current migrations once, under an advisory lock on the admin
/// database, and returns its name.
async fn ensure_template(conn: &mut PgConnection, admin: &PgConnectOptions) -> String {
    let template = format!("job_tpl_{:016x}", migrations_hash());
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        panic!("could not {what} template database {template}: {e}")
    };
    admin::lock_template(conn, admin::TEMPLATE_LOCK_WAIT)
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
            // A database with a session left cannot be renamed (55006), and the rename waits
            // up to 5 s for sessions to end before it says so. The build's closed connection
            // was seen to keep its session open (idle after its last COMMIT) until ended: 20
            // such renames took 106 s on a fresh server. The database is this build's own and
            // nobody else's: end whatever session is left before each rename.
            let rename = format!("ALTER DATABASE {building} RENAME TO {template}");
            let mut tries = 0;
            loop {
                sqlx::query(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                     WHERE datname = $1 AND pid <> pg_backend_pid()",
                )
                .bind(&building)
                .execute(&mut *conn)
                .await?;
                match conn.execute(rename.as_str()).await {
                    Ok(_) => break,
                    Err(sqlx::Error::Database(e))
                        if e.code().as_deref() == Some("55006") && tries < 20 =>
                    {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Ok::<_, Box<dyn std::error::Error>>(())
        };
        build.await.unwrap_or_else(|e| fail("build", &*e));
    }
    admin::unlock_template(conn)
        .await
        .unwrap_or_else(|e| fail("unlock", &e));
    template
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
