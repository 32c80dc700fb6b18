//! `idle`: what an idle worker costs. One worker process (the library defaults) on a database
//! with nothing due for it, for `--seconds`: the CPU its process and its server backends used,
//! as a share of one core. With `--keep-db NAME` it runs over a kept backlog (for example the
//! `backlog --waiting-kind mixed` one: a million jobs scheduled next month and a hundred
//! thousand due jobs of a kind it does not run), which is what a claim must not pay for.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::args::Args;
use crate::child::{ChildWorker, WORKER_APP};
use crate::db::BenchDb;
use crate::report::{backend_cpu_s, emit, loadavg, proc_cpu_s, round};
use crate::Result;

pub(crate) async fn idle(args: &Args) -> Result<()> {
    let seconds = args.seconds.min(3600.0);
    let db = BenchDb::open(&args.database_url, args.keep_db.as_deref()).await?;
    let result = async {
        let pool = db.pool(2).await?;
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM job.jobs WHERE state IN ('scheduled', 'available', 'retryable')",
        )
        .fetch_one(&pool)
        .await?;
        let mut child = ChildWorker::spawn(
            &db.url(),
            args.concurrency_or(10),
            args,
            &Default::default(),
        )?;
        child.started().await?;
        // Let start-up work (connections, first passes of the services) pass.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let worker0 = proc_cpu_s(Some(child.pid())).unwrap_or(0.0);
        let (server0, _) = backend_cpu_s(&pool, WORKER_APP).await?;
        let start = Instant::now();
        tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
        let elapsed = start.elapsed().as_secs_f64();
        let worker1 = proc_cpu_s(Some(child.pid())).unwrap_or(0.0);
        let (server1, backends) = backend_cpu_s(&pool, WORKER_APP).await?;
        child.stop().await?;
        emit(&json!({
            "workload": "idle",
            "seconds": round(elapsed, 1),
            "waiting_rows": waiting,
            "worker_cpu_pct": round((worker1 - worker0) * 100.0 / elapsed, 2),
            "server_cpu_pct": round((server1 - server0) * 100.0 / elapsed, 2),
            "backends": backends,
            "loadavg": loadavg(),
        }));
        pool.close().await;
        Ok(())
    }
    .await;
    db.close().await?;
    result
}
