//! A worker that serves its metrics to Prometheus over HTTP and stops gracefully on SIGTERM or
//! ctrl-c: the observability setup of the README's Observability section, running.
//!
//! Run with `cargo run --example prometheus`, then `curl http://127.0.0.1:9464/metrics` (or
//! point Prometheus at it, with `docs/prometheus-alerts.yml` as its rules). It enqueues a few
//! jobs of two owners (reports that report progress, charges: some retried, one a dead letter)
//! and runs them; stop it with ctrl-c or `kill -TERM`. It uses the database `job_prometheus`
//! on the server named by DATABASE_URL (default `postgres://postgres@127.0.0.1:5432/test`),
//! creating it when missing, and listens on METRICS_ADDR (default `127.0.0.1:9464`).

#[path = "support/db.rs"]
mod db;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use job::prelude::*;
use job::DrainReport;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};

/// Builds a report page by page, reporting its progress.
#[job(kind = "example.report", queue = "reports", owner = "analytics")]
pub async fn build_report(ctx: JobContext, pages: u32) -> Result<(), JobError> {
    for page in 1..=pages {
        tokio::time::sleep(Duration::from_millis(20)).await;
        ctx.progress(f64::from(page) / f64::from(pages), &format!("page {page}"));
    }
    Ok(())
}

/// Charges an amount: the gateway times out once on odd amounts, and a negative amount can
/// never be charged (a dead letter, owned by billing).
#[job(
    kind = "example.charge",
    queue = "billing",
    owner = "billing",
    retry = 2,
    backoff(base = "10ms", cap = "50ms")
)]
pub async fn charge(ctx: JobContext, cents: i64) -> Result<(), JobError> {
    if cents < 0 {
        return Err(JobError::terminal(format!("cannot charge {cents} cents")));
    }
    if cents % 2 == 1 && ctx.attempt() == 1 {
        return Err(JobError::retryable("payment gateway timed out"));
    }
    Ok(())
}

/// Latency buckets, in seconds, for the two histograms.
const BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Installs the Prometheus exporter on `addr` (an HTTP listener serving `/metrics`), with
/// histograms for the durations, and describes the framework's metrics to it.
pub fn serve_metrics(addr: SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)?
        .install()?;
    job::describe_metrics();
    Ok(())
}

/// Enqueues the example's jobs on `pool` and runs a worker until `stop` completes, then
/// drains. The reporter of the database gauges runs every second here (15 s by default).
pub async fn run(
    pool: &PgPool,
    stop: impl Future<Output = ()> + Send,
) -> Result<DrainReport, Box<dyn std::error::Error>> {
    let store = PgStore::new(pool.clone());
    store.migrate().await?;
    for pages in [3, 5, 8] {
        BuildReport { pages }.enqueue(pool).await?;
    }
    for cents in [1200, 999, 4500, 301, -5] {
        Charge { cents }.enqueue(pool).await?;
    }
    let worker = Worker::builder(store)
        .register::<BuildReport>()
        .register::<Charge>()
        .queue("reports", 2)
        .queue("billing", 4)
        .configure(|c| c.reporter.interval = Duration::from_secs(1))
        .build()?;
    Ok(worker.run_until(stop).await)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::var("METRICS_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:9464".to_owned())
        .parse()?;
    let server = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let options = db::ensure_database(&server, "job_prometheus").await?;
    let pool = job::pool_options()
        .max_connections(5)
        .connect_with(options)
        .await?;
    serve_metrics(addr)?;
    println!("metrics on http://{addr}/metrics; stop with ctrl-c or SIGTERM");
    // Installed now, so a signal from here on drains instead of killing the process.
    let stop = job::shutdown_signal();
    let report = run(&pool, stop).await?;
    println!(
        "stopped: finished in time {}, {} released, {} abandoned",
        report.finished_in_time, report.released, report.abandoned
    );
    Ok(())
}
