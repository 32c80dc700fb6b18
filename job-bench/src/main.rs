//! `job-bench`: throughput and latency benchmarks of the job framework against a real
//! PostgreSQL server.
//!
//! ```text
//! cargo run --release -p job-bench -- WORKLOAD [--jobs N] [--concurrency C] [options]
//! ```
//!
//! Workloads: `drain`, `enqueue`, `enqueue_bulk`, `latency`, `backlog`, `soak` (see
//! [`USAGE`]). The server is `DATABASE_URL`, else `postgres://postgres@127.0.0.1:5432/test`;
//! that database is only the admin connection: every run creates a database of its own and
//! drops it at the end (`--keep-db NAME` keeps one, for the backlog that is slow to build).
//! Results are printed as one JSON object per line on stdout.

mod args;
mod child;
mod db;
mod drain;
mod enqueue;
mod jobs;
mod latency;
#[cfg(feature = "meter")]
mod meter;
mod report;
mod soak;

use std::process::ExitCode;

use args::Args;

/// Errors of a benchmark run: any of them ends it with a message.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The result of a benchmark step.
pub(crate) type Result<T, E = BoxError> = std::result::Result<T, E>;

const USAGE: &str = "\
usage: job-bench WORKLOAD [--jobs N] [--concurrency C] [options]

workloads:
  drain         pre-enqueue N (20000) no-op jobs in bulk, time one worker until all are
                finalized; also the bare claim + finalize SQL in the same loop (raw_jobs_per_s)
  enqueue       N (5000) single enqueues, each its own transaction, through the typed helper,
                interleaved with plain single-row INSERTs into a scratch table
  enqueue_bulk  N (100000) jobs through the bulk API
  latency       an idle worker; N (200) jobs enqueued one at a time --gap-ms (20) apart;
                enqueue commit to handler start
  backlog       drain with --completed (1000000) completed and --waiting (1000000) waiting rows
                already in the table; reports the worker's peak RSS
  soak          a producer at --rate (70% of a quick drain) for --seconds (600), one line per
                --interval (60) seconds

options:
  --jobs N              jobs to run or insert
  --concurrency C       worker concurrency (10), or producer connections for enqueue (1)
  --claim-batch B       WorkerConfig::claim_batch of the worker (library default)
  --finalize-batch B    WorkerConfig::finalize_batch of the worker (library default)
  --prefetch P          WorkerConfig::prefetch of the worker (library default: 0)
  --retention S         seconds the worker's pruner keeps completed jobs (a year; soak: twice
                        --interval, so that the pruner works during the soak)
  --keep-db NAME        use (and create when missing) database NAME and do not drop it
  --database-url URL    the server (else DATABASE_URL, else postgres://postgres@127.0.0.1:5432/test)
  --runs K              repeat the measurement K times, one line each (drain, backlog) (1)
  --gap-ms MS           latency: time between enqueues (20)
  --completed N         backlog: completed rows (1000000)
  --waiting N           backlog: waiting rows (1000000)
  --waiting-kind MODE   backlog: `future` (same queue and kind, scheduled in 30 days; default) or
                        `other-kind` (due now, of a kind the worker does not run, same queue)
  --no-baseline         backlog: skip the empty-table drain it is compared with
  --rate R              soak: jobs per second to produce
  --seconds S           soak: duration (600)
  --interval S          soak: seconds per report line (60)
  --vacuum-every S      soak: run VACUUM (ANALYZE) job.jobs every S seconds (0: never)

experiments (drain's raw loop):
  --raw-only            run only the raw loop
  --raw-claim-sql FILE  claim with this statement instead of claim.sql (same parameters)
  --raw-finalize-sql F  finalize with this statement instead of finalize.sql
  --raw-claim-limit L   ask for L jobs per claim whatever the free slots (prefetch)
  --raw-set NAME=VALUE  a session setting on the raw loop's connections (repeatable)
  --raw-setup-sql FILE  run this SQL in the benchmark's database first (e.g. a function the
                        experiment's claim calls)";

fn main() -> ExitCode {
    if matches!(
        std::env::args().nth(1).as_deref(),
        Some("--help" | "-h" | "help")
    ) {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("job-bench: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
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
        other => Err(format!("unknown workload {other:?}\n{USAGE}").into()),
    }
}
