//! The benchmark's jobs, defined the way applications define theirs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::Notify;

use job::prelude::*;

/// The queue every benchmark job runs on.
pub(crate) const QUEUE: &str = "default";
/// A kind no benchmark worker registers (the backlog's `other-kind` waiting rows).
pub(crate) const OTHER_KIND: &str = "bench.unregistered";

/// `Noop` handlers run in this process (the worker child reports it; see `child.rs`).
pub(crate) static HANDLED: AtomicU64 = AtomicU64::new(0);

/// Told after each `Noop` handler ran, so that the child's reporter sleeps while nothing runs
/// (the `idle` workload measures the worker, not a reporter polling a counter).
pub(crate) static HANDLED_CHANGED: Notify = Notify::const_new();

/// Does nothing but count itself: the throughput workloads measure the framework, not a
/// handler.
#[job(kind = "bench.noop")]
pub(crate) async fn noop(_ctx: JobContext) -> Result<(), JobError> {
    HANDLED.fetch_add(1, Ordering::Relaxed);
    HANDLED_CHANGED.notify_one();
    Ok(())
}

/// When each `Ping` handler started, by job id (the latency workload's worker state; clones
/// share the map).
#[derive(Debug, Default, Clone)]
pub(crate) struct Starts(pub(crate) Arc<Mutex<HashMap<JobId, Instant>>>);

impl Starts {
    pub(crate) fn get(&self, id: JobId) -> Option<Instant> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&id)
            .copied()
    }
}

/// Records the instant its handler starts.
#[job(kind = "bench.ping")]
pub(crate) async fn ping(ctx: JobContext) -> Result<(), JobError> {
    let now = Instant::now();
    let starts = ctx.state::<Starts>()?;
    starts
        .0
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(ctx.id(), now);
    Ok(())
}
