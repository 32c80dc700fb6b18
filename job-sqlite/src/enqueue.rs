//! Inserting jobs through a connection: the store's own (inside its immediate transaction), or
//! the caller's (`&mut *tx`), so a job commits or rolls back with the caller's rows.

use std::future::Future;

use job_core::{Deadline, EnqueueError, EnqueueExecutor, JobId, NewJob, OnDuplicate, RunAt};
use sqlx::pool::PoolConnection;
use sqlx::{Connection, Sqlite, SqliteConnection, SqlitePool};

use crate::error::Error;
use crate::sql;
use crate::time::{from_time, micros};

/// How often a keyed insert is tried again when the holder of its key finished between the
/// insert that found it and the read of it (only outside a write transaction).
const UNIQUE_TRIES: u32 = 100;

/// Inserts one job through `conn` and returns its id. The job is not checked here: build it
/// with [`NewJob::build`] or check it with [`NewJob::validate`]. The table's constraints check
/// it in any case; a refusal names no option (SQLite does not say which column) and comes
/// back as [`EnqueueError::Store`].
///
/// Pass `&mut *tx` (a [`sqlx::Transaction`] of the caller's) or a connection; inside a
/// transaction the job exists only if the transaction commits. Begin the caller's transaction
/// with `BEGIN IMMEDIATE` (`pool.begin_with("BEGIN IMMEDIATE")`) when it reads before it
/// writes: SQLite refuses to upgrade a read transaction whose snapshot another writer made
/// stale (`SQLITE_BUSY_SNAPSHOT`).
///
/// A job with a unique key is decided by the database's unique index, never by a pre-check:
/// when an active job of the kind holds the key, nothing is inserted and the answer is
/// [`EnqueueError::Duplicate`] with that job's id, unless the job asks for
/// [`OnDuplicate::Replace`] and the holder is waiting: then the holder's payload, run time and
/// deadline are replaced and its id returned.
pub async fn enqueue(conn: &mut SqliteConnection, job: &NewJob) -> Result<JobId, EnqueueError> {
    if job.ordering_key.is_some() {
        return Err(not_yet("ordering_key", "per-key ordering"));
    }
    if job.rate_key.is_some() {
        return Err(not_yet("rate_key", "per-key rate limits"));
    }
    if !job.depends_on.is_empty() {
        return Err(not_yet("depends_on", "dependencies and batches"));
    }
    // Each insert is read to its end (`fetch_all`), never stopped at its row: outside a
    // transaction its commit then happens in that last step, where SQLite calls the WAL hook
    // that wakes this process's workers (`listen.rs`). `fetch_one` resets the statement after
    // the row, and a commit made by a reset calls no WAL hook: the wake-up waited for the
    // connection's next statement.
    let Some(unique) = &job.unique else {
        let inserted = bind(sqlx::query_scalar(sql::INSERT), job)
            .fetch_all(&mut *conn)
            .await
            .and_then(|ids: Vec<JobId>| ids.into_iter().next().ok_or(sqlx::Error::RowNotFound));
        let id: JobId = match inserted {
            Ok(id) => id,
            Err(e) => return Err(refused(conn, job, "insert", e).await),
        };
        job_core::record_enqueued(job);
        return Ok(id);
    };
    let statement = match unique.on_duplicate {
        OnDuplicate::Replace => sql::INSERT_REPLACE,
        _ => sql::INSERT_UNIQUE,
    };
    for _ in 0..UNIQUE_TRIES {
        let inserted: Option<JobId> = match bind(sqlx::query_scalar(statement), job)
            .fetch_all(&mut *conn)
            .await
        {
            Ok(inserted) => inserted.into_iter().next(),
            Err(e) => return Err(refused(conn, job, "insert_unique", e).await),
        };
        if let Some(id) = inserted {
            job_core::record_enqueued(job);
            return Ok(id);
        }
        let holder: Option<JobId> = sqlx::query_scalar(sql::UNIQUE_HOLDER)
            .bind(&job.kind)
            .bind(&unique.key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(Error::query("unique_holder"))?;
        if let Some(existing) = holder {
            return Err(EnqueueError::Duplicate {
                kind: job.kind.clone(),
                key: unique.key.clone(),
                existing,
            });
        }
        // The holder finished between the insert and the read: try again.
    }
    Err(Error::query("insert_unique")(sqlx::Error::Protocol(format!(
        "enqueue of `{}` with unique key `{}` kept racing a finishing duplicate",
        job.kind, unique.key
    )))
    .into())
}

/// Inserts many jobs through `conn`, all or none (inside a savepoint when `conn` is in a
/// transaction, else a transaction of its own), and returns their ids in input order. The jobs
/// are not checked here (see [`enqueue`]).
///
/// Jobs with a unique key are refused ([`EnqueueError::InvalidOption`] `unique_key`), as
/// job-postgres refuses them: each duplicate needs its own answer.
pub async fn enqueue_many(
    conn: &mut SqliteConnection,
    jobs: &[NewJob],
) -> Result<Vec<JobId>, EnqueueError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    if jobs.iter().any(|j| j.unique.is_some()) {
        return Err(EnqueueError::InvalidOption {
            option: "unique_key",
            reason: "jobs with unique keys cannot be enqueued in bulk; enqueue them one by one"
                .into(),
        });
    }
    let mut tx = conn.begin().await.map_err(Error::query("begin"))?;
    let ids = insert_all(&mut tx, jobs).await?;
    tx.commit().await.map_err(Error::query("commit"))?;
    Ok(ids)
}

/// The words of migration 0005's triggers refusing a payload over `job_settings.payload_limit`.
const PAYLOAD_REFUSED: &str = "job row refused: `payload` is over the payload limit";

/// The words of migration 0014's trigger refusing a deadline the job could never start before.
const DEADLINE_REFUSED: &str = "job row refused: `deadline` ";

/// `e`, the failure of `statement` inserting `job`, as the enqueue's error: a payload refused
/// by the database's limit as [`EnqueueError::PayloadTooLarge`] with that limit (read on the
/// same connection: the refused statement rolled back alone), anything else as the store's.
async fn refused(
    conn: &mut SqliteConnection,
    job: &NewJob,
    statement: &'static str,
    e: sqlx::Error,
) -> EnqueueError {
    let over_limit =
        matches!(&e, sqlx::Error::Database(db) if db.message().contains(PAYLOAD_REFUSED));
    if over_limit {
        if let Ok(limit) = sqlx::query_scalar::<_, i64>(sql::PAYLOAD_LIMIT)
            .fetch_one(&mut *conn)
            .await
        {
            return EnqueueError::PayloadTooLarge {
                kind: job.kind.clone(),
                size: job.payload.len(),
                limit: usize::try_from(limit).unwrap_or(usize::MAX),
            };
        }
    }
    if let sqlx::Error::Database(db) = &e {
        if let Some(reason) = db.message().strip_prefix(DEADLINE_REFUSED) {
            return EnqueueError::InvalidOption {
                option: "deadline",
                reason: reason.to_owned(),
            };
        }
    }
    Error::query(statement)(e).into()
}

/// A refusal of an option this backend does not support yet.
fn not_yet(option: &'static str, what: &str) -> EnqueueError {
    EnqueueError::InvalidOption {
        option,
        reason: format!(
            "{what}: not supported by the SQLite backend yet; use PostgreSQL (README, Backends)"
        ),
    }
}

/// Inserts `jobs` one statement each on `conn`, which is inside a transaction.
pub(crate) async fn insert_all(
    conn: &mut SqliteConnection,
    jobs: &[NewJob],
) -> Result<Vec<JobId>, EnqueueError> {
    let mut ids = Vec::with_capacity(jobs.len());
    for job in jobs {
        ids.push(enqueue(&mut *conn, job).await?);
    }
    Ok(ids)
}

type Scalar<'q> =
    sqlx::query::QueryScalar<'q, sqlx::Sqlite, JobId, sqlx::sqlite::SqliteArguments<'q>>;

/// Binds `job` as `?1..?14` of the insert statements.
fn bind<'q>(query: Scalar<'q>, job: &'q NewJob) -> Scalar<'q> {
    let (run_at, delay) = match job.run_at {
        RunAt::Now => (None, 0),
        RunAt::In(d) => (None, micros(d)),
        RunAt::At(at) => (Some(from_time(at)), 0),
    };
    let (deadline, deadline_in) = match job.deadline {
        None => (None, None),
        Some(Deadline::At(at)) => (Some(from_time(at)), None),
        Some(Deadline::In(d)) => (None, Some(micros(d))),
    };
    let tags = serde_json::to_string(&job.tags).unwrap_or_else(|_| "[]".into());
    query
        .bind(&job.kind)
        .bind(&job.queue)
        .bind(job.priority)
        .bind(&job.payload)
        .bind(job.payload_version)
        .bind(job.max_attempts)
        .bind(run_at)
        .bind(delay)
        .bind(deadline)
        .bind(deadline_in)
        .bind(tags)
        .bind(&job.tenant)
        .bind(job.unique.as_ref().map(|u| u.key.as_str()))
        .bind(job.unique.as_ref().map(|u| u.scope.as_str()))
}

/// The SQLite backend, as job-core's generic enqueue names it: `E: EnqueueExecutor<SqliteBackend>`
/// is any of `&SqlitePool`, `&mut SqliteConnection` (`&mut *tx` of a transaction) and
/// `&mut PoolConnection<Sqlite>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqliteBackend {}

/// [`enqueue`] on a connection of `pool`.
async fn enqueue_on_pool(pool: &SqlitePool, job: &NewJob) -> Result<JobId, EnqueueError> {
    let mut conn = pool.acquire().await.map_err(Error::query("acquire"))?;
    enqueue(&mut conn, job).await
}

/// [`enqueue_many`] on a connection of `pool`.
async fn enqueue_many_on_pool(
    pool: &SqlitePool,
    jobs: &[NewJob],
) -> Result<Vec<JobId>, EnqueueError> {
    let mut conn = pool.acquire().await.map_err(Error::query("acquire"))?;
    enqueue_many(&mut conn, jobs).await
}

impl EnqueueExecutor<SqliteBackend> for &SqlitePool {
    fn enqueue_job(self, job: &NewJob) -> impl Future<Output = Result<JobId, EnqueueError>> + Send {
        enqueue_on_pool(self, job)
    }

    fn enqueue_jobs(
        self,
        jobs: &[NewJob],
    ) -> impl Future<Output = Result<Vec<JobId>, EnqueueError>> + Send {
        enqueue_many_on_pool(self, jobs)
    }
}

impl EnqueueExecutor<SqliteBackend> for &mut SqliteConnection {
    fn enqueue_job(self, job: &NewJob) -> impl Future<Output = Result<JobId, EnqueueError>> + Send {
        enqueue(self, job)
    }

    fn enqueue_jobs(
        self,
        jobs: &[NewJob],
    ) -> impl Future<Output = Result<Vec<JobId>, EnqueueError>> + Send {
        enqueue_many(self, jobs)
    }
}

impl EnqueueExecutor<SqliteBackend> for &mut PoolConnection<Sqlite> {
    fn enqueue_job(self, job: &NewJob) -> impl Future<Output = Result<JobId, EnqueueError>> + Send {
        enqueue(self, job)
    }

    fn enqueue_jobs(
        self,
        jobs: &[NewJob],
    ) -> impl Future<Output = Result<Vec<JobId>, EnqueueError>> + Send {
        enqueue_many(self, jobs)
    }
}
