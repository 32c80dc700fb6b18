//! `latency`: an idle worker (in this process), jobs enqueued one at a time; the time from
//! the enqueue's commit (its autocommit statement returned) to the handler's start.

use std::time::{Duration, Instant};

use job::PgStore;
use serde_json::json;

use crate::args::Args;
use crate::db::BenchDb;
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

        // Signed: a handler may start before the producer has read its commit's answer.
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
        let mut rtt: Vec<f64> = sent.iter().map(|s| s.2.as_secs_f64() * 1e3).collect();
        rtt.sort_by(f64::total_cmp);
        let seconds = t0.elapsed().as_secs_f64();
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
        }));
        producer.close().await;
        worker_pool.close().await;
        Ok(())
    }
    .await;
    db.close().await?;
    result
}
