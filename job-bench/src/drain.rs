//! `drain` and `backlog`: a pre-enqueued batch of no-op jobs, one worker (a child process),
//! timed from the worker's start until the database says every job is finalized; and the bare
//! claim + finalize SQL in the same loop shape, timed the same way.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use job::Job;
use serde_json::{json, Value};
use sqlx::{Executor, PgConnection, PgPool, Row};
use tokio::sync::{mpsc, Semaphore};
use uuid::Uuid;

use crate::args::{Args, WaitingKind};
use crate::child::{wait_handled, ChildWorker, Handled, WORKER_APP};
use crate::db::{self, BenchDb};
use crate::jobs::{Noop, OTHER_KIND, QUEUE};
use crate::report::{backend_cpu_s, emit, loadavg, median, per_s, proc_cpu_s, round};
use crate::Result;

/// The claim and finalize statements the store runs, verbatim.
pub(crate) const CLAIM_SQL: &str = include_str!("../../job-postgres/src/sql/claim.sql");
pub(crate) const FINALIZE_SQL: &str = include_str!("../../job-postgres/src/sql/finalize.sql");

/// True once no job of this run waits or runs. The run's jobs are the due ones with
/// `run_at >= $2` (the database time taken before they were inserted), which keeps the
/// backlog's rows out: those scheduled in the future fail `run_at <= now()`, those of the
/// other kind are older. None of the batch waits (available, through jobs_claim_idx, in its
/// order so that it is planned as an index probe whatever the statistics say: as `EXISTS` it
/// was planned as a sequential scan, which walked every claimed row before the first waiting
/// one; due scheduled or retryable, through jobs_due_idx) and nothing runs (jobs_rescue_idx).
/// It is asked only once the workers ran every job (see [`child`](crate::child)), and then
/// every [`POLL_EVERY`] until it holds; while outcomes are still being written, the first
/// probe (running jobs, the smallest index) answers alone.
const DONE_SQL: &str = "\
SELECT NOT (
    EXISTS (SELECT 1 FROM job.jobs WHERE locked_until IS NOT NULL)
    OR (SELECT id FROM job.jobs
        WHERE queue = $1 AND kind = $3 AND priority = 0 AND state = 'available' AND run_at >= $2
        ORDER BY queue, kind, priority, run_at, id
        LIMIT 1) IS NOT NULL
    OR EXISTS (SELECT 1 FROM job.jobs
               WHERE queue = $1 AND state IN ('scheduled', 'retryable')
                 AND run_at >= $2 AND run_at <= now()))";

/// The highest `$N` in `sql`: how many parameters the statement takes.
pub(crate) fn param_count(sql: &str) -> usize {
    let b = sql.as_bytes();
    let mut max = 0;
    for i in 0..b.len() {
        if b[i] == b'$' {
            let digits: String = b[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .map(|c| *c as char)
                .collect();
            if let Ok(n) = digits.parse::<usize>() {
                max = max.max(n);
            }
        }
    }
    max
}

/// The `application_name` of the raw loop's connections.
const RAW_APP: &str = "job-bench-raw";

/// How often the poller asks.
const POLL_EVERY: Duration = Duration::from_millis(5);

/// The jobs inserted per bulk statement when preloading.
const PRELOAD_CHUNK: usize = 10_000;

/// A batch of jobs ready to drain.
pub(crate) struct Prepared {
    /// Database time before the insert: every job of the batch has `run_at >= since`.
    since: DateTime<Utc>,
    /// Every job of the batch has an id above this.
    base_id: i64,
    n: usize,
}

/// Inserts `n` no-op jobs through the typed bulk API, then `VACUUM ANALYZE` (a steady-state
/// table: statistics and visibility map current, as autovacuum would leave them).
pub(crate) async fn preload(pool: &PgPool, n: usize) -> Result<Prepared> {
    let (since, base_id): (DateTime<Utc>, i64) =
        sqlx::query_as("SELECT now(), coalesce(max(id), 0) FROM job.jobs")
            .fetch_one(pool)
            .await?;
    let mut left = n;
    while left > 0 {
        let k = left.min(PRELOAD_CHUNK);
        job::Enqueue::<Noop>::many(pool, (0..k).map(|_| Noop {})).await?;
        left -= k;
    }
    pool.execute("VACUUM ANALYZE job.jobs").await?;
    Ok(Prepared { since, base_id, n })
}

/// What the poller saw.
pub(crate) struct Polled {
    pub(crate) polls: u64,
    pub(crate) mean_ms: f64,
}

/// Polls [`DONE_SQL`] every [`POLL_EVERY`] until it holds.
pub(crate) async fn wait_done(
    conn: &mut PgConnection,
    batch: &Prepared,
    within: Duration,
) -> Result<Polled> {
    let start = Instant::now();
    let mut polls = 0u64;
    let mut busy = Duration::ZERO;
    loop {
        let asked = Instant::now();
        let done: bool = sqlx::query_scalar(DONE_SQL)
            .bind(QUEUE)
            .bind(batch.since)
            .bind(Noop::KIND)
            .fetch_one(&mut *conn)
            .await?;
        busy += asked.elapsed();
        polls += 1;
        if done {
            return Ok(Polled {
                polls,
                mean_ms: round(busy.as_secs_f64() * 1e3 / polls as f64, 3),
            });
        }
        if start.elapsed() > within {
            return Err(format!("jobs still unfinished after {within:?}").into());
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// A generous bound on a drain of `n` jobs.
fn deadline(n: usize) -> Duration {
    Duration::from_secs(120) + Duration::from_millis(n as u64)
}

/// Counts the batch's completed jobs (must be all of them); with `gone_is_done` (an
/// experiment's finalize that deletes), those no longer in the table count too.
async fn completed(pool: &PgPool, batch: &Prepared, gone_is_done: bool) -> Result<i64> {
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE state = 'completed')
                + CASE WHEN $3 THEN $4 - count(*) ELSE 0 END
         FROM job.jobs WHERE id > $1 AND kind = $2",
    )
    .bind(batch.base_id)
    .bind(Noop::KIND)
    .bind(gone_is_done)
    .bind(batch.n as i64)
    .fetch_one(pool)
    .await?;
    if usize::try_from(n).ok() != Some(batch.n) {
        return Err(format!("{n} of {} jobs completed", batch.n).into());
    }
    Ok(n)
}

/// One worker drain: the worker in a child process, timed from its start until done.
pub(crate) struct WorkerDrain {
    pub(crate) seconds: f64,
    pub(crate) completed: i64,
    pub(crate) polled: Polled,
    /// The child's `stopped` report.
    pub(crate) report: Value,
    /// CPU per job of the worker process and of its server backends (since they started).
    pub(crate) cpu: Value,
}

pub(crate) async fn worker_drain(
    db: &BenchDb,
    pool: &PgPool,
    batch: &Prepared,
    concurrency: usize,
    args: &Args,
) -> Result<WorkerDrain> {
    let mut poller = db::connect(pool).await?;
    let told = Handled::default();
    let mut children = Vec::with_capacity(args.workers);
    for _ in 0..args.workers {
        children.push(ChildWorker::spawn(&db.url(), concurrency, args, &told)?);
    }
    for child in &mut children {
        child.started().await?;
    }
    let start = Instant::now();
    let within = deadline(batch.n);
    wait_handled(&children, &told, batch.n as u64, within).await?;
    let polled = wait_done(&mut poller, batch, within.saturating_sub(start.elapsed())).await?;
    let seconds = start.elapsed().as_secs_f64();
    let (pg_cpu, backends) = backend_cpu_s(pool, WORKER_APP).await?;
    let worker_cpu: f64 = children
        .iter()
        .map(|c| proc_cpu_s(Some(c.pid())).unwrap_or(0.0))
        .sum();
    let mut reports = Vec::with_capacity(children.len());
    for child in &mut children {
        reports.push(child.stop().await?);
    }
    // The first worker's report (with several workers, each reports its own).
    let report = reports.swap_remove(0);
    let completed = completed(pool, batch, false).await?;
    let n = batch.n as f64;
    let cpu = json!({
        "pg_us_per_job": round(pg_cpu * 1e6 / n, 1),
        "worker_us_per_job": round(worker_cpu * 1e6 / n, 1),
        "backends": backends,
    });
    Ok(WorkerDrain {
        seconds,
        completed,
        polled,
        report,
        cpu,
    })
}

/// What the raw loop runs: the store's statements unless an experiment swaps one in.
#[derive(Debug, Clone)]
pub(crate) struct RawSpec {
    pub(crate) claim_sql: String,
    pub(crate) finalize_sql: String,
    pub(crate) concurrency: usize,
    /// The worker's prefetch: claimed jobs held beyond the running ones.
    pub(crate) prefetch: usize,
    pub(crate) claim_batch: usize,
    /// Ask for this many per claim whatever the free slots (a prefetching fetcher).
    pub(crate) claim_limit: Option<usize>,
    pub(crate) finalize_batch: usize,
    /// Session settings of the raw loop's connections.
    pub(crate) settings: Vec<String>,
    /// Raw loops side by side.
    pub(crate) loops: usize,
    /// The finalize statement deletes what it finishes.
    pub(crate) finalize_deletes: bool,
    /// An experiment's SQL ran in the database first (`--raw-setup-sql`).
    pub(crate) setup: bool,
}

impl RawSpec {
    pub(crate) fn new(args: &Args, concurrency: usize) -> Result<RawSpec> {
        let read = |path: &Option<String>, default: &str| -> Result<String> {
            Ok(match path {
                Some(p) => std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?,
                None => default.to_owned(),
            })
        };
        let config = args.worker_config();
        Ok(RawSpec {
            claim_sql: read(&args.raw_claim_sql, CLAIM_SQL)?,
            finalize_sql: read(&args.raw_finalize_sql, FINALIZE_SQL)?,
            concurrency,
            prefetch: config.prefetch.max(),
            claim_batch: config.claim_batch as usize,
            claim_limit: args.raw_claim_limit,
            finalize_batch: config.finalize_batch,
            settings: args.raw_settings.clone(),
            loops: args.raw_loops as usize,
            finalize_deletes: args.raw_finalize_deletes,
            setup: args.raw_setup_sql.is_some(),
        })
    }

    /// Whether an experiment changed anything from the store's loop.
    pub(crate) fn is_experiment(&self) -> bool {
        self.claim_sql != CLAIM_SQL
            || self.finalize_sql != FINALIZE_SQL
            || self.claim_limit.is_some()
            || self.loops != 1
            || self.finalize_deletes
            || self.setup
    }
}

/// The same loop without the framework: one task claims as many jobs as there are free slots
/// plus the prefetch (up to the claim batch) with `claim.sql`; each claimed job "runs" (frees
/// its slot) at once and goes to a completer task that writes whatever accumulated, up to the
/// finalize batch, with `finalize.sql`. Two connections, as the worker's fetcher and completer
/// use. An outcome the finalize skipped (its row held a moment by another loop's claim, which
/// keeps a row it found claimed since its snapshot locked until it commits) is written again,
/// as the worker's completer does.
async fn raw_loop(pool: PgPool, spec: RawSpec) -> Result<u64> {
    let slots = Arc::new(Semaphore::new(spec.concurrency + spec.prefetch));
    let (tx, mut rx) = mpsc::unbounded_channel::<(i64, Uuid)>();
    let completer_pool = pool.clone();
    let finalize_batch = spec.finalize_batch;
    let finalize_sql = spec.finalize_sql.clone();
    let completer = tokio::spawn(async move {
        let mut batch = Vec::with_capacity(finalize_batch.min(1024));
        let mut written = 0u64;
        while let Some(first) = rx.recv().await {
            batch.push(first);
            while batch.len() < finalize_batch {
                match rx.try_recv() {
                    Ok(item) => batch.push(item),
                    Err(_) => break,
                }
            }
            let mut tries = 0;
            while !batch.is_empty() {
                let applied = raw_finalize(&completer_pool, &finalize_sql, &batch).await?;
                written += applied.len() as u64;
                let applied: HashSet<i64> = applied.into_iter().collect();
                let mut ord = 0;
                batch.retain(|_| {
                    ord += 1;
                    !applied.contains(&ord)
                });
                tries += 1;
                if tries == RAW_FINALIZE_TRIES && !batch.is_empty() {
                    return Err(format!(
                        "{} outcomes still unwritten after {tries} finalizes",
                        batch.len()
                    )
                    .into());
                }
            }
        }
        Ok::<_, crate::BoxError>(written)
    });
    let claimer = RawClaim::new(
        &spec.claim_sql,
        Noop::KIND,
        Noop::VERSION,
        Noop::OPTIONS.lease,
    )?;
    if !(8..=9).contains(&param_count(&spec.finalize_sql)) {
        return Err("finalize.sql changed parameters: update job-bench's raw loop".into());
    }
    loop {
        let first = slots.clone().acquire_owned().await?;
        let mut permits = vec![first];
        while permits.len() < spec.claim_batch {
            match slots.clone().try_acquire_owned() {
                Ok(p) => permits.push(p),
                Err(_) => break,
            }
        }
        let limit = spec.claim_limit.unwrap_or(permits.len());
        let rows = claimer.claim(&pool, limit).await?;
        if rows.is_empty() {
            break;
        }
        drop(permits);
        for row in rows {
            tx.send(row).map_err(|_| "the raw completer stopped")?;
        }
    }
    drop(tx);
    completer.await?
}

/// `claim.sql` (or an experiment's statement of the same parameters) for one kind, bound the
/// way the store binds it.
pub(crate) struct RawClaim {
    sql: String,
    params: usize,
    kinds: Vec<&'static str>,
    versions: Vec<i32>,
    leases: Vec<i64>,
    caps: Vec<Option<i32>>,
}

impl RawClaim {
    pub(crate) fn new(
        sql: &str,
        kind: &'static str,
        version: i32,
        lease: Duration,
    ) -> Result<RawClaim> {
        // $1..$6: queue, kinds, versions, leases, limit, worker; $7 (newer claim.sql): each
        // kind's concurrency limit, none here; $8 (newer still): rate-limited kinds to stay
        // ahead of, none here.
        let params = param_count(sql);
        if !(6..=8).contains(&params) {
            return Err("claim.sql changed parameters: update job-bench's raw loop".into());
        }
        Ok(RawClaim {
            sql: sql.to_owned(),
            params,
            kinds: vec![kind],
            versions: vec![version],
            leases: vec![job_core::duration_millis(lease)],
            caps: vec![None],
        })
    }

    /// Claims up to `limit` jobs: their ids and lease tokens.
    pub(crate) async fn claim(&self, pool: &PgPool, limit: usize) -> Result<Vec<(i64, Uuid)>> {
        let mut claim = sqlx::query(&self.sql)
            .bind(QUEUE)
            .bind(&self.kinds)
            .bind(&self.versions)
            .bind(&self.leases)
            .bind(limit as i32)
            .bind("bench-raw");
        if self.params >= 7 {
            claim = claim.bind(&self.caps);
        }
        if self.params >= 8 {
            claim = claim.bind(Vec::<String>::new());
        }
        let rows = claim.fetch_all(pool).await?;
        rows.iter()
            .map(|row| Ok((row.try_get("id")?, row.try_get("lock_token")?)))
            .collect()
    }
}

/// How often the raw completer writes an outcome its finalize skipped before it gives up (a
/// row held for good, or an experiment's statement that returns the wrong ordinalities).
const RAW_FINALIZE_TRIES: u32 = 1_000;

/// `finalize.sql` (or an experiment's statement) completing every job of `batch`: the
/// ordinalities (from 1) of those it wrote.
pub(crate) async fn raw_finalize(
    pool: &PgPool,
    sql: &str,
    batch: &[(i64, Uuid)],
) -> Result<Vec<i64>> {
    let n = batch.len();
    let ids: Vec<i64> = batch.iter().map(|b| b.0).collect();
    let tokens: Vec<Uuid> = batch.iter().map(|b| b.1).collect();
    let mut finalize = sqlx::query_scalar(sql)
        .bind(ids)
        .bind(tokens)
        .bind(vec!["completed"; n])
        .bind(vec![None::<i64>; n])
        .bind(vec![false; n])
        .bind(vec![None::<i32>; n])
        .bind(vec![None::<&str>; n])
        .bind(vec![None::<String>; n]);
    // $9 (finalize.sql since migration 0010): each item's result, none for no-op jobs. An
    // experiment's statement of the older eight parameters is bound without it.
    if sql.contains("$9") {
        finalize = finalize.bind(vec![None::<&str>; n]);
    }
    Ok(finalize.fetch_all(pool).await?)
}

/// How PostgreSQL planned the pool's prepared statements: per statement (its first comment
/// line), executions with a generic plan and with a custom (re-planned) one.
async fn plan_counts(pool: &PgPool) -> Result<Value> {
    let mut held = Vec::new();
    for _ in 0..pool.size() {
        held.push(pool.acquire().await?);
    }
    let mut out = serde_json::Map::new();
    for conn in &mut held {
        let rows = sqlx::query(
            "SELECT split_part(statement, E'\n', 1) AS head, generic_plans, custom_plans
             FROM pg_prepared_statements",
        )
        .fetch_all(&mut **conn)
        .await?;
        for row in rows {
            let head: String = row.try_get("head")?;
            let name = if head.contains("Claims") {
                "claim"
            } else if head.contains("Applies") || head.contains("applies") {
                "finalize"
            } else {
                continue;
            };
            let entry = out
                .entry(name)
                .or_insert_with(|| json!({ "generic_plans": 0, "custom_plans": 0 }));
            for col in ["generic_plans", "custom_plans"] {
                let n: i64 = row.try_get(col)?;
                entry[col] = json!(entry[col].as_i64().unwrap_or(0) + n);
            }
        }
    }
    Ok(Value::Object(out))
}

/// The raw loop over `batch`, timed like the worker (from start until the poller says done).
pub(crate) async fn raw_drain(
    db: &BenchDb,
    pool: &PgPool,
    batch: &Prepared,
    spec: &RawSpec,
) -> Result<(f64, i64, Value)> {
    let mut poller = db::connect(pool).await?;
    // Per loop a claimer and a completer, and one more.
    let raw_pool = db
        .pool_with(2 * spec.loops as u32 + 1, RAW_APP, &spec.settings)
        .await?;
    let (pg_before, _) = backend_cpu_s(pool, RAW_APP).await?;
    let client_before = proc_cpu_s(None).unwrap_or(0.0);
    let start = Instant::now();
    // The loop ends once a claim finds nothing and its completer wrote every outcome; then
    // the poller confirms, as for the worker (no poll while it runs).
    let within = deadline(batch.n);
    let loops: Vec<_> = (0..spec.loops)
        .map(|_| tokio::spawn(raw_loop(raw_pool.clone(), spec.clone())))
        .collect();
    for raw in loops {
        tokio::time::timeout(within.saturating_sub(start.elapsed()), raw)
            .await
            .map_err(|_| format!("the raw loop did not end within {within:?}"))???;
    }
    let polled = wait_done(&mut poller, batch, within.saturating_sub(start.elapsed())).await?;
    let seconds = start.elapsed().as_secs_f64();
    let client = proc_cpu_s(None).unwrap_or(0.0) - client_before;
    let (pg_after, backends) = backend_cpu_s(pool, RAW_APP).await?;
    let plans = plan_counts(&raw_pool).await?;
    raw_pool.close().await;
    let n = batch.n as f64;
    let cpu = json!({
        "pg_us_per_job": round((pg_after - pg_before) * 1e6 / n, 1),
        "client_us_per_job": round(client * 1e6 / n, 1),
        "backends": backends,
        "polls": polled.polls,
    });
    Ok((
        seconds,
        completed(pool, batch, spec.finalize_deletes).await?,
        json!({ "plans": plans, "cpu": cpu }),
    ))
}

/// Refuses a kept database that holds a backlog: `drain` truncates the table.
async fn refuse_backlog_db(pool: &PgPool, db: &BenchDb) -> Result<()> {
    let has: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM bench.meta WHERE key = 'backlog')")
            .fetch_one(pool)
            .await?;
    if has {
        return Err(format!(
            "database {} holds a backlog: drain truncates job.jobs, use another one",
            db.name()
        )
        .into());
    }
    Ok(())
}

pub(crate) async fn drain(args: &Args) -> Result<()> {
    let n = args.jobs_or(20_000);
    let c = args.concurrency_or(10);
    let db = BenchDb::open(&args.database_url, args.keep_db.as_deref()).await?;
    let result = async {
        let pool = db.pool(4).await?;
        refuse_backlog_db(&pool, &db).await?;
        let spec = RawSpec::new(args, c)?;
        if let Some(path) = &args.raw_setup_sql {
            let setup = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
            pool.execute(setup.as_str()).await?;
        }
        for run in 1..=args.runs {
            if args.raw_only {
                pool.execute("TRUNCATE job.jobs CASCADE").await?;
                let batch = preload(&pool, n).await?;
                let (raw_seconds, raw_completed, raw_plans) =
                    raw_drain(&db, &pool, &batch, &spec).await?;
                emit(&json!({
                    "workload": "drain",
                    "run": run,
                    "jobs": n,
                    "concurrency": c,
                    "seconds": round(raw_seconds, 3),
                    "raw_jobs_per_s": per_s(n, raw_seconds),
                    "raw_completed": raw_completed,
                    "raw": raw_plans,
                    "raw_experiment": spec.is_experiment(),
                    "raw_loops": spec.loops,
                    "raw_claim_limit": spec.claim_limit,
                    "loadavg": loadavg(),
                }));
                continue;
            }
            pool.execute("TRUNCATE job.jobs CASCADE").await?;
            let batch = preload(&pool, n).await?;
            let w = worker_drain(&db, &pool, &batch, c, args).await?;
            pool.execute("TRUNCATE job.jobs CASCADE").await?;
            let batch = preload(&pool, n).await?;
            let (raw_seconds, raw_completed, raw_plans) =
                raw_drain(&db, &pool, &batch, &spec).await?;
            let jobs_per_s = per_s(n, w.seconds);
            let raw_jobs_per_s = per_s(n, raw_seconds);
            emit(&json!({
                "workload": "drain",
                "run": run,
                "jobs": n,
                "concurrency": c,
                "workers": args.workers,
                "claim_batch": args.worker_config().claim_batch,
                "prefetch": args.worker_config().prefetch.to_string(),
                "seconds": round(w.seconds, 3),
                "jobs_per_s": jobs_per_s,
                "completed": w.completed,
                "raw_seconds": round(raw_seconds, 3),
                "raw_jobs_per_s": raw_jobs_per_s,
                "raw_completed": raw_completed,
                "vs_raw": round(jobs_per_s / raw_jobs_per_s, 3),
                "raw": raw_plans,
                "cpu": w.cpu,
                "raw_experiment": spec.is_experiment(),
                "raw_loops": spec.loops,
                "loadavg": loadavg(),
                "peak_rss_mib": w.report["peak_rss_mib"],
                "polls": w.polled.polls,
                "poll_ms": w.polled.mean_ms,
                "worker": w.report["meters"],
            }));
        }
        pool.close().await;
        Ok(())
    }
    .await;
    db.close().await?;
    result
}

/// The backlog's description, stored in `bench.meta` so a kept database is built once.
fn backlog_meta(args: &Args) -> Value {
    json!({
        "version": 1,
        "completed": args.completed,
        "waiting": args.waiting,
        "waiting_kind": args.waiting_kind.as_str(),
    })
}

/// Builds the backlog unless the database already holds this one; returns the highest id of
/// its rows (every drained job is above it).
async fn ensure_backlog(pool: &PgPool, db: &BenchDb, args: &Args) -> Result<i64> {
    let want = backlog_meta(args);
    let have: Option<String> =
        sqlx::query_scalar("SELECT value FROM bench.meta WHERE key = 'backlog'")
            .fetch_optional(pool)
            .await?;
    if let Some(have) = have {
        let have: Value = serde_json::from_str(&have)?;
        let mut shape = have.clone();
        if let Some(o) = shape.as_object_mut() {
            o.remove("max_id");
        }
        if shape != want {
            return Err(format!(
                "database {} holds another backlog ({have}); use another --keep-db",
                db.name()
            )
            .into());
        }
        return have["max_id"]
            .as_i64()
            .ok_or_else(|| "bench.meta backlog without max_id".into());
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM job.jobs")
        .fetch_one(pool)
        .await?;
    if rows > 0 {
        return Err(format!(
            "database {} has {rows} jobs but no backlog record; refusing to build over them",
            db.name()
        )
        .into());
    }
    let started = Instant::now();
    eprintln!(
        "job-bench: building the backlog in {} ({} completed, {} waiting {})",
        db.name(),
        args.completed,
        args.waiting,
        args.waiting_kind.as_str()
    );
    sqlx::query(
        "INSERT INTO job.jobs (kind, queue, priority, payload, state, attempt, run_at, created_at,
                               finalized_at)
         SELECT $2, $3, 0, '{}', 'completed', 1, t, t, t + interval '10 milliseconds'
         FROM (SELECT now() - interval '2 days' + g * interval '100 microseconds' AS t
               FROM generate_series(1, $1::bigint) g) s",
    )
    .bind(args.completed as i64)
    .bind(Noop::KIND)
    .bind(QUEUE)
    .execute(pool)
    .await?;
    // (rows, kind, state, first run_at) of each part of the waiting rows.
    let parts: Vec<(usize, &str, &str, &str)> = match args.waiting_kind {
        WaitingKind::Future => vec![(
            args.waiting,
            Noop::KIND,
            "scheduled",
            "now() + interval '30 days'",
        )],
        WaitingKind::OtherKind => vec![(
            args.waiting,
            OTHER_KIND,
            "available",
            "now() - interval '1 day'",
        )],
        WaitingKind::Mixed => vec![
            (
                args.waiting,
                Noop::KIND,
                "scheduled",
                "now() + interval '30 days'",
            ),
            (
                args.waiting / 10,
                OTHER_KIND,
                "available",
                "now() - interval '1 day'",
            ),
        ],
    };
    for (rows, kind, state, from) in parts {
        sqlx::query(&format!(
            "INSERT INTO job.jobs (kind, queue, priority, payload, state, run_at)
             SELECT $2, $3, 0, '{{}}', '{state}', {from} + g * interval '1 millisecond'
             FROM generate_series(1, $1::bigint) g"
        ))
        .bind(rows as i64)
        .bind(kind)
        .bind(QUEUE)
        .execute(pool)
        .await?;
    }
    pool.execute("VACUUM ANALYZE job.jobs").await?;
    let _ = pool.execute("CHECKPOINT").await;
    let max_id: i64 = sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM job.jobs")
        .fetch_one(pool)
        .await?;
    let mut meta = want;
    meta["max_id"] = json!(max_id);
    sqlx::query("INSERT INTO bench.meta (key, value) VALUES ('backlog', $1)")
        .bind(meta.to_string())
        .execute(pool)
        .await?;
    eprintln!(
        "job-bench: backlog built in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(max_id)
}

/// Takes the table back to the backlog as built: removes the rows of earlier drains.
async fn reset_backlog(pool: &PgPool, max_id: i64) -> Result<()> {
    sqlx::query("DELETE FROM job.jobs WHERE id > $1")
        .bind(max_id)
        .execute(pool)
        .await?;
    pool.execute("VACUUM ANALYZE job.jobs").await?;
    Ok(())
}

/// The table's and its indexes' sizes, in MiB.
async fn sizes(pool: &PgPool) -> Result<Value> {
    let row = sqlx::query(
        "SELECT pg_relation_size('job.jobs') AS heap,
                pg_relation_size('job.jobs_claim_idx') AS claim_idx,
                pg_total_relation_size('job.jobs') AS total",
    )
    .fetch_one(pool)
    .await?;
    let mib =
        |col: &str| -> Result<f64> { Ok(round(row.try_get::<i64, _>(col)? as f64 / 1048576.0, 1)) };
    Ok(
        json!({ "heap_mib": mib("heap")?, "claim_idx_mib": mib("claim_idx")?, "total_mib": mib("total")? }),
    )
}

pub(crate) async fn backlog(args: &Args) -> Result<()> {
    let n = args.jobs_or(20_000);
    let c = args.concurrency_or(10);
    let db = BenchDb::open(&args.database_url, args.keep_db.as_deref()).await?;
    let result = async {
        let pool = db.pool(4).await?;
        let max_id = ensure_backlog(&pool, &db, args).await?;
        let mut rates = Vec::new();
        for run in 1..=args.runs {
            reset_backlog(&pool, max_id).await?;
            let table = sizes(&pool).await?;
            let batch = preload(&pool, n).await?;
            let w = worker_drain(&db, &pool, &batch, c, args).await?;
            reset_backlog(&pool, max_id).await?;
            let jobs_per_s = per_s(n, w.seconds);
            rates.push(jobs_per_s);
            let mut line = json!({
                "workload": "backlog",
                "run": run,
                "jobs": n,
                "concurrency": c,
                "workers": args.workers,
                "claim_batch": args.worker_config().claim_batch,
                "prefetch": args.worker_config().prefetch.to_string(),
                "completed_rows": args.completed,
                "waiting_rows": args.waiting,
                "waiting_kind": args.waiting_kind.as_str(),
                "table": table,
                "seconds": round(w.seconds, 3),
                "jobs_per_s": jobs_per_s,
                "completed": w.completed,
                "peak_rss_mib": w.report["peak_rss_mib"],
                "polls": w.polled.polls,
                "poll_ms": w.polled.mean_ms,
                "worker": w.report["meters"],
                "cpu": w.cpu,
                "loadavg": loadavg(),
            });
            if args.baseline {
                // The same drain on an empty table, in a database of its own, right after.
                let empty = BenchDb::open(&args.database_url, None).await?;
                let base = async {
                    let epool = empty.pool(4).await?;
                    let batch = preload(&epool, n).await?;
                    let e = worker_drain(&empty, &epool, &batch, c, args).await?;
                    epool.close().await;
                    Ok::<_, crate::BoxError>(e)
                }
                .await;
                empty.close().await?;
                let e = base?;
                let empty_rate = per_s(n, e.seconds);
                line["empty_jobs_per_s"] = json!(empty_rate);
                line["empty_peak_rss_mib"] = e.report["peak_rss_mib"].clone();
                line["vs_empty"] = json!(round(jobs_per_s / empty_rate, 3));
                line["empty_cpu"] = e.cpu;
            }
            emit(&line);
        }
        if rates.len() > 1 {
            eprintln!("job-bench: backlog median {:.1} jobs/s", median(&rates));
        }
        pool.close().await;
        Ok(())
    }
    .await;
    db.close().await?;
    result
}
