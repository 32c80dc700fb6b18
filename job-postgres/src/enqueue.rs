//! Enqueueing through any sqlx executor (a pool, a connection, or the caller's own
//! transaction, so a job commits or rolls back with the caller's rows), and the
//! [`EnqueueExecutor`] impls through which job-core's typed builders reach it.

use std::future::Future;

use chrono::{DateTime, Utc};
use job_core::duration_millis;
use job_core::{
    Deadline, DependsOn, EnqueueError, EnqueueExecutor, JobId, NewJob, OnDuplicate, RunAt,
};
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgDatabaseError;
use sqlx::{Acquire, PgConnection, PgExecutor, PgPool, Postgres};

use crate::error::Error;
use crate::sql;

/// Inserts one job through `executor` and returns its id. The job is not checked here: build
/// it with [`NewJob::build`] or check it with [`NewJob::validate`]. The database checks it in
/// any case (the payload limit of `job.settings`, names, the payload's shape, times): what it
/// refuses comes back as [`EnqueueError::PayloadTooLarge`] or [`EnqueueError::InvalidOption`]
/// naming the field, and nothing is written.
///
/// Pass `&pool`, `&mut *tx` (a [`sqlx::Transaction`]) or `&mut conn`; inside a transaction the
/// job exists only if the transaction commits.
///
/// A job with a unique key is decided by the database's unique index, never by a pre-check:
/// when an active job of the kind holds the key, nothing is inserted and the answer is
/// [`EnqueueError::Duplicate`] with that job's id, unless the job asks for
/// [`OnDuplicate::Replace`] and the holder is waiting: then the holder's payload, run time and
/// deadline are replaced and its id returned. (Inside a `REPEATABLE READ` or `SERIALIZABLE`
/// transaction a duplicate committed concurrently is a serialization failure instead.)
pub async fn enqueue<'e, E: PgExecutor<'e>>(
    executor: E,
    job: &NewJob,
) -> Result<JobId, EnqueueError> {
    if !job.depends_on.is_empty() {
        return Err(needs_a_transaction());
    }
    let (run_at, delay_ms) = split_run_at(job.run_at);
    let (deadline_at, deadline_ms) = split_deadline(job.deadline);
    let query = match &job.unique {
        None => sql::ENQUEUE,
        Some(_) => sql::ENQUEUE_UNIQUE,
    };
    let mut query = sqlx::query_as::<_, (JobId, Option<String>)>(query)
        .bind(&job.kind)
        .bind(&job.queue)
        .bind(job.priority)
        .bind(&job.payload)
        .bind(job.payload_version)
        .bind(job.max_attempts)
        .bind(run_at)
        .bind(delay_ms)
        .bind(deadline_at)
        .bind(deadline_ms)
        .bind(&job.tags)
        .bind(&job.tenant);
    if let Some(unique) = &job.unique {
        query = query
            .bind(&unique.key)
            .bind(unique.scope.as_str())
            .bind(unique.on_duplicate == OnDuplicate::Replace);
    }
    // $13 to $15 in enqueue.sql, $16 to $18 in enqueue_unique.sql: after the unique key's.
    let query = query
        .bind(&job.traceparent)
        .bind(&job.ordering_key)
        .bind(&job.rate_key);
    let (id, outcome) = query
        .fetch_one(executor)
        .await
        .map_err(|e| refused(std::slice::from_ref(job), "enqueue", e))?;
    match (&job.unique, outcome.as_deref()) {
        (Some(unique), Some("duplicate")) => Err(EnqueueError::Duplicate {
            kind: job.kind.clone(),
            key: unique.key.clone(),
            existing: id,
        }),
        _ => {
            job_core::record_enqueued(job);
            Ok(id)
        }
    }
}

/// Inserts many jobs through `executor` in one statement and returns their ids in input order.
/// The jobs are not checked here (see [`enqueue`]).
///
/// Jobs with a unique key are refused ([`EnqueueError::InvalidOption`] `unique_key`): each
/// duplicate needs its own answer, so enqueue them one by one.
pub async fn enqueue_many<'e, E: PgExecutor<'e>>(
    executor: E,
    jobs: &[NewJob],
) -> Result<Vec<JobId>, EnqueueError> {
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    if jobs.iter().any(|j| j.unique.is_some()) {
        return Err(unique_in_bulk());
    }
    if jobs.iter().any(|j| !j.depends_on.is_empty()) {
        return Err(needs_a_transaction());
    }
    let ids = insert_many(executor, jobs).await?;
    for job in jobs {
        job_core::record_enqueued(job);
    }
    Ok(ids)
}

/// The refusal of a unique key in a bulk enqueue, whichever path the list takes: the bulk
/// statement has no unique key to bind, and each duplicate needs its own answer.
fn unique_in_bulk() -> EnqueueError {
    EnqueueError::InvalidOption {
        option: "unique_key",
        reason: "jobs with unique keys cannot be enqueued in bulk; enqueue them one by one".into(),
    }
}

fn needs_a_transaction() -> EnqueueError {
    EnqueueError::InvalidOption {
        option: "depends_on",
        reason: "a job with dependencies takes two statements: enqueue it with \
                 `enqueue_with_dependencies`, `Enqueue`, `Batch` or the store"
            .into(),
    }
}

/// Inserts `jobs`, some of which wait for others (`NewJob::depends_on`: jobs enqueued before,
/// or others of `jobs` by index, as a [`Batch`](job_core::Batch)'s callback waits for its
/// members), and returns their ids in input order. Two statements in one transaction of its
/// own, or a savepoint of the caller's when `conn` is in one (`&mut *tx`): the jobs, then what
/// they wait for, which makes the waiting ones `pending` (migration 0013). A job waited for
/// that does not exist, or jobs of `jobs` that wait for each other in a loop, are refused
/// ([`EnqueueError::InvalidOption`] `depends_on`), and nothing is written. So are jobs with a
/// unique key, as [`enqueue_many`] refuses them ([`EnqueueError::InvalidOption`] `unique_key`;
/// `depends_on` when the job itself waits for others).
pub async fn enqueue_with_dependencies<'a, A>(
    conn: A,
    jobs: &[NewJob],
) -> Result<Vec<JobId>, EnqueueError>
where
    A: Acquire<'a, Database = Postgres>,
{
    let n = jobs.len();
    for (i, job) in jobs.iter().enumerate() {
        // As `NewJob::validate` says, checked here too since callers may pass unvalidated
        // jobs: a dependent's promotion out of `pending` checks neither its ordering key's turn
        // nor its unique key, so the combination would break both.
        if !job.depends_on.is_empty() && (job.unique.is_some() || job.ordering_key.is_some()) {
            return Err(EnqueueError::InvalidOption {
                option: "depends_on",
                reason: format!(
                    "job {i} of the batch waits for other jobs and has a unique or ordering \
                     key: they cannot be combined yet"
                ),
            });
        }
        // The insert below binds no unique key: a job keeping one would be stored without it.
        if job.unique.is_some() {
            return Err(unique_in_bulk());
        }
        for dep in &job.depends_on {
            if let DependsOn::Batch(index) = dep.on {
                if index >= n || index == i {
                    return Err(EnqueueError::InvalidOption {
                        option: "depends_on",
                        reason: format!(
                            "job {i} of the batch depends on job {index} of it, which is {}",
                            if index == i { "itself" } else { "not in it" }
                        ),
                    });
                }
            }
        }
    }
    if let Some(cycle) = dependency_loop(jobs) {
        let path: Vec<String> = cycle.iter().map(usize::to_string).collect();
        return Err(EnqueueError::InvalidOption {
            option: "depends_on",
            reason: format!(
                "jobs {} of the batch wait for each other in a loop ({} waits for {}): none \
                 of them could ever run",
                path.join(", "),
                path.join(" waits for "),
                path[0]
            ),
        });
    }
    let mut tx = conn.begin().await.map_err(Error::query("begin"))?;
    let ids = insert_many(&mut *tx, jobs).await?;
    let (mut dependents, mut waited_for, mut modes, mut outside) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for (job, id) in jobs.iter().zip(&ids) {
        for dep in &job.depends_on {
            let on = match dep.on {
                DependsOn::Batch(index) => ids[index],
                DependsOn::Job(on) => {
                    outside.push(on);
                    on
                }
                _ => unreachable!("DependsOn has no other variant"),
            };
            dependents.push(*id);
            waited_for.push(on);
            modes.push(dep.mode.as_str());
        }
    }
    outside.sort_unstable();
    outside.dedup();
    sqlx::query(sql::DEPENDENCIES_ADD)
        .bind(dependents)
        .bind(waited_for)
        .bind(modes)
        .bind(outside)
        .execute(&mut *tx)
        .await
        .map_err(|e| refused(&[], "dependencies_add", e))?;
    tx.commit().await.map_err(Error::query("commit"))?;
    // Counted once committed: a batch whose dependencies are refused inserts nothing.
    for job in jobs {
        job_core::record_enqueued(job);
    }
    Ok(ids)
}

/// A loop among the dependencies of `jobs` on each other (indexes already checked to be in
/// range): the indexes of the jobs in it, in waiting order, each waiting for the next and the
/// last for the first. Jobs in a loop would stay `pending` for ever. Kahn's algorithm: jobs
/// that wait for no job of the batch left are taken away until none is; what remains waits,
/// each, for another that remains, so following those edges from any of them closes a loop.
fn dependency_loop(jobs: &[NewJob]) -> Option<Vec<usize>> {
    let waits_for = |i: usize| {
        jobs[i].depends_on.iter().filter_map(|d| match d.on {
            DependsOn::Batch(index) => Some(index),
            _ => None,
        })
    };
    let n = jobs.len();
    let mut waiting = vec![0usize; n];
    let mut waited_by: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, count) in waiting.iter_mut().enumerate() {
        for on in waits_for(i) {
            *count += 1;
            waited_by[on].push(i);
        }
    }
    let mut free: Vec<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    let mut left = n;
    while let Some(on) = free.pop() {
        left -= 1;
        for &i in &waited_by[on] {
            waiting[i] -= 1;
            if waiting[i] == 0 {
                free.push(i);
            }
        }
    }
    if left == 0 {
        return None;
    }
    let mut at = (0..n).find(|&i| waiting[i] > 0)?;
    let mut seen = vec![None; n];
    let mut path = Vec::new();
    loop {
        if let Some(start) = seen[at] {
            return Some(path.split_off(start));
        }
        seen[at] = Some(path.len());
        path.push(at);
        at = waits_for(at).find(|&on| waiting[on] > 0)?;
    }
}

/// The ids of the jobs `id` depends on (a batch callback's members), in id order: read them
/// with `Admin::list` (`JobFilter { ids, .. }`) for their states and results.
pub async fn dependencies_of<'e, E: PgExecutor<'e>>(
    executor: E,
    id: JobId,
) -> Result<Vec<JobId>, Error> {
    sqlx::query_scalar(sql::DEPENDENCIES_OF)
        .bind(id)
        .fetch_all(executor)
        .await
        .map_err(Error::query("dependencies_of"))
}

/// [`enqueue_many`]'s statement, for jobs whose dependencies (if any) are recorded after.
async fn insert_many<'e, E: PgExecutor<'e>>(
    executor: E,
    jobs: &[NewJob],
) -> Result<Vec<JobId>, EnqueueError> {
    let n = jobs.len();
    let mut kinds = Vec::with_capacity(n);
    let mut queues = Vec::with_capacity(n);
    let mut priorities = Vec::with_capacity(n);
    let mut payloads = Vec::with_capacity(n);
    let mut versions = Vec::with_capacity(n);
    let mut max_attempts = Vec::with_capacity(n);
    let mut run_ats = Vec::with_capacity(n);
    let mut delays = Vec::with_capacity(n);
    let mut deadline_ats = Vec::with_capacity(n);
    let mut deadline_mss = Vec::with_capacity(n);
    let mut tags = Vec::with_capacity(n);
    let mut tenants = Vec::with_capacity(n);
    let mut traces = Vec::with_capacity(n);
    let mut orderings = Vec::with_capacity(n);
    let mut rate_keys = Vec::with_capacity(n);
    for job in jobs {
        let (run_at, delay_ms) = split_run_at(job.run_at);
        kinds.push(job.kind.as_str());
        queues.push(job.queue.as_str());
        priorities.push(job.priority);
        payloads.push(job.payload.as_str());
        versions.push(job.payload_version);
        max_attempts.push(job.max_attempts);
        run_ats.push(run_at);
        delays.push(delay_ms);
        let (deadline_at, deadline_ms) = split_deadline(job.deadline);
        deadline_ats.push(deadline_at);
        deadline_mss.push(deadline_ms);
        tags.push(
            (!job.tags.is_empty()).then(|| serde_json::to_string(&job.tags).unwrap_or_default()),
        );
        tenants.push(job.tenant.as_deref());
        traces.push(job.traceparent.as_deref());
        orderings.push(job.ordering_key.as_deref());
        rate_keys.push(job.rate_key.as_deref());
    }
    // A batch without rate keys binds no array: the missing column unnests as null.
    let rate_keys = rate_keys.iter().any(Option::is_some).then_some(rate_keys);
    let mut ids: Vec<JobId> = sqlx::query_scalar(sql::ENQUEUE_MANY)
        .bind(kinds)
        .bind(queues)
        .bind(priorities)
        .bind(payloads)
        .bind(versions)
        .bind(max_attempts)
        .bind(run_ats)
        .bind(delays)
        .bind(deadline_ats)
        .bind(deadline_mss)
        .bind(tags)
        .bind(tenants)
        .bind(traces)
        .bind(orderings)
        .bind(rate_keys)
        .fetch_all(executor)
        .await
        .map_err(|e| refused(jobs, "enqueue_many", e))?;
    // Rows are inserted in input order, so their identity ids ascend in input order; sorting
    // makes the answer independent of the order RETURNING happens to emit them in.
    ids.sort_unstable();
    Ok(ids)
}

/// What the database said when it refused a job: a refusal of the table's rules (the
/// `jobs_admission` trigger and the `jobs_*_check` constraints, SQLSTATE 23514) names its
/// column, and becomes the same error the Rust-side check gives; anything else is a storage
/// error. `jobs` are those the statement inserted (none for a statement that inserts no job):
/// a payload over the limit is [`EnqueueError::PayloadTooLarge`] naming the kind of the one
/// refused.
fn refused(jobs: &[NewJob], statement: &'static str, error: sqlx::Error) -> EnqueueError {
    let pg = match &error {
        sqlx::Error::Database(db) => db.try_downcast_ref::<PgDatabaseError>(),
        _ => None,
    };
    // A time outside PostgreSQL's own range does not even bind: the parameter is named.
    if let Some(pg) = pg.filter(|pg| pg.code() == "22008") {
        let option = match pg.r#where() {
            Some(w) if w.ends_with("parameter $7") => Some("run_at"),
            Some(w) if w.ends_with("parameter $9") => Some("deadline"),
            _ => None,
        };
        if let Some(option) = option {
            return EnqueueError::InvalidOption {
                option,
                reason: format!("{} (PostgreSQL's own range)", pg.message()),
            };
        }
    }
    // `job.enqueue_unique` names the argument it refuses (migration 0052), in the table's
    // words: "invalid enqueue argument `p_priority`: must be between 0 and 32767, got -1".
    if let Some(pg) = pg.filter(|pg| pg.code() == "22023") {
        let named = pg
            .message()
            .strip_prefix("invalid enqueue argument `p_")
            .and_then(|rest| rest.split_once("`: "));
        if let Some((argument, reason)) = named {
            if let Some(option) = option_named(argument) {
                return EnqueueError::InvalidOption {
                    option,
                    reason: reason.to_owned(),
                };
            }
        }
    }
    let Some(pg) = pg.filter(|pg| pg.code() == "23514") else {
        return Error::query(statement)(error).into();
    };
    let column = pg.column().map(str::to_owned).or_else(|| {
        pg.constraint()
            .and_then(|c| c.strip_prefix("jobs_")?.strip_suffix("_check"))
            .map(str::to_owned)
    });
    let Some(option) = column.as_deref().and_then(option_named) else {
        return Error::query(statement)(error).into();
    };
    // "job row refused: `payload` is 5 bytes, over the limit of 4 bytes"
    let message = pg.message();
    let reason = message
        .split_once(&format!("`{option}` "))
        .map_or(message, |(_, reason)| reason);
    if option == "payload" {
        let numbers: Vec<usize> = reason
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|n| n.parse().ok())
            .collect();
        if let ([size, limit], true) = (numbers.as_slice(), reason.contains("over the limit")) {
            if let Some(job) = over_the_limit(jobs, *size, *limit) {
                return EnqueueError::PayloadTooLarge {
                    kind: job.kind.clone(),
                    size: *size,
                    limit: *limit,
                };
            }
        }
    }
    EnqueueError::InvalidOption {
        option,
        reason: reason.to_owned(),
    }
}

/// The option of [`EnqueueError::InvalidOption`] a refused column or argument is.
fn option_named(name: &str) -> Option<&'static str> {
    Some(match name {
        "kind" => "kind",
        "queue" => "queue",
        "payload" => "payload",
        "tags" => "tags",
        "tenant" => "tenant",
        "unique_key" => "unique_key",
        "unique_scope" => "unique_scope",
        "run_at" => "run_at",
        "deadline" => "deadline",
        "priority" => "priority",
        "max_attempts" => "max_attempts",
        "payload_version" => "payload_version",
        "depends_on" => "depends_on",
        _ => return None,
    })
}

/// Which of `jobs` the database refused as `size` bytes, over `limit`. The rows are inserted
/// (and checked) in input order, so it is the first whose payload, as `jsonb` prints it,
/// is over the limit; that text is estimated from the payload's ([`jsonb_text_len`]): the
/// first estimated at `size`, else the first estimated over `limit`, else the largest.
fn over_the_limit(jobs: &[NewJob], size: usize, limit: usize) -> Option<&NewJob> {
    if let [job] = jobs {
        return Some(job);
    }
    let sizes: Vec<usize> = jobs.iter().map(|j| jsonb_text_len(&j.payload)).collect();
    let at = sizes
        .iter()
        .position(|&n| n == size)
        .or_else(|| sizes.iter().position(|&n| n > limit))
        .or_else(|| (0..sizes.len()).max_by_key(|&i| sizes[i]))?;
    jobs.get(at)
}

/// About the length of JSON text `json` once PostgreSQL's `jsonb` prints it (what the payload
/// limit measures): whitespace between tokens dropped, a space after each `:` and `,`. Exact
/// for compact text such as serde_json's, but for numbers `jsonb` writes otherwise (`1e3`),
/// escapes it writes otherwise (`\u00e9`) and duplicate keys (it keeps the last).
fn jsonb_text_len(json: &str) -> usize {
    let (mut n, mut in_string, mut escaped) = (0, false, false);
    for b in json.bytes() {
        if in_string {
            n += 1;
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b':' | b',' => n += 2,
            b'"' => {
                in_string = true;
                n += 1;
            }
            _ => n += 1,
        }
    }
    n
}

/// `run_at` as the two binds of the insert statements: an absolute time, or a delay in
/// milliseconds from the database's now.
fn split_run_at(run_at: RunAt) -> (Option<DateTime<Utc>>, i64) {
    match run_at {
        RunAt::Now => (None, 0),
        RunAt::In(delay) => (None, duration_millis(delay)),
        RunAt::At(at) => (Some(at), 0),
    }
}

/// A deadline as the two binds of the insert statements: an absolute time, or a delay in
/// milliseconds from the database's now; both null for none.
fn split_deadline(deadline: Option<Deadline>) -> (Option<DateTime<Utc>>, Option<i64>) {
    match deadline {
        None => (None, None),
        Some(Deadline::At(at)) => (Some(at), None),
        Some(Deadline::In(delay)) => (None, Some(duration_millis(delay))),
    }
}

/// The PostgreSQL backend, as job-core's generic enqueue names it: `E: EnqueueExecutor<PgBackend>`
/// is any of `&PgPool`, `&mut PgConnection` (`&mut *tx` of a transaction) and
/// `&mut PoolConnection<Postgres>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PgBackend {}

/// One job through `conn`: one statement, or two in a transaction when it has dependencies.
async fn enqueue_any<'a, A>(conn: A, job: &NewJob) -> Result<JobId, EnqueueError>
where
    A: Acquire<'a, Database = Postgres> + PgExecutor<'a>,
{
    if job.depends_on.is_empty() {
        enqueue(conn, job).await
    } else {
        let ids = enqueue_with_dependencies(conn, std::slice::from_ref(job)).await?;
        Ok(ids[0])
    }
}

/// Many jobs through `conn`: one statement, or two in a transaction when any has dependencies.
async fn enqueue_many_any<'a, A>(conn: A, jobs: &[NewJob]) -> Result<Vec<JobId>, EnqueueError>
where
    A: Acquire<'a, Database = Postgres> + PgExecutor<'a>,
{
    if jobs.iter().all(|j| j.depends_on.is_empty()) {
        enqueue_many(conn, jobs).await
    } else {
        enqueue_with_dependencies(conn, jobs).await
    }
}

impl EnqueueExecutor<PgBackend> for &PgPool {
    fn enqueue_job(self, job: &NewJob) -> impl Future<Output = Result<JobId, EnqueueError>> + Send {
        enqueue_any(self, job)
    }

    fn enqueue_jobs(
        self,
        jobs: &[NewJob],
    ) -> impl Future<Output = Result<Vec<JobId>, EnqueueError>> + Send {
        enqueue_many_any(self, jobs)
    }
}

impl EnqueueExecutor<PgBackend> for &mut PgConnection {
    fn enqueue_job(self, job: &NewJob) -> impl Future<Output = Result<JobId, EnqueueError>> + Send {
        enqueue_any(self, job)
    }

    fn enqueue_jobs(
        self,
        jobs: &[NewJob],
    ) -> impl Future<Output = Result<Vec<JobId>, EnqueueError>> + Send {
        enqueue_many_any(self, jobs)
    }
}

impl EnqueueExecutor<PgBackend> for &mut PoolConnection<Postgres> {
    fn enqueue_job(self, job: &NewJob) -> impl Future<Output = Result<JobId, EnqueueError>> + Send {
        enqueue_any(&mut **self, job)
    }

    fn enqueue_jobs(
        self,
        jobs: &[NewJob],
    ) -> impl Future<Output = Result<Vec<JobId>, EnqueueError>> + Send {
        enqueue_many_any(&mut **self, jobs)
    }
}
