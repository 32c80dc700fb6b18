//! The worker as a process of its own: `job-bench worker ...` (hidden subcommand) runs one
//! worker until its stdin closes, so that its peak RSS is the worker's alone and the parent
//! measures it from outside, exactly like a deployed worker.
//!
//! Protocol on the child's stdout, one JSON object per line: `{"event":"started"}` once the
//! worker's tasks are spawned; `{"event":"handled","n":N}` whenever the count of `Noop`
//! handlers that ran changed (looked at [`HANDLED_EVERY`] after a handler ran, so at most that
//! often); then `{"event":"stopped", ...}` with its counters, the metered store's report and
//! `peak_rss_mib` after it drained.
//!
//! The parent waits for the handled count before it asks the database whether the drain is
//! done, as the graphile-worker harness counts its `job:complete` events first: a poll of the
//! database every few milliseconds throughout the drain would take a share of the server's
//! two cores from the system it measures.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{PgStore, Store};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};

use crate::args::Args;
use crate::jobs::{Noop, HANDLED, HANDLED_CHANGED, QUEUE};
use crate::report::{emit, proc_status_mib};
use crate::Result;

/// Connections in the worker's pool: sqlx's default, what an application gets from
/// `PgPool::connect`.
const WORKER_POOL: u32 = 10;

/// The `application_name` of the worker's connections, to find its server backends.
pub(crate) const WORKER_APP: &str = "job-bench-worker";

/// How long the child waits, after a handler ran, before it looks at its handled count (so
/// at most that often while jobs run, and never while none do).
const HANDLED_EVERY: Duration = Duration::from_millis(5);

/// The child's side: run a worker on `--database-url` until stdin reaches EOF.
pub(crate) async fn worker_main(args: &Args) -> Result<()> {
    let options: sqlx::postgres::PgConnectOptions = args.database_url.parse()?;
    let pool = crate::db::pool(options.application_name(WORKER_APP), WORKER_POOL).await?;
    #[cfg(feature = "meter")]
    {
        let meter = crate::meter::Meter::default();
        let store = job::Layered::new(PgStore::new(pool.clone()), meter.clone());
        run_worker(store, args, move || meter.report()).await?;
    }
    #[cfg(not(feature = "meter"))]
    run_worker(PgStore::new(pool.clone()), args, || Value::Null).await?;
    pool.close().await;
    Ok(())
}

async fn run_worker<S: Store>(store: S, args: &Args, meters: impl Fn() -> Value) -> Result<()> {
    let concurrency = args.concurrency_or(10);
    let handle = job::Worker::builder(store)
        .register::<Noop>()
        .queue(QUEUE, concurrency)
        .config(args.worker_config())
        .build()?
        .start();
    emit(&json!({ "event": "started" }));
    let counter = tokio::spawn(async {
        let mut told = 0;
        loop {
            HANDLED_CHANGED.notified().await;
            tokio::time::sleep(HANDLED_EVERY).await;
            let n = HANDLED.load(Ordering::Relaxed);
            if n != told {
                emit(&json!({ "event": "handled", "n": n }));
                told = n;
            }
        }
    });
    tokio::task::spawn_blocking(|| {
        let mut stdin = std::io::stdin();
        let mut buf = [0u8; 256];
        while matches!(stdin.read(&mut buf), Ok(n) if n > 0) {}
    })
    .await?;
    counter.abort();
    let stats = handle.stats();
    let drain = handle.shutdown().await;
    emit(&json!({
        "event": "stopped",
        "peak_rss_mib": proc_status_mib(None, "VmHWM"),
        "claimed": stats.claimed,
        "completed": stats.completed,
        "lease_lost": stats.lease_lost,
        "released": drain.released,
        "meters": meters(),
    }));
    Ok(())
}

/// The parent's side: a running child worker.
pub(crate) struct ChildWorker {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::UnboundedReceiver<String>,
    /// The child's latest handled count.
    handled: Arc<AtomicU64>,
}

/// Told whenever a child's handled count changes (shared by the children of one run).
pub(crate) type Handled = Arc<Notify>;

impl ChildWorker {
    /// Starts `job-bench worker` on `url` with this run's worker settings.
    pub(crate) fn spawn(
        url: &str,
        concurrency: usize,
        args: &Args,
        told: &Handled,
    ) -> Result<ChildWorker> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("worker")
            .arg("--database-url")
            .arg(url)
            .arg("--concurrency")
            .arg(concurrency.to_string());
        if let Some(b) = args.claim_batch {
            cmd.arg("--claim-batch").arg(b.to_string());
        }
        if let Some(b) = args.finalize_batch {
            cmd.arg("--finalize-batch").arg(b.to_string());
        }
        if let Some(p) = args.prefetch {
            cmd.arg("--prefetch").arg(p.to_string());
        }
        if let Some(r) = args.retention {
            cmd.arg("--retention").arg(r.to_string());
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().ok_or("child without stdout")?;
        let (tx, lines) = mpsc::unbounded_channel();
        let handled = Arc::new(AtomicU64::new(0));
        let (count, told) = (handled.clone(), told.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(n) = handled_count(&line) {
                    count.store(n, Ordering::Release);
                    told.notify_one();
                    continue;
                }
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(ChildWorker {
            stdin: child.stdin.take(),
            child,
            lines,
            handled,
        })
    }

    /// The `Noop` handlers it ran, as it last reported.
    pub(crate) fn handled(&self) -> u64 {
        self.handled.load(Ordering::Acquire)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    async fn event(&mut self, name: &str, within: Duration) -> Result<Value> {
        let wait = async {
            while let Some(line) = self.lines.recv().await {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) if v["event"] == name => return Ok(v),
                    _ => eprintln!("job-bench worker: {line}"),
                }
            }
            Err(format!("the worker process ended before `{name}`").into())
        };
        tokio::time::timeout(within, wait)
            .await
            .map_err(|_| format!("no `{name}` from the worker process within {within:?}"))?
    }

    /// Waits until the worker runs.
    pub(crate) async fn started(&mut self) -> Result<()> {
        self.event("started", Duration::from_secs(60))
            .await
            .map(drop)
    }

    /// Closes its stdin, waits for its drain and exit, and returns its `stopped` report.
    pub(crate) async fn stop(&mut self) -> Result<Value> {
        drop(self.stdin.take());
        let report = self.event("stopped", Duration::from_secs(90)).await?;
        let status = self.child.wait()?;
        if !status.success() {
            return Err(format!("the worker process exited with {status}").into());
        }
        Ok(report)
    }
}

/// The count of a `handled` line.
fn handled_count(line: &str) -> Option<u64> {
    if !line.contains("\"handled\"") {
        return None;
    }
    let v: Value = serde_json::from_str(line).ok()?;
    (v["event"] == "handled").then(|| v["n"].as_u64())?
}

/// Waits until `children` ran `n` handlers between them, or `within` passed.
pub(crate) async fn wait_handled(
    children: &[ChildWorker],
    told: &Handled,
    n: u64,
    within: Duration,
) -> Result<()> {
    let wait = async {
        loop {
            let notified = told.notified();
            if children.iter().map(ChildWorker::handled).sum::<u64>() >= n {
                return;
            }
            notified.await;
        }
    };
    tokio::time::timeout(within, wait).await.map_err(|_| {
        let got: u64 = children.iter().map(ChildWorker::handled).sum();
        format!("the workers ran {got} of {n} jobs within {within:?}").into()
    })
}

impl Drop for ChildWorker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
