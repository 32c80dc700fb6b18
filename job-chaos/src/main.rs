//! `job-chaos`: a worker process for the real-process chaos test. It runs `chaos.work` jobs
//! (see the library), and `chaos.rated` ones too with `--rated`, until SIGTERM or ctrl-c,
//! then drains and exits with code 0. With `--watch-stdin` it also stops when its stdin
//! closes, so it never outlives a parent that died without stopping it.
//!
//! ```text
//! job-chaos --database-url URL --worker-id ID [--concurrency N] [--prefetch P] [--seed S]
//!           [--current-thread] [--watch-stdin] [--rated] [--store-timeout-ms MS]
//! ```
//!
//! `--store-timeout-ms` sets `WorkerConfig::store_timeout` (the library's 60 s otherwise): the
//! silence test cuts connections off without a reset, and a call on one is given up after it.
//!
//! Without `--prefetch` the worker prefetches as measured (the library default).
//!
//! `--current-thread` runs the worker on a current-thread Tokio runtime instead of the
//! multi-thread one: a handler that blocks then blocks everything but the lease keeper.
//!
//! `DATABASE_URL`, `CHAOS_WORKER_ID`, `CHAOS_CONCURRENCY` and `CHAOS_SEED` stand in for
//! missing flags. The runtime's log (INFO and above, timestamped) goes to stdout, one line
//! written at a time, so a killed worker's log is complete up to its death.

use std::io::Read;
use std::process::ExitCode;
use std::time::Duration;

use job_postgres::PgStore;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

mod trace;

const USAGE: &str = "usage: job-chaos --database-url URL --worker-id ID [--concurrency N] \
                     [--prefetch P] [--seed S] [--current-thread] [--watch-stdin] [--rated] \
                     [--store-timeout-ms MS]";

struct Args {
    database_url: String,
    worker_id: String,
    concurrency: usize,
    prefetch: job_core::Prefetch,
    seed: u64,
    current_thread: bool,
    watch_stdin: bool,
    rated: bool,
    store_timeout: Option<Duration>,
}

impl Args {
    fn parse() -> Result<Args, String> {
        let mut url = std::env::var("DATABASE_URL").ok();
        let mut id = std::env::var("CHAOS_WORKER_ID").ok();
        let mut concurrency = std::env::var("CHAOS_CONCURRENCY").ok();
        let mut seed = std::env::var("CHAOS_SEED").ok();
        let mut prefetch = None;
        let mut watch_stdin = false;
        let mut current_thread = false;
        let mut rated = false;
        let mut store_timeout = None;
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
            match arg.as_str() {
                "--database-url" => url = Some(value()?),
                "--worker-id" => id = Some(value()?),
                "--concurrency" => concurrency = Some(value()?),
                "--seed" => seed = Some(value()?),
                "--prefetch" => prefetch = Some(value()?),
                "--watch-stdin" => watch_stdin = true,
                "--current-thread" => current_thread = true,
                "--rated" => rated = true,
                "--store-timeout-ms" => {
                    let ms = value()?;
                    let ms: u64 = ms
                        .parse()
                        .map_err(|_| format!("store timeout must be milliseconds, got {ms:?}"))?;
                    store_timeout = Some(Duration::from_millis(ms));
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        let concurrency = match concurrency {
            None => 8,
            Some(c) => c
                .parse()
                .ok()
                .filter(|c| *c > 0)
                .ok_or_else(|| format!("concurrency must be a positive integer, got {c:?}"))?,
        };
        let prefetch = match prefetch {
            None => job_core::Prefetch::default(),
            Some(p) => job_core::Prefetch::Fixed(
                p.parse()
                    .map_err(|_| format!("prefetch must be an unsigned integer, got {p:?}"))?,
            ),
        };
        let seed = match seed {
            None => 0,
            Some(s) => s
                .parse()
                .map_err(|_| format!("seed must be an unsigned integer, got {s:?}"))?,
        };
        Ok(Args {
            database_url: url.ok_or("no database: pass --database-url or set DATABASE_URL")?,
            worker_id: id.ok_or("no worker id: pass --worker-id or set CHAOS_WORKER_ID")?,
            concurrency,
            prefetch,
            seed,
            current_thread,
            watch_stdin,
            rated,
            store_timeout,
        })
    }
}

fn main() -> ExitCode {
    let args = match Args::parse() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("job-chaos: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = if args.current_thread {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    }
    .enable_all()
    .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run(args)),
        Err(e) => {
            eprintln!("job-chaos: cannot build the Tokio runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> ExitCode {
    trace::install();
    // Before anything else, so that a SIGTERM arriving during startup drains instead of
    // killing the process with the default action.
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("job-chaos: cannot install signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stdin_closed = stdin_closed(args.watch_stdin);
    let id = &args.worker_id;

    // The application's pool as the README advises: handlers are dropped mid-begin() by
    // timeouts, fences and shutdowns, and a plain sqlx pool would hand such connections on
    // inside a stale transaction.
    // Lazy: the first connection may go silent under the silence test (a worker started just
    // before its connections were cut off), and a worker whose first connect fails retries in
    // its loops like after any lost connection, instead of exiting.
    // Acquires wait up to 10 s: longer than a silenced connection holds its slot (a handler's
    // statement on it waits for the attempt's timeout), so that under the silence test a
    // handler's ledger write waits for a slot rather than fail its attempt (at 5 s, the
    // worker's own `ACQUIRE_TIMEOUT`, it failed 17 of them in a CI run). sqlx then spaces its
    // retries of a refused connection by up to 2 s after a restart.
    let pool = match job_postgres::pool_options()
        .max_connections((args.concurrency / 2 + 4) as u32)
        .acquire_timeout(Duration::from_secs(10))
        .connect_lazy(&args.database_url)
    {
        Ok(pool) => pool,
        Err(e) => {
            eprintln!("job-chaos {id}: cannot connect to the database: {e}");
            return ExitCode::FAILURE;
        }
    };
    let store = PgStore::new(pool.clone());
    let worker = match job_chaos::worker(
        store,
        id,
        args.concurrency,
        args.prefetch,
        args.seed,
        args.rated,
        args.store_timeout,
    ) {
        Ok(worker) => worker,
        Err(e) => {
            eprintln!("job-chaos {id}: invalid worker: {e}");
            return ExitCode::FAILURE;
        }
    };
    let handle = worker.start();
    println!(
        "job-chaos {id}: started, pid {}, concurrency {}",
        std::process::id(),
        args.concurrency
    );

    let why = tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
        _ = stdin_closed => "stdin closed",
    };
    println!("job-chaos {id}: {why}: draining");
    let stats = handle.stats();
    let report = handle.shutdown().await;
    // Closing waits for every connection to come back, and one a handler's statement holds on
    // a connection that went silent never would: bounded.
    if tokio::time::timeout(Duration::from_secs(5), pool.close())
        .await
        .is_err()
    {
        println!("job-chaos {id}: the application's pool did not close within 5s");
    }
    println!("job-chaos {id}: stopped: {report:?}; {stats:?}");
    ExitCode::SUCCESS
}

/// Completes when stdin reaches its end (or fails), if `watch`; never otherwise.
async fn stdin_closed(watch: bool) {
    if !watch {
        return std::future::pending().await;
    }
    let (tx, rx) = oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 256];
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
        let _ = tx.send(());
    });
    let _ = rx.await;
}
