//! [`PgStore`]: the [`Store`] contract on PostgreSQL.

use job_core::{
    ClaimRequest, ClaimedJob, EnqueueError, Finalize, Finalized, HeartbeatReport, JobId, JobRow,
    Lease, NewJob, Release, Renewal, Report, ReportRequest, Rescued, Store, StoreError, Wakeups,
};
use sqlx::PgPool;

use crate::pool::pool_options;

use crate::error::Error;
use crate::{enqueue, lease, listen, migrate, report, row};

/// Jobs in one `enqueue_many` statement at most; larger batches are split into several
/// statements inside one transaction.
const ENQUEUE_CHUNK: usize = 10_000;

/// The PostgreSQL store: a connection pool, and the payload limit enqueues are checked against
/// before they are sent (none unless set: the database's `job.settings.payload_limit` decides).
/// Cloning is cheap (the pool is shared).
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    payload_limit: usize,
    /// The pool was made by [`Store::dedicated`], so [`Store::close`] closes it.
    dedicated: bool,
    /// How long the LISTEN connection may be quiet before it is checked.
    listen_check: std::time::Duration,
    /// When the pruner may next look for rate windows to delete (`None`: at its next pass),
    /// shared by the store's clones: see [`crate::admin::prune`].
    rate_windows_due: std::sync::Arc<std::sync::Mutex<Option<std::time::Instant>>>,
}

impl PgStore {
    /// A store on an existing pool.
    pub fn new(pool: PgPool) -> Self {
        PgStore {
            pool,
            payload_limit: usize::MAX,
            dedicated: false,
            listen_check: listen::LISTEN_CHECK,
            rate_windows_due: Default::default(),
        }
    }

    /// Opens a pool to `url` (`postgres://user@host/db`), built with [`pool_options`]
    /// (connections left inside a transaction are never reused), and wraps it.
    pub async fn connect(url: &str) -> Result<Self, Error> {
        let pool = pool_options().connect(url).await.map_err(Error::Connect)?;
        Ok(PgStore::new(pool))
    }

    /// Refuses enqueued payloads over `limit` bytes of compact JSON before they are sent. The
    /// database's limit ([`DEFAULT_PAYLOAD_LIMIT`](job_core::DEFAULT_PAYLOAD_LIMIT) unless
    /// changed in `job.settings`) applies in any case; this one can only be tighter. None by
    /// default.
    pub fn with_payload_limit(mut self, limit: usize) -> Self {
        self.payload_limit = limit;
        self
    }

    /// How long the connection of [`Store::listen`] may go without a notification before a
    /// statement is sent through it to see that it still answers (one that does not within
    /// [`POOL_CHECK_TIMEOUT`](crate::POOL_CHECK_TIMEOUT) is replaced: its server or the
    /// network went silent, and it would never have heard anything again). Defaults to
    /// [`LISTEN_CHECK`](crate::LISTEN_CHECK), 30 seconds: a silent LISTEN connection costs
    /// that long, plus the check, of wake-ups (workers still poll meanwhile); each check is
    /// a trivial round trip. At least [`MIN_INTERVAL`](job_core::MIN_INTERVAL) (10 ms): a
    /// shorter one is raised to it, since each check is a statement. A worker takes it from
    /// the store it is given.
    pub fn with_listen_check(mut self, quiet: std::time::Duration) -> Self {
        self.listen_check = quiet.max(job_core::MIN_INTERVAL);
        self
    }

    /// The payload limit checked before sending, in bytes (`usize::MAX`: none).
    pub fn payload_limit(&self) -> usize {
        self.payload_limit
    }

    /// The pool, for the application's own queries and transactional enqueues.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The ids of the jobs job `id` depends on (for a batch's callback, its members), in id
    /// order: a dependent handler reads their states and results with
    /// `store.list(&JobFilter { ids, ..Default::default() })` (the pruner keeps them until
    /// job `id` has finished).
    pub async fn dependencies(&self, id: JobId) -> Result<Vec<JobId>, Error> {
        enqueue::dependencies_of(&self.pool, id).await
    }

    /// Brings the `job` schema up to date; see [`migrate::migrate`]: it gives up, rather than
    /// wait for ever, when the database stops answering or an answer is lost on the way
    /// ([`Error::MigrateGaveUp`]), once the migration's session has waited for this process
    /// for [`MIGRATE_IDLE_LIMIT`](crate::MIGRATE_IDLE_LIMIT) (30 s).
    pub async fn migrate(&self) -> Result<(), Error> {
        migrate::migrate(&self.pool).await
    }

    /// [`PgStore::migrate`] with another idle limit; see [`migrate::migrate_with_idle_limit`].
    pub async fn migrate_with_idle_limit(
        &self,
        idle_limit: std::time::Duration,
    ) -> Result<(), Error> {
        migrate::migrate_with_idle_limit(&self.pool, idle_limit).await
    }

    fn validate(&self, job: &NewJob) -> Result<(), EnqueueError> {
        job.validate(self.payload_limit)
    }
}

impl Store for PgStore {
    async fn enqueue(&self, job: NewJob) -> Result<JobId, EnqueueError> {
        self.validate(&job)?;
        job_core::EnqueueExecutor::enqueue_job(&self.pool, &job).await
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>, EnqueueError> {
        NewJob::validate_all(&jobs, self.payload_limit)?;
        if jobs.iter().any(|j| !j.depends_on.is_empty()) {
            return enqueue::enqueue_with_dependencies(&self.pool, &jobs).await;
        }
        if jobs.len() <= ENQUEUE_CHUNK {
            return enqueue::enqueue_many(&self.pool, &jobs).await;
        }
        let mut tx = self.pool.begin().await.map_err(Error::query("begin"))?;
        // Every chunk's ordering keys locked at once, in one order: chunk by chunk, two such
        // enqueues sharing keys could each hold what the other's next chunk waits for.
        let keys: Vec<&str> = jobs
            .iter()
            .filter_map(|j| j.ordering_key.as_deref())
            .collect();
        if !keys.is_empty() {
            sqlx::query(crate::sql::ORDERING_LOCK)
                .bind(keys)
                .execute(&mut *tx)
                .await
                .map_err(Error::query("ordering_lock"))?;
        }
        let mut ids = Vec::with_capacity(jobs.len());
        for chunk in jobs.chunks(ENQUEUE_CHUNK) {
            ids.extend(enqueue::enqueue_many(&mut *tx, chunk).await?);
        }
        tx.commit().await.map_err(Error::query("commit"))?;
        Ok(ids)
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>, StoreError> {
        request.check()?;
        Ok(lease::claim_from_pool(&self.pool, request).await?)
    }

    async fn heartbeat(&self, renewals: &[Renewal]) -> Result<HeartbeatReport, StoreError> {
        renewals.iter().try_for_each(Renewal::check)?;
        Ok(lease::heartbeat(&self.pool, renewals).await?)
    }

    async fn finalize(&self, batch: &[Finalize]) -> Result<Vec<Finalized>, StoreError> {
        Ok(lease::finalize(&self.pool, batch).await?)
    }

    async fn rescue_expired(&self, limit: u32) -> Result<Rescued, StoreError> {
        Ok(lease::rescue_expired(&self.pool, limit).await?)
    }

    async fn stage_due(&self, limit: u32) -> Result<u64, StoreError> {
        Ok(lease::stage_due(&self.pool, limit).await?)
    }

    async fn record_start(&self, lease: Lease) -> Result<bool, StoreError> {
        Ok(lease::record_start(&self.pool, lease).await?)
    }

    async fn schema_lag(&self) -> Result<Option<job_core::SchemaLag>, StoreError> {
        Ok(crate::migrate::schema_lag(&self.pool).await?)
    }

    async fn release(&self, releases: &[Release]) -> Result<u64, StoreError> {
        Ok(lease::release(&self.pool, releases).await?)
    }

    async fn save_progress(&self, progress: &[(Lease, String)]) -> Result<u64, StoreError> {
        Ok(lease::save_progress(&self.pool, progress).await?)
    }

    async fn report(&self, request: &ReportRequest) -> Result<Option<Report>, StoreError> {
        Ok(report::report(&self.pool, request).await?)
    }

    async fn register_kinds(
        &self,
        kinds: &[(String, Option<job_core::Compensate>)],
    ) -> Result<(), StoreError> {
        Ok(report::register_kinds(&self.pool, kinds).await?)
    }

    async fn record_breakers(
        &self,
        counts: &[job_core::BreakerCount],
    ) -> Result<Vec<job_core::Tripped>, StoreError> {
        Ok(report::record_breakers(&self.pool, counts).await?)
    }

    fn supports_flow_control(&self) -> bool {
        true
    }

    async fn get(&self, id: JobId) -> Result<Option<JobRow>, StoreError> {
        Ok(row::get(&self.pool, id, None).await?)
    }

    async fn listen(&self) -> Result<Wakeups, StoreError> {
        Ok(listen::listen(&self.pool, self.listen_check).await?)
    }

    /// One: the listener's pool of its own (see [`with_listen_check`](Self::with_listen_check)).
    fn listen_connections(&self) -> u32 {
        1
    }

    fn dedicated(&self, purpose: &str, connections: u32) -> Self {
        // Named after the application's own name when it has one, so that its connections
        // are told apart and still found under the application's name.
        let base = (*self.pool.connect_options()).clone();
        let name = match base.get_application_name() {
            Some(app) => format!("{app}: {purpose}"),
            None => purpose.to_owned(),
        };
        let options = base.application_name(&name);
        // One connection is opened at once and kept open (reopened in the background when
        // lost), so the first heartbeat or claim does not pay for a connect, which under load
        // can take longer than a heartbeat period.
        // JIT compilation off for the session: every statement the worker sends is short, and
        // a generic plan estimated above jit_above_cost on a large table spent 35 ms compiling
        // a claim that runs in 1 (migration 0024, which turns it off in the functions too). A
        // statement, not a startup option, so that a pooler that refuses unknown startup
        // parameters still lets the worker in.
        // Acquires bounded by ACQUIRE_TIMEOUT, not sqlx's 30 s: sqlx spaces its retries of a
        // refused connection by up to a fifth of it, and a worker slept that long (6 s) past
        // a restarted server's return before claiming again.
        let pool = pool_options()
            .acquire_timeout(crate::pool::ACQUIRE_TIMEOUT)
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    crate::pool::setup_session(conn).await?;
                    sqlx::Executor::execute(&mut *conn, crate::sql::JIT_OFF_SESSION).await?;
                    sqlx::Executor::execute(conn, crate::sql::WORKER_IDLE_TIMEOUT).await?;
                    Ok(())
                })
            })
            .max_connections(connections.max(1))
            .min_connections(1)
            .idle_timeout(Some(std::time::Duration::from_secs(60)))
            .connect_lazy_with(options);
        PgStore {
            pool,
            payload_limit: self.payload_limit,
            dedicated: true,
            listen_check: self.listen_check,
            rate_windows_due: self.rate_windows_due.clone(),
        }
    }

    async fn close(&self) {
        if self.dedicated {
            self.pool.close().await;
        }
    }

    // --- lifecycle: unique jobs, cancellation, dead letters, pausing, pruning, stats ---
    // (cancel, pause, dead letters and stats are `job_core::Admin`, in admin.rs)

    async fn prune(&self, request: &job_core::PruneRequest) -> Result<u64, StoreError> {
        Ok(crate::admin::prune(&self.pool, request, &self.rate_windows_due).await?)
    }

    async fn expire(&self, limit: u32) -> Result<job_core::Expired, StoreError> {
        Ok(crate::admin::expire(&self.pool, limit).await?)
    }

    async fn vacuum(&self) -> Result<bool, StoreError> {
        Ok(crate::admin::vacuum(&self.pool).await?)
    }

    // --- execution: durable steps, completion in the caller's transaction ---

    async fn load_steps(
        &self,
        lease: &Lease,
    ) -> Result<std::collections::HashMap<String, String>, StoreError> {
        Ok(crate::steps::load(&self.pool, lease.id).await?)
    }

    async fn load_steps_up_to(
        &self,
        lease: &Lease,
        max_bytes: usize,
    ) -> Result<(std::collections::HashMap<String, String>, bool), StoreError> {
        Ok(crate::steps::load_up_to(&self.pool, lease.id, max_bytes).await?)
    }

    async fn load_step(&self, lease: &Lease, name: &str) -> Result<Option<String>, StoreError> {
        Ok(crate::steps::load_one(&self.pool, lease.id, name).await?)
    }

    async fn save_step(
        &self,
        lease: &Lease,
        name: &str,
        output: &str,
    ) -> Result<Finalized, StoreError> {
        crate::steps::save(&self.pool, lease, name, output).await
    }
}
