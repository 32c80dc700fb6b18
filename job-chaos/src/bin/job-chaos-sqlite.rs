//! `job-chaos-sqlite`: a worker process over one SQLite file, for the real-process SIGKILL
//! test of the SQLite store (`tests/sigkill_sqlite.rs`). It runs `chaos.sqlite_work` jobs
//! until its stdin closes (so it never outlives its parent), then drains and exits with code 0.
//!
//! ```text
//! job-chaos-sqlite DATABASE_FILE WORKER_ID
//! ```
//!
//! Each job records its start in `chaos_starts` (its own statement), works 40–120 ms, then
//! writes its effect to `chaos_effects` and completes itself with `complete_in` in one
//! immediate transaction: the effect exists exactly when the job is completed, once.

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use job_core::{Job, JobContext, JobError, JobOptions, Worker};
use job_sqlite::SqliteStore;
use serde::{Deserialize, Serialize};
use sqlx::SqlitePool;

/// The work of the SQLite chaos test.
#[derive(Debug, Serialize, Deserialize)]
struct SqliteWork {
    n: u32,
}

impl Job for SqliteWork {
    const KIND: &'static str = "chaos.sqlite_work";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_millis(900),
        max_attempts: 50,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let pool = ctx.state::<SqlitePool>()?;
        let worker = ctx.state::<String>()?;
        sqlx::query("INSERT INTO chaos_starts (job_id, attempt, worker) VALUES (?1, ?2, ?3)")
            .bind(ctx.id())
            .bind(ctx.attempt())
            .bind(worker.as_str())
            .execute(pool)
            .await?;
        let ms = 40 + (u64::from(self.n) * 37 + u64::try_from(ctx.attempt()).unwrap_or(0)) % 80;
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
        sqlx::query("INSERT INTO chaos_effects (job_id, attempt, worker) VALUES (?1, ?2, ?3)")
            .bind(ctx.id())
            .bind(ctx.attempt())
            .bind(worker.as_str())
            .execute(&mut *tx)
            .await?;
        job_sqlite::complete_in(&mut tx, &ctx).await?;
        tx.commit().await?;
        Ok(())
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(worker_id)) = (args.next(), args.next()) else {
        eprintln!("usage: job-chaos-sqlite DATABASE_FILE WORKER_ID");
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async move {
        let store = match SqliteStore::open(&path).await {
            Ok(store) => store,
            Err(e) => {
                eprintln!("job-chaos-sqlite: {e}");
                return ExitCode::FAILURE;
            }
        };
        let worker = Worker::builder(store.clone())
            .id(worker_id.clone())
            .register::<SqliteWork>()
            .queue("default", 8)
            .configure(|c| {
                c.rescuer.interval = Duration::from_millis(100);
                c.poll_interval = Duration::from_millis(50);
                c.drain_timeout = Duration::from_secs(2);
            })
            .state(store.pool().clone())
            .state(worker_id)
            .build()
            .expect("a valid worker")
            .start();
        // Stop when stdin closes: the parent ended (or closed it to ask for a drain).
        let (closed, stdin_closed) = tokio::sync::oneshot::channel::<()>();
        std::thread::spawn(move || {
            let mut sink = [0u8; 64];
            while matches!(std::io::stdin().read(&mut sink), Ok(n) if n > 0) {}
            let _ = closed.send(());
        });
        let _ = stdin_closed.await;
        worker.shutdown().await;
        ExitCode::SUCCESS
    })
}
