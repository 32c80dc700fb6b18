//! `job-bench`: throughput and latency benchmarks of the job framework against a real
//! PostgreSQL server.
//!
//! ```text
//! cargo run --release -p job-bench -- WORKLOAD [--jobs N] [--concurrency C] [options]
//! ```
//!
//! Workloads: `drain`, `enqueue`, `enqueue_bulk`, `latency`, `backlog`, `soak`, `compare`,
//! `idle`, and `drain_sqlite`, `latency_sqlite` on the embedded SQLite store (see `--help`).
//! The server is `DATABASE_URL`, else `postgres://postgres@127.0.0.1:5432/test`;
//! that database is only the admin connection: every run creates a database of its own and
//! drops it at the end (`--keep-db NAME` keeps one, for the backlog that is slow to build).
//! Results are printed as one JSON object per line on stdout.

mod args;
mod child;
mod compare;
mod db;
mod drain;
mod enqueue;
mod idle;
mod jobs;
mod latency;
#[cfg(feature = "meter")]
mod meter;
mod report;
mod soak;
mod sqlite;

use std::process::ExitCode;

use args::Args;

/// Errors of a benchmark run: any of them ends it with a message.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The result of a benchmark step.
pub(crate) type Result<T, E = BoxError> = std::result::Result<T, E>;

fn main() -> ExitCode {
    let args = <Args as clap::Parser>::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("job-bench: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(args));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("job-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<()> {
    match args.workload.as_str() {
        "worker" => child::worker_main(&args).await,
        "drain" => drain::drain(&args).await,
        "backlog" => drain::backlog(&args).await,
        "enqueue" => enqueue::enqueue(&args).await,
        "enqueue_bulk" => enqueue::enqueue_bulk(&args).await,
        "latency" => latency::latency(&args).await,
        "soak" => soak::soak(&args).await,
        "compare" => compare::compare(&args).await,
        "idle" => idle::idle(&args).await,
        "drain_sqlite" => sqlite::drain(&args).await,
        "latency_sqlite" => sqlite::latency(&args).await,
        other => Err(format!("unknown workload {other:?} (see --help)").into()),
    }
}
