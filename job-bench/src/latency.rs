//! `latency`: an idle worker (in this process), jobs enqueued one at a time; the time from
//! the enqueue's commit (its autocommit statement returned) to the handler's start.

use std::time::{Duration, Instant};

use job::PgStore;
use serde_json::json;
use sqlx::postgres::PgListener;

use crate::args::Args;
use crate::db::BenchDb;
use crate::drain::{raw_finalize, RawClaim, FINALIZE_SQL};
use crate::jobs::{Ping, Starts, QUEUE};
use crate::report::{emit, percentile, round};
use crate::Result;

/// Waits until the handler of every id in `ids` has started.
async fn wait_started(starts: &Starts, ids: &[i64], within: Duration) -> Result<()> {
    let until = Instant::now() + within;
    while ids.iter().any(|id| starts.get(*id).is_none()) {
        if Instant::now() > until {
            return Err(format!("some jobs did not start within {within:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

pub(crate) async fn latency(args: &Args) -> Result<()> {
    let n = args.jobs_or(200);
    let c = args.concurrency_or(10);
    let gap = Duration::from_secs_f64(args.gap_ms / 1e3);
    let db = BenchDb::open(&args.database_url, args.keep_db.as_deref()).await?;
    let result = async {
        let producer = db.pool(2).await?;
        let worker_pool = db.pool(10).await?;
        let starts = Starts::default();
        let handle = job::Worker::builder(PgStore::new(worker_pool.clone()))
            .register::<Ping>()
            .queue(QUEUE, c)
            .config(args.worker_config())
            .state(starts.clone())
            .build()?
            .start();
        // Warm up: the listener connected, the fetcher's statement prepared, then idle.
        let mut warm = Vec::new();
        for _ in 0..5 {
            warm.push(Ping {}.enqueue(&producer).await?);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        wait_started(&starts, &warm, Duration::from_secs(30)).await?;
        tokio::time::sleep(Duration::from_millis(300)).await;

        let mut sent = Vec::with_capacity(n);
        let t0 = tokio::time::Instant::now();
        for i in 0..n {
            tokio::time::sleep_until(t0 + gap * i as u32).await;
            let before = Instant::now();
            let id = Ping {}.enqueue(&producer).await?;
            let committed = Instant::now();
            sent.push((id, committed, committed - before));
        }
        let ids: Vec<i64> = sent.iter().map(|s| s.0).collect();
        wait_started(&starts, &ids, Duration::from_secs(60)).await?;
        let seconds = t0.elapsed().as_secs_f64();
        handle.shutdown().await;
        let completed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM job.jobs WHERE kind = $1 AND state = 'completed' AND id = ANY($2)",
        )
        .bind(<Ping as job::Job>::KIND)
        .bind(&ids)
        .fetch_one(&producer)
        .await?;
        if usize::try_from(completed).ok() != Some(n) {
            return Err(format!("{completed} of {n} latency jobs completed").into());
        }

        let lat = latencies(&sent, &starts);
        let mut rtt: Vec<f64> = sent.iter().map(|s| s.2.as_secs_f64() * 1e3).collect();
        rtt.sort_by(f64::total_cmp);

        // The floor of the same path without the framework: a plain sqlx listener on the
        // store's channel, and on each notification the bare claim.sql until the queue is empty.
        let claim_sql = crate::drain::RawSpec::new(args, c)?.claim_sql;
        let raw = raw_latency(&db, &producer, n, gap, c, &claim_sql).await?;
        emit(&json!({
            "workload": "latency",
            "jobs": n,
            "concurrency": c,
            "gap_ms": args.gap_ms,
            "seconds": round(seconds, 3),
            "p50_ms": round(percentile(&lat, 50.0), 3),
            "p90_ms": round(percentile(&lat, 90.0), 3),
            "p99_ms": round(percentile(&lat, 99.0), 3),
            "max_ms": round(lat[lat.len() - 1], 3),
            "min_ms": round(lat[0], 3),
            "mean_ms": round(lat.iter().sum::<f64>() / lat.len() as f64, 3),
            "enqueue_p50_ms": round(percentile(&rtt, 50.0), 3),
            "enqueue_p99_ms": round(percentile(&rtt, 99.0), 3),
            "completed": completed,
            "raw_p50_ms": round(percentile(&raw, 50.0), 3),
            "raw_p99_ms": round(percentile(&raw, 99.0), 3),
            "raw_max_ms": round(raw[raw.len() - 1], 3),
        }));
        producer.close().await;
        worker_pool.close().await;
        Ok(())
    }
    .await;
    db.close().await?;
    result
}

type Sent = (i64, Instant, Duration);

/// Commit to start per job, in milliseconds, sorted. Signed: a handler may start before the
/// producer has read its commit's answer.
fn latencies(sent: &[Sent], starts: &Starts) -> Vec<f64> {
    let mut lat: Vec<f64> = sent
        .iter()
        .map(|(id, committed, _)| {
            let started = starts.get(*id).unwrap_or(*committed);
            match started.checked_duration_since(*committed) {
                Some(d) => d.as_secs_f64() * 1e3,
                None => -(committed.duration_since(started).as_secs_f64() * 1e3),
            }
        })
        .collect();
    lat.sort_by(f64::total_cmp);
    lat
}

/// The latency workload against a bare listener + claim loop; commit to claim-returned.
async fn raw_latency(
    db: &BenchDb,
    producer: &sqlx::PgPool,
    n: usize,
    gap: Duration,
    limit: usize,
    claim_sql: &str,
) -> Result<Vec<f64>> {
    let pool = db.pool(3).await?;
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.listen(job_postgres::CHANNEL).await?;
    let claimer = RawClaim::new(
        claim_sql,
        <Ping as job::Job>::KIND,
        <Ping as job::Job>::VERSION,
        <Ping as job::Job>::OPTIONS.lease,
    )?;
    let starts = Starts::default();
    // Prepare the statement first, as the warmed-up worker has.
    claimer.claim(&pool, limit).await?;
    let claimer_task = tokio::spawn(claim_on_notify(
        listener,
        claimer,
        pool.clone(),
        limit,
        starts.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut sent = Vec::with_capacity(n);
    let t0 = tokio::time::Instant::now();
    for i in 0..n {
        tokio::time::sleep_until(t0 + gap * i as u32).await;
        let before = Instant::now();
        let id = Ping {}.enqueue(producer).await?;
        let committed = Instant::now();
        sent.push((id, committed, committed - before));
    }
    let ids: Vec<i64> = sent.iter().map(|s| s.0).collect();
    let waited = wait_started(&starts, &ids, Duration::from_secs(60)).await;
    claimer_task.abort();
    pool.close().await;
    waited?;
    Ok(latencies(&sent, &starts))
}

/// On each notification, claims (and completes) until fewer than `limit` come back, recording
/// when each claim returned.
async fn claim_on_notify(
    mut listener: PgListener,
    claimer: RawClaim,
    pool: sqlx::PgPool,
    limit: usize,
    starts: Starts,
) -> Result<()> {
    loop {
        listener.recv().await?;
        loop {
            let rows = claimer.claim(&pool, limit).await?;
            let now = Instant::now();
            {
                let mut map = starts.0.lock().unwrap_or_else(|e| e.into_inner());
                for (id, _) in &rows {
                    map.insert(*id, now);
                }
            }
            if !rows.is_empty() {
                raw_finalize(&pool, FINALIZE_SQL, &rows).await?;
            }
            if rows.len() < limit {
                break;
            }
        }
    }
}
