//! The drain and latency workloads on the embedded SQLite store (`drain_sqlite`,
//! `latency_sqlite`): a fresh database file in a temporary directory, the worker in this
//! process (SQLite is for one machine; there is no server to share the cores with).

use std::time::{Duration, Instant};

use job::{Admin, JobFilter, JobState, SqliteStore};
use serde_json::json;

use crate::args::Args;
use crate::jobs::{Noop, Ping, Starts, QUEUE};
use crate::report::{emit, per_s, percentile, round};
use crate::Result;

/// A fresh migrated store in a temporary directory (removed when the guard drops).
async fn fresh() -> Result<(SqliteStore, tempfile::TempDir)> {
    let dir = tempfile::Builder::new().prefix("job-bench-").tempdir()?;
    let store = SqliteStore::open(dir.path().join("bench.sqlite")).await?;
    Ok((store, dir))
}

async fn completed(store: &SqliteStore) -> Result<u64> {
    Ok(store
        .stats(&JobFilter::default())
        .await?
        .in_state(JobState::Completed))
}

/// W1 on SQLite: bulk-enqueue N no-op jobs, time one worker until every job is completed
/// (polled every 5 ms).
pub(crate) async fn drain(args: &Args) -> Result<()> {
    let n = args.jobs_or(20_000);
    let c = args.concurrency_or(10);
    let (store, _dir) = fresh().await?;
    job::Enqueue::many(store.pool(), (0..n).map(|_| Noop {})).await?;
    let t0 = Instant::now();
    let handle = job::Worker::builder(store.clone())
        .register::<Noop>()
        .queue(QUEUE, c)
        .config(args.worker_config())
        .build()?
        .start();
    let until = t0 + Duration::from_secs(600);
    while completed(&store).await? < n as u64 {
        if Instant::now() > until {
            return Err("the drain did not finish within 600 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let seconds = t0.elapsed().as_secs_f64();
    handle.shutdown().await;
    emit(&json!({
        "workload": "drain_sqlite",
        "jobs": n,
        "concurrency": c,
        "prefetch": args.prefetch,
        "claim_batch": args.claim_batch,
        "seconds": round(seconds, 3),
        "jobs_per_s": per_s(n, seconds),
        "completed": completed(&store).await?,
    }));
    store.pool().close().await;
    Ok(())
}

/// W3 on SQLite: an idle worker; N jobs enqueued one at a time `--gap-ms` apart through the
/// typed helper on the store's pool; enqueue commit to handler start.
pub(crate) async fn latency(args: &Args) -> Result<()> {
    let n = args.jobs_or(200);
    let c = args.concurrency_or(10);
    let gap = Duration::from_secs_f64(args.gap_ms / 1e3);
    let (store, _dir) = fresh().await?;
    let starts = Starts::default();
    let handle = job::Worker::builder(store.clone())
        .register::<Ping>()
        .queue(QUEUE, c)
        .config(args.worker_config())
        .state(starts.clone())
        .build()?
        .start();
    let mut warm = Vec::new();
    for _ in 0..5 {
        warm.push(Ping {}.enqueue(store.pool()).await?);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_started(&starts, &warm).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut sent = Vec::with_capacity(n);
    let t0 = tokio::time::Instant::now();
    for i in 0..n {
        tokio::time::sleep_until(t0 + gap * u32::try_from(i).unwrap_or(u32::MAX)).await;
        let id = Ping {}.enqueue(store.pool()).await?;
        sent.push((id, Instant::now()));
    }
    let ids: Vec<i64> = sent.iter().map(|s| s.0).collect();
    wait_started(&starts, &ids).await?;
    let seconds = t0.elapsed().as_secs_f64();
    handle.shutdown().await;
    let mut lat: Vec<f64> = sent
        .iter()
        .map(|(id, committed)| {
            let started = starts.get(*id).unwrap_or(*committed);
            match started.checked_duration_since(*committed) {
                Some(d) => d.as_secs_f64() * 1e3,
                None => -(committed.duration_since(started).as_secs_f64() * 1e3),
            }
        })
        .collect();
    lat.sort_by(f64::total_cmp);
    emit(&json!({
        "workload": "latency_sqlite",
        "jobs": n,
        "concurrency": c,
        "gap_ms": args.gap_ms,
        "seconds": round(seconds, 3),
        "p50_ms": round(percentile(&lat, 50.0), 3),
        "p90_ms": round(percentile(&lat, 90.0), 3),
        "p99_ms": round(percentile(&lat, 99.0), 3),
        "max_ms": round(lat[lat.len() - 1], 3),
        "min_ms": round(lat[0], 3),
    }));
    store.pool().close().await;
    Ok(())
}

async fn wait_started(starts: &Starts, ids: &[i64]) -> Result<()> {
    let until = Instant::now() + Duration::from_secs(60);
    while ids.iter().any(|id| starts.get(*id).is_none()) {
        if Instant::now() > until {
            return Err("some jobs did not start within 60 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}
