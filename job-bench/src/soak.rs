//! `soak`: a producer at a fixed rate against one worker (a child process) for a long time,
//! one report line per interval: throughput, the oldest waiting job, dead tuples, sizes, RSS.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::{Executor, PgPool, Row};

use crate::args::Args;
use crate::child::ChildWorker;
use crate::db::BenchDb;
use crate::drain::{preload, worker_drain};
use crate::jobs::{Noop, QUEUE};
use crate::report::{emit, per_s, proc_status_mib, round};
use crate::Result;

/// Jobs in the quick drain that sets the default rate.
const CALIBRATION_JOBS: usize = 10_000;
/// The producer inserts what is due every tick, in one bulk statement.
const TICK: Duration = Duration::from_millis(10);
/// The most jobs one producer statement inserts.
const MAX_STATEMENT: u64 = 10_000;
/// Stable: every interval after the first finishes at least this share of what was produced…
const STABLE_SHARE: f64 = 0.95;
/// …and the oldest waiting job is never older than this.
const STABLE_OLDEST_S: f64 = 5.0;

/// Inserts `rate` jobs per second until `stop`, catching up when a statement was slow.
async fn produce(
    pool: PgPool,
    rate: f64,
    produced: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Result<()> {
    let start = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let due = (rate * start.elapsed().as_secs_f64()) as u64;
        let have = produced.load(Ordering::Relaxed);
        let k = due.saturating_sub(have).min(MAX_STATEMENT);
        if k > 0 {
            job::Enqueue::<Noop>::many(&pool, (0..k).map(|_| Noop {})).await?;
            produced.fetch_add(k, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Runs `VACUUM (ANALYZE) job.jobs` every `every` until `stop` (stands in for autovacuum and
/// autoanalyze when the server has them off). Returns the seconds spent vacuuming.
async fn vacuum(pool: PgPool, every: Duration, stop: Arc<AtomicBool>) -> Result<f64> {
    let mut spent = 0.0;
    let mut next = tokio::time::Instant::now() + every;
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if tokio::time::Instant::now() >= next {
            let t = Instant::now();
            pool.execute("VACUUM (ANALYZE) job.jobs").await?;
            spent += t.elapsed().as_secs_f64();
            next = tokio::time::Instant::now() + every;
        }
    }
    Ok(spent)
}

/// One sample of the database's side.
struct Sample {
    at: DateTime<Utc>,
    line: Value,
    oldest_s: f64,
}

async fn sample(pool: &PgPool, since: DateTime<Utc>) -> Result<(Sample, i64)> {
    let at: DateTime<Utc> = sqlx::query_scalar("SELECT now()").fetch_one(pool).await?;
    let finished: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job.jobs WHERE finalized_at > $1 AND finalized_at <= $2",
    )
    .bind(since)
    .bind(at)
    .fetch_one(pool)
    .await?;
    let waiting = sqlx::query(
        "SELECT count(*) AS n, coalesce(extract(epoch FROM now() - min(run_at))::float8, 0) AS oldest
         FROM job.jobs
         WHERE queue = $1 AND priority = 0 AND state IN ('available', 'scheduled', 'retryable')
           AND run_at <= now()",
    )
    .bind(QUEUE)
    .fetch_one(pool)
    .await?;
    let oldest_s: f64 = waiting.try_get("oldest")?;
    let running: i64 =
        sqlx::query_scalar("SELECT count(*) FROM job.jobs WHERE locked_until IS NOT NULL")
            .fetch_one(pool)
            .await?;
    let stats = sqlx::query(
        "SELECT n_live_tup, n_dead_tup, coalesce(vacuum_count + autovacuum_count, 0) AS vacuums,
                pg_relation_size('job.jobs') AS heap, pg_relation_size('job.jobs_claim_idx') AS claim_idx,
                pg_relation_size('job.jobs_pkey') AS pkey, pg_total_relation_size('job.jobs') AS total
         FROM pg_stat_user_tables WHERE schemaname = 'job' AND relname = 'jobs'",
    )
    .fetch_one(pool)
    .await?;
    let mib = |col: &str| -> Result<f64> {
        Ok(round(stats.try_get::<i64, _>(col)? as f64 / 1048576.0, 1))
    };
    let line = json!({
        "waiting": waiting.try_get::<i64, _>("n")?,
        "running": running,
        "oldest_waiting_s": round(oldest_s, 3),
        "n_live_tup": stats.try_get::<i64, _>("n_live_tup")?,
        "n_dead_tup": stats.try_get::<i64, _>("n_dead_tup")?,
        "vacuums": stats.try_get::<i64, _>("vacuums")?,
        "heap_mib": mib("heap")?,
        "claim_idx_mib": mib("claim_idx")?,
        "pkey_mib": mib("pkey")?,
        "total_mib": mib("total")?,
    });
    Ok((Sample { at, line, oldest_s }, finished))
}

pub(crate) async fn soak(args: &Args) -> Result<()> {
    // The pruner deletes what finished more than two intervals ago: after the interval that
    // counted it, so the counts are whole, and the table stops growing.
    let mut args = args.clone();
    args.retention.get_or_insert(2.0 * args.interval);
    let args = &args;
    let c = args.concurrency_or(10);
    let db = BenchDb::open(&args.database_url, args.keep_db.as_deref()).await?;
    let result = async {
        let pool = db.pool(4).await?;
        pool.execute("TRUNCATE job.jobs CASCADE").await?;
        let (rate, calibration) = match args.rate {
            Some(r) => (r, None),
            None => {
                let batch = preload(&pool, CALIBRATION_JOBS).await?;
                let w = worker_drain(&db, &pool, &batch, c, args).await?;
                let measured = per_s(CALIBRATION_JOBS, w.seconds);
                pool.execute("TRUNCATE job.jobs CASCADE").await?;
                (round(0.7 * measured, 1), Some(measured))
            }
        };
        pool.execute("VACUUM ANALYZE job.jobs").await?;
        let vacuum_every =
            (args.vacuum_every > 0.0).then(|| Duration::from_secs_f64(args.vacuum_every));
        eprintln!(
            "job-bench: soak at {rate} jobs/s for {} s (calibration drain: {calibration:?} jobs/s)",
            args.seconds
        );

        let mut child = ChildWorker::spawn(&db.url(), c, args, &Default::default())?;
        child.started().await?;
        let produced = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let producer = tokio::spawn(produce(
            db.pool(2).await?,
            rate,
            produced.clone(),
            stop.clone(),
        ));
        let vacuumer = match vacuum_every {
            Some(every) => Some(tokio::spawn(vacuum(db.pool(1).await?, every, stop.clone()))),
            None => None,
        };
        let start = Instant::now();
        let mut since: DateTime<Utc> = sqlx::query_scalar("SELECT now()").fetch_one(&pool).await?;
        let mut last_produced = 0u64;
        let mut total_finished = 0i64;
        let mut stable = true;
        let mut max_oldest = 0.0f64;
        let mut last_line = Value::Null;
        let intervals = (args.seconds / args.interval).ceil().max(1.0) as u32;
        for i in 1..=intervals {
            let end = Duration::from_secs_f64((args.interval * f64::from(i)).min(args.seconds));
            tokio::time::sleep_until(tokio::time::Instant::from_std(start + end)).await;
            if producer.is_finished() {
                stop.store(true, Ordering::Relaxed);
                producer.await??;
                return Err("the producer stopped".into());
            }
            let (s, finished) = sample(&pool, since).await?;
            let span = (s.at - since).num_microseconds().unwrap_or(0) as f64 / 1e6;
            let now_produced = produced.load(Ordering::Relaxed);
            let enqueued = now_produced - last_produced;
            total_finished += finished;
            if i > 1 && (finished as f64) < STABLE_SHARE * enqueued as f64 {
                stable = false;
            }
            if s.oldest_s > STABLE_OLDEST_S {
                stable = false;
            }
            max_oldest = max_oldest.max(s.oldest_s);
            let mut line = json!({
                "workload": "soak",
                "interval": i,
                "t_s": round(start.elapsed().as_secs_f64(), 1),
                "rate": rate,
                "enqueued": enqueued,
                "completed": finished,
                "jobs_per_s": round(finished as f64 / span, 1),
                "worker_rss_mib": proc_status_mib(Some(child.pid()), "VmRSS"),
            });
            if let (Some(o), Some(extra)) = (line.as_object_mut(), s.line.as_object()) {
                o.extend(extra.clone());
            }
            emit(&line);
            last_line = line;
            since = s.at;
            last_produced = now_produced;
        }
        let seconds = start.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        producer.await??;
        let vacuum_s = match vacuumer {
            Some(v) => Some(round(v.await??, 2)),
            None => None,
        };
        let report = child.stop().await?;
        let total = produced.load(Ordering::Relaxed);
        emit(&json!({
            "workload": "soak",
            "summary": true,
            "jobs": total,
            "concurrency": c,
            "seconds": round(seconds, 1),
            "rate": rate,
            "calibration_jobs_per_s": calibration,
            "jobs_per_s": round(total_finished as f64 / seconds, 1),
            "completed": total_finished,
            "stable": stable,
            "stable_rule": format!(
                "every interval after the first completes >= {STABLE_SHARE} of what it enqueued \
                 and the oldest waiting job stays <= {STABLE_OLDEST_S} s"
            ),
            "max_oldest_waiting_s": round(max_oldest, 3),
            "final_n_dead_tup": last_line["n_dead_tup"],
            "final_total_mib": last_line["total_mib"],
            "vacuum_every_s": vacuum_every.map(|d| d.as_secs_f64()),
            "retention_s": args.retention,
            "prefetch": args.worker_config().prefetch.to_string(),
            "claim_batch": args.worker_config().claim_batch,
            "vacuum_busy_s": vacuum_s,
            "peak_rss_mib": report["peak_rss_mib"],
            "worker": report["meters"],
        }));
        pool.close().await;
        Ok(())
    }
    .await;
    db.close().await?;
    result
}
