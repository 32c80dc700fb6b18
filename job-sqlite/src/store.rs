//! [`SqliteStore`]: the [`Store`] contract on an embedded SQLite database file.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use job_core::{
    ClaimRequest, ClaimedJob, EnqueueError, Expired, Finalize, Finalized, HeartbeatReport, JobId,
    JobRow, Lease, NewJob, PruneRequest, Release, Renewal, Rescued, Store, StoreError, Wakeups,
};
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Connection, Sqlite, SqlitePool, Transaction};
use tokio::sync::{Mutex, OwnedMutexGuard};

use crate::error::Error;
use crate::listen::Notifier;
use crate::writer::Writer;
use crate::{enqueue, lease, maintenance, migrate, row, steps};

/// How long a statement waits for another process's write lock before it fails as busy.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The size the WAL file is cut back to after a checkpoint resets it, in bytes (SQLite's
/// `journal_size_limit`): without one, the WAL file keeps the size of the largest transaction
/// it ever held (a bulk enqueue), for good.
const JOURNAL_SIZE_LIMIT: u64 = 64 * 1024 * 1024;

/// The connections of a store's own pool at most.
const POOL_SIZE: u32 = 8;

/// The most connections a handle made by [`Store::dedicated`] opens, whatever it is asked for.
///
/// Each SQLite connection is a thread of its own (sqlx's) and a few file descriptors, and the
/// file takes one write at a time: a worker's budget of two connections per queue opened one
/// connection for every claim waiting its turn at the write gate (2,010 connections and
/// threads for a worker of 2,000 queues), for nothing, and every such claim stood at the gate
/// ahead of the lease keeper's next heartbeat (an enqueue through the store's pool, which
/// waits at the same gate, beside a worker of 2,000 idle queues: 1.35 s median and 3.1 s at
/// most uncapped, 14 ms and 36 ms capped, in a debug build on 2 CPUs). Capped, those writes
/// wait for a connection instead, in the pool's first-come first-served queue, and at most
/// this many stand at the gate ahead of another handle's write; each write and each read of the
/// store holds one connection and asks for no other while it holds it, so a full pool only
/// makes them wait their turn (`tests/sqlite_store.rs` runs every call a worker makes, twice
/// at once, on a handle of one connection). Sixteen: the writes go one at a time in any
/// case, and a few spare connections let reads (a job's recorded steps, `get`) run beside
/// them while fewer writes than that wait.
pub const MAX_DEDICATED_CONNECTIONS: u32 = 16;

/// The SQLite store: a connection pool on one database file, in WAL mode, and what every
/// handle made from it shares: the in-process wake-ups and the write gate.
///
/// SQLite has one writer at a time. Every write the store makes is one immediate transaction
/// (`BEGIN IMMEDIATE`: the write lock taken by its first statement, so it never has to be
/// upgraded from a stale read), run from begin to commit on the store's own writer thread (so
/// that no handler blocking the application's runtime can stop one while it holds the lock),
/// and the writes of one process, each with its connection, queue on an async gate before they
/// ask for the lock, so they wait in order instead of in SQLite's busy handler. Against
/// writers of other processes sharing the file, each connection waits in the store's busy
/// handler, which tries again every 200 µs for the first 50 ms and every millisecond after
/// (SQLite's own sleeps up to 100 ms between tries, and missed the short gaps between another
/// process's writes for seconds), up to [`BUSY_TIMEOUT`].
///
/// Cloning is cheap (the pool is shared).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    shared: Arc<Shared>,
    payload_limit: usize,
    /// The pool was made by [`Store::dedicated`], so [`Store::close`] closes it.
    dedicated: bool,
}

#[derive(Debug)]
struct Shared {
    options: SqliteConnectOptions,
    notifier: Arc<Notifier>,
    gate: Arc<Mutex<()>>,
    writer: Writer,
    /// The file was in WAL mode when the store opened it: a claim reads whether it has a job
    /// to take before it asks for the write lock ([`SqliteStore::claim`]).
    wal: std::sync::atomic::AtomicBool,
    /// Rows the rescue and expire passes found the database refusing to write, which their
    /// picks pass over ([`RefusedRows`]).
    refused: std::sync::Mutex<RefusedRows>,
    /// The queues whose last claim took jobs: their next claim writes straight away, as they
    /// likely have more (a drain's claims paid the read before for nothing: about 5% of its
    /// rate). Every other queue's claim reads first ([`SqliteStore::claim`]).
    busy_queues: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// The jobs whose rescue or expiry the database refused (a trigger of the application's, a
/// row written raw that breaks a rule): the passes' picks leave them out for
/// [`RefusedRows::RETRY`], then try them again (their cause may be gone). Each pick takes its
/// rows oldest first, and the refused ones stayed first: as many of them as a pass's batch
/// took the whole batch every time, and no other lease of the file was rescued, no other
/// deadline enforced. At most [`RefusedRows::MAX`] are kept (more are tried again sooner).
#[derive(Debug, Default)]
struct RefusedRows {
    ids: Vec<JobId>,
    since: Option<std::time::Instant>,
}

impl RefusedRows {
    const RETRY: Duration = Duration::from_secs(600);
    const MAX: usize = 10_000;

    /// The ids to pass over now, as the JSON array the picks read.
    fn skip(&mut self) -> String {
        if self.since.is_some_and(|t| t.elapsed() >= Self::RETRY) {
            self.ids.clear();
            self.since = None;
        }
        serde_json::to_string(&self.ids).unwrap_or_else(|_| "[]".to_owned())
    }

    fn add(&mut self, refused: Vec<JobId>) {
        if refused.is_empty() {
            return;
        }
        self.since.get_or_insert_with(std::time::Instant::now);
        for id in refused {
            if self.ids.len() < Self::MAX && !self.ids.contains(&id) {
                self.ids.push(id);
            }
        }
    }
}

/// An immediate transaction of the store and its place at the gate.
pub(crate) struct Write {
    pub(crate) tx: Transaction<'static, Sqlite>,
    _gate: OwnedMutexGuard<()>,
}

impl SqliteStore {
    /// The connect options the store uses for the file at `path`: created when missing, WAL
    /// journal, `synchronous = NORMAL` (durable against a crash of the process; a power loss
    /// may undo the last commits: set [`SqliteSynchronous::Full`] to rule that out), foreign
    /// keys on, [`BUSY_TIMEOUT`] (how long the store's busy handler, which every connection
    /// of the store's pools gets in place of SQLite's, waits for another process's write
    /// lock: change it with `busy_timeout`), and `journal_size_limit` 64 MiB: the WAL file,
    /// which grows to hold the largest transaction written between two checkpoints, is cut
    /// back to that size when a checkpoint resets it, instead of keeping its largest size for
    /// good.
    pub fn options(path: impl AsRef<Path>) -> SqliteConnectOptions {
        SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT)
            .pragma("journal_size_limit", JOURNAL_SIZE_LIMIT.to_string())
    }

    /// Opens (creating it when missing) the database file at `path` with
    /// [`options`](Self::options) and brings its schema up to date.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let store = Self::connect_with(Self::options(path)).await?;
        store.migrate().await?;
        Ok(store)
    }

    /// Opens a pool with `options`, without migrating. Every connection it opens carries the
    /// hooks of the in-process wake-ups. A failure names the file ([`Error::File`]).
    pub async fn connect_with(options: SqliteConnectOptions) -> Result<Self, Error> {
        // SQLite opens `:memory:` as a database private to each connection: the store's
        // connections (a pool, the worker's own) would each see an empty one, and every
        // statement but the migrating connection's would fail with "no such table".
        if options.get_filename() == Path::new(":memory:") {
            return Err(Error::Connect(sqlx::Error::Configuration(
                "an in-memory database (`:memory:`) is one per connection, and the store opens \
                 several: use a file (a temporary one for tests, as job_testkit::TestSqlite \
                 makes)"
                    .into(),
            ))
            .in_file(options.get_filename()));
        }
        let writer = Writer::start().map_err(|e| e.in_file(options.get_filename()))?;
        let shared = Arc::new(Shared {
            options,
            notifier: Arc::new(Notifier::new()),
            gate: Arc::new(Mutex::new(())),
            writer,
            wal: std::sync::atomic::AtomicBool::new(false),
            refused: std::sync::Mutex::default(),
            busy_queues: std::sync::Mutex::default(),
        });
        let pool = pool_options(&shared, POOL_SIZE)
            .connect_with(shared.options.clone())
            .await
            .map_err(|e| Error::Connect(e).in_file(shared.options.get_filename()))?;
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&pool)
            .await
            .map_err(|e| Error::Connect(e).in_file(shared.options.get_filename()))?;
        shared.wal.store(
            journal.eq_ignore_ascii_case("wal"),
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(SqliteStore {
            pool,
            shared,
            payload_limit: usize::MAX,
            dedicated: false,
        })
    }

    /// Refuses enqueued payloads over `limit` bytes of compact JSON before writing. None by
    /// default; the database's own limit (`job_settings.payload_limit`, 1 MiB unless changed
    /// there) applies in any case.
    pub fn with_payload_limit(mut self, limit: usize) -> Self {
        self.payload_limit = limit;
        self
    }

    /// The payload limit checked before writing, in bytes (`usize::MAX`: none).
    pub fn payload_limit(&self) -> usize {
        self.payload_limit
    }

    /// The pool, for the application's own queries and transactional enqueues. Inserts into
    /// `job_jobs` committed through it wake this process's workers at once.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The database file.
    pub fn path(&self) -> PathBuf {
        self.shared.options.get_filename().to_path_buf()
    }

    /// Brings the schema up to date; see [`migrate::migrate`]. A failure names the file
    /// ([`Error::File`]).
    pub async fn migrate(&self) -> Result<(), Error> {
        migrate::migrate(&self.pool)
            .await
            .map_err(|e| e.in_file(&self.path()))
    }

    /// Begins an immediate transaction after this process's earlier writes.
    ///
    /// The connection is taken from the pool before the place at the gate: a write that waits
    /// for a connection (the application holding every connection of the pool, up to sqlx's
    /// acquire timeout) waits without the gate, so that the writes that have their connection
    /// go on meanwhile, a heartbeat on the lease keeper's own pool among them. Before, such a
    /// write held the gate while it waited, the heartbeats behind it timed out, and the worker
    /// fenced its running jobs.
    pub(crate) async fn write(&self) -> Result<Write, Error> {
        let conn = self.pool.acquire().await.map_err(Error::query("acquire"))?;
        self.write_on(conn).await
    }

    /// Whether `queue`'s last claim took jobs; with `took`, records whether this one did.
    fn busy_queue(&self, queue: &str, took: Option<bool>) -> bool {
        let mut busy = self
            .shared
            .busy_queues
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match took {
            None => busy.contains(queue),
            Some(true) => !busy.insert(queue.to_owned()),
            Some(false) => busy.remove(queue),
        }
    }

    /// [`write`](Self::write) on `conn`, a connection of this store's pool already acquired.
    pub(crate) async fn write_on(&self, conn: PoolConnection<Sqlite>) -> Result<Write, Error> {
        let gate = self.shared.gate.clone().lock_owned().await;
        // What `Pool::begin_with` does once it has the connection.
        let tx = Transaction::begin(conn, Some("BEGIN IMMEDIATE".into()))
            .await
            .map_err(Error::query("begin_immediate"))?;
        Ok(Write { tx, _gate: gate })
    }

    /// Runs `work`, given a handle of this store, on the store's writer thread (see
    /// [`crate::writer`]) and waits for its answer: every write transaction of the store runs
    /// there, begun with [`write`](Self::write).
    pub(crate) async fn on_writer<T, F, Fut>(&self, work: F) -> T
    where
        F: FnOnce(SqliteStore) -> Fut,
        Fut: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        self.shared.writer.run(work(self.clone())).await
    }

    /// [`Store::rescue_expired`], bounded by the rescuer's clock check when `checked_at` is
    /// given (microseconds: [`lease::rescue_expired`]).
    async fn rescue(
        &self,
        limit: u32,
        checked_at: Option<crate::time::Micros>,
    ) -> Result<Rescued, StoreError> {
        self.on_writer(move |store| async move {
            let skip = store.refused().skip();
            let mut w = store.write().await?;
            let (rescued, queues, refused) =
                lease::rescue_expired(&mut w.tx, limit, checked_at, &skip).await?;
            w.commit().await?;
            store.refused().add(refused);
            store.wake(&queues);
            Ok(rescued)
        })
        .await
    }

    fn refused(&self) -> std::sync::MutexGuard<'_, RefusedRows> {
        self.shared
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes this process's workers of `queues`.
    pub(crate) fn wake(&self, queues: &[String]) {
        let mut seen: Vec<&String> = queues.iter().collect();
        seen.sort();
        seen.dedup();
        for queue in seen {
            self.shared.notifier.wake(queue);
        }
    }

    fn validate(&self, job: &NewJob) -> Result<(), EnqueueError> {
        job.validate(self.payload_limit)
    }
}

impl Write {
    pub(crate) async fn commit(self) -> Result<(), Error> {
        self.tx.commit().await.map_err(Error::query("commit"))
    }
}

/// The options of every pool the store makes: its hooks installed on each new connection,
/// and each connection given back checked as it returns.
///
/// sqlx 0.8 (`SqliteTransactionManager::begin`) sends a custom `BEGIN IMMEDIATE`, counts the
/// transaction, and then awaits once more (to check SQLite's autocommit flag) before it hands
/// out the `Transaction`. A caller dropped at that await (a timeout, a `select!`, a handler
/// aborted by its timeout or a lost lease) leaves the connection inside a write transaction
/// that no `Transaction` will roll back. Back in the pool, it would hold SQLite's write lock
/// until the pool closed it for idleness: every write of every process sharing the file would
/// fail as busy meanwhile. So a connection still inside a transaction once its queued commands
/// ran (a dropped `Transaction` queues its rollback) is closed, which rolls it back, instead of
/// being reused. `job_postgres::pool_options` guards against the same cancellation.
fn pool_options(shared: &Arc<Shared>, connections: u32) -> SqlitePoolOptions {
    let notifier = shared.notifier.clone();
    SqlitePoolOptions::new()
        .max_connections(connections.max(1))
        .after_release(|conn, _meta| {
            Box::pin(async move {
                // A round trip to the connection's thread: every command queued before it,
                // a dropped transaction's rollback included, has run once it returns.
                conn.ping().await?;
                let stale = conn.is_in_transaction();
                if stale {
                    tracing::warn!(
                        "a SQLite connection was given back inside a transaction (a cancelled \
                         begin): closing it, which rolls the transaction back, instead of \
                         reusing it"
                    );
                }
                Ok(!stale)
            })
        })
        .after_connect(move |conn, _| {
            let notifier = notifier.clone();
            Box::pin(async move {
                crate::busy::install(conn).await?;
                notifier
                    .install(conn)
                    .await
                    .map_err(|e| sqlx::Error::Protocol(e.to_string()))
            })
        })
}

impl Store for SqliteStore {
    async fn register_kinds(
        &self,
        kinds: &[(String, Option<job_core::Compensate>)],
    ) -> Result<(), StoreError> {
        let kinds = kinds.to_vec();
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            for (kind, compensate) in &kinds {
                let query = match compensate {
                    Some(c) => sqlx::query(crate::sql::REGISTER_KINDS)
                        .bind(kind)
                        .bind(c.kind)
                        .bind(c.queue)
                        .bind(c.priority)
                        .bind(c.max_attempts)
                        .bind(c.version),
                    None => sqlx::query(crate::sql::UNREGISTER_KIND).bind(kind),
                };
                query
                    .execute(&mut *w.tx)
                    .await
                    .map_err(Error::query("register_kinds"))?;
            }
            w.commit().await?;
            Ok(())
        })
        .await
    }

    async fn record_breakers(
        &self,
        counts: &[job_core::BreakerCount],
    ) -> Result<Vec<job_core::Tripped>, StoreError> {
        if counts.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(refused) = lease::breaker_problem(counts) {
            return Err(refused.into());
        }
        let counts = counts.to_vec();
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            let tripped = lease::record_breakers(&mut w.tx, &counts).await?;
            w.commit().await?;
            Ok(tripped)
        })
        .await
    }

    fn supports_flow_control(&self) -> bool {
        true
    }

    async fn enqueue(&self, job: NewJob) -> Result<JobId, EnqueueError> {
        self.validate(&job)?;
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            let id = enqueue::enqueue(&mut w.tx, &job).await?;
            w.commit().await?;
            Ok(id)
        })
        .await
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>, EnqueueError> {
        NewJob::validate_all(&jobs, self.payload_limit)?;
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            if jobs.iter().any(|j| j.unique.is_some()) {
                // Refused as job-postgres refuses it, with the same words.
                return enqueue::enqueue_many(&mut w.tx, &jobs).await;
            }
            let ids = enqueue::insert_all(&mut w.tx, &jobs).await?;
            w.commit().await?;
            Ok(ids)
        })
        .await
    }

    /// Unless the queue's last claim took jobs (it then claims straight away), reads first,
    /// without the write lock, whether the queue has a job this claim may take
    /// (`lease::claimable`), and writes only if it has: a worker's queues each claim at every
    /// poll and at every job committed in the process, and a claim that found nothing still
    /// took the file's one write lock (beside 2,000 idle queues, an enqueued job started 1.6 s
    /// after its enqueue, and heartbeats waited at the same gate).
    ///
    /// Nothing is stranded by a read that found nothing: a job committed after it wakes the
    /// queue again and the next claim reads again. A job inserted in this process wakes every
    /// queue from SQLite's WAL hook, once its commit has taken place and can be read
    /// (`listen.rs`; the commit hook runs before that, and a read woken from there could miss
    /// it); a release, rescue, redrive or resume wakes its queue after its commit; a job of
    /// another process, or one that becomes due by time (its `run_at` passes), is found at the
    /// next poll, whose read takes the database's now again, as the claim does. Only in WAL
    /// mode, where a read neither waits for the writer nor is woken too early; a file the
    /// application opened in another journal mode claims as before, every claim a write.
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>, StoreError> {
        request.check()?;
        if request.kinds.is_empty() || request.limit == 0 {
            return Ok(Vec::new());
        }
        let request = request.clone();
        self.on_writer(|store| async move {
            // The read and the write on one connection: one acquire, not two (a claim that
            // takes a job paid about 0.25 ms more with the read on a connection of its own).
            let mut conn = store
                .pool
                .acquire()
                .await
                .map_err(Error::query("acquire"))?;
            if store.shared.wal.load(std::sync::atomic::Ordering::Relaxed)
                && !store.busy_queue(&request.queue, None)
                && !lease::claimable(&mut conn, &request).await?
            {
                return Ok(Vec::new());
            }
            let mut w = store.write_on(conn).await?;
            let claimed = lease::claim(&mut w.tx, &request).await?;
            w.commit().await?;
            store.busy_queue(&request.queue, Some(!claimed.is_empty()));
            Ok(claimed)
        })
        .await
    }

    async fn heartbeat(&self, renewals: &[Renewal]) -> Result<HeartbeatReport, StoreError> {
        renewals.iter().try_for_each(Renewal::check)?;
        if renewals.is_empty() {
            return Ok(HeartbeatReport::default());
        }
        let renewals = renewals.to_vec();
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            let report = lease::heartbeat(&mut w.tx, &renewals).await?;
            w.commit().await?;
            Ok(report)
        })
        .await
    }

    async fn finalize(&self, batch: &[Finalize]) -> Result<Vec<Finalized>, StoreError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let batch = batch.to_vec();
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            let result = lease::finalize(&mut w.tx, &batch).await?;
            w.commit().await?;
            Ok(result)
        })
        .await
    }

    async fn rescue_expired(&self, limit: u32) -> Result<Rescued, StoreError> {
        self.rescue(limit, None).await
    }

    async fn rescue_expired_checked(
        &self,
        limit: u32,
        checked_at: std::time::SystemTime,
    ) -> Result<Rescued, StoreError> {
        let at = crate::time::from_time(chrono::DateTime::<chrono::Utc>::from(checked_at));
        self.rescue(limit, Some(at)).await
    }

    async fn record_start(&self, lease: Lease) -> Result<bool, StoreError> {
        self.on_writer(move |store| async move {
            let mut w = store.write().await?;
            let held = lease::record_start(&mut w.tx, lease).await?;
            w.commit().await?;
            Ok(held)
        })
        .await
    }

    async fn schema_lag(&self) -> Result<Option<job_core::SchemaLag>, StoreError> {
        Ok(crate::migrate::schema_lag(&self.pool).await?)
    }

    async fn release(&self, releases: &[Release]) -> Result<u64, StoreError> {
        if releases.is_empty() {
            return Ok(0);
        }
        let releases = releases.to_vec();
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            let (released, queues) = lease::release(&mut w.tx, &releases).await?;
            w.commit().await?;
            store.wake(&queues);
            Ok(released)
        })
        .await
    }

    async fn get(&self, id: JobId) -> Result<Option<JobRow>, StoreError> {
        Ok(row::get(&self.pool, id, None).await?)
    }

    /// A pool of at most `connections`, and never more than [`MAX_DEDICATED_CONNECTIONS`].
    fn dedicated(&self, _purpose: &str, connections: u32) -> Self {
        let pool = pool_options(&self.shared, connections.min(MAX_DEDICATED_CONNECTIONS))
            .min_connections(1)
            .idle_timeout(Some(Duration::from_secs(60)))
            .connect_lazy_with(self.shared.options.clone());
        SqliteStore {
            pool,
            shared: self.shared.clone(),
            payload_limit: self.payload_limit,
            dedicated: true,
        }
    }

    async fn close(&self) {
        if self.dedicated {
            self.pool.close().await;
        }
    }

    async fn listen(&self) -> Result<Wakeups, StoreError> {
        Ok(self.shared.notifier.subscribe())
    }

    /// Deletes up to `request.batch` jobs, in transactions of at most 16 MiB
    /// (`maintenance::PRUNE_BYTES`) of their payloads, results, error histories and step
    /// outputs each, so that no prune holds the file's write lock long; the answer counts them
    /// all, so it is short of the batch only when no more are due (the pruner's loop stops
    /// there). After a transaction stopped at its bytes, the next one picks twice as many jobs
    /// as it deleted, not the whole rest of the batch: each pick reads its jobs' rows.
    async fn prune(&self, request: &PruneRequest) -> Result<u64, StoreError> {
        let request = *request;
        let batch = u64::from(request.batch);
        let mut deleted: u64 = 0;
        let mut pick = batch;
        loop {
            let rows = u32::try_from(pick.min(batch - deleted)).unwrap_or(request.batch);
            if rows == 0 {
                return Ok(deleted);
            }
            let done = self
                .on_writer(move |store| async move {
                    let mut w = store.write().await?;
                    let done =
                        maintenance::prune(&mut w.tx, &request, rows, maintenance::PRUNE_BYTES)
                            .await?;
                    w.commit().await?;
                    Ok::<_, Error>(done)
                })
                .await?;
            deleted += done.deleted;
            // None deleted of those picked (an application's trigger ignoring the deletes):
            // the next pick would find them again.
            if !done.more || done.deleted == 0 {
                return Ok(deleted);
            }
            pick = done.deleted.saturating_mul(2).max(1);
        }
    }

    async fn expire(&self, limit: u32) -> Result<Expired, StoreError> {
        self.on_writer(|store| async move {
            let skip = store.refused().skip();
            let mut w = store.write().await?;
            let (expired, refused) = maintenance::expire(&mut w.tx, limit, &skip).await?;
            w.commit().await?;
            store.refused().add(refused);
            Ok(expired)
        })
        .await
    }

    async fn load_steps(&self, lease: &Lease) -> Result<HashMap<String, String>, StoreError> {
        Ok(steps::load(&self.pool, lease.id).await?)
    }

    async fn load_steps_up_to(
        &self,
        lease: &Lease,
        max_bytes: usize,
    ) -> Result<(HashMap<String, String>, bool), StoreError> {
        Ok(steps::load_up_to(&self.pool, lease.id, max_bytes).await?)
    }

    async fn load_step(&self, lease: &Lease, name: &str) -> Result<Option<String>, StoreError> {
        Ok(steps::load_one(&self.pool, lease.id, name).await?)
    }

    async fn save_step(
        &self,
        lease: &Lease,
        name: &str,
        output: &str,
    ) -> Result<Finalized, StoreError> {
        let (lease, name, output) = (*lease, name.to_owned(), output.to_owned());
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            let saved = steps::save(&mut w.tx, &lease, &name, &output).await?;
            w.commit().await?;
            Ok(saved)
        })
        .await
    }
}
