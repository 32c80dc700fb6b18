//! Handlers that block threads: `std::thread::sleep` in async code, on a multi-thread runtime
//! whose every thread it blocks, and on a `current_thread` runtime. The lease keeper runs on a
//! thread and connections of its own, so their leases are renewed while they block, and no
//! other worker ever runs their jobs at the same time. Run against PostgreSQL (`tests/isolation`)
//! and SQLite (`tests/worker_sqlite`), whose store runs its write transactions on a thread of
//! its own: one driven by a blocked runtime would hold the file's write lock, and with it every
//! heartbeat, while the runtime is blocked.

use std::time::Duration;

use job::{Job, JobContext, JobError, JobOptions, JobState, Store};
use serde::{Deserialize, Serialize};

use crate::common::{enqueue, Harness, FAST_BACKOFF};
use crate::support::{Flavor, Remote, Timeline};

/// Blocks its thread for `ms`, well over its lease, without a single `.await`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Blocker {
    pub ms: u64,
}

/// Which worker runs a handler, for the timeline.
#[derive(Clone)]
pub struct WorkerName(pub &'static str);

impl Job for Blocker {
    const KIND: &'static str = "isolation.blocker";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_millis(500),
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let timeline = ctx.state::<Timeline>()?;
        let run = timeline.start(&ctx, ctx.state::<WorkerName>()?.0);
        std::thread::sleep(Duration::from_millis(self.ms));
        timeline.end(run);
        Ok(())
    }
}

fn blocking_worker<S: Store + Clone>(
    store: &S,
    timeline: &Timeline,
    name: &'static str,
    concurrency: usize,
) -> impl FnOnce() -> job::WorkerBuilder<S> + Send + 'static {
    let (store, timeline) = (store.clone(), timeline.clone());
    move || {
        let mut config = job::WorkerConfig::default();
        config.rescuer.interval = Duration::from_millis(100);
        config.poll_interval = Duration::from_millis(50);
        job::Worker::builder(store)
            .register::<Blocker>()
            .queue("default", concurrency)
            .config(config)
            .state(timeline)
            .state(WorkerName(name))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_handlers_keep_their_leases_on_every_runtime_and_never_run_twice_at_once() {
    let h = Harness::new().await;
    let timeline = Timeline::default();
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(enqueue(&h.store, Blocker { ms: 1200 }).await);
    }
    // Two runtimes whose every thread the handlers block, and a roomy one whose rescuer and
    // free threads would take over any lease the others let expire.
    let workers = [
        Remote::start(
            Flavor::Threads(2),
            blocking_worker(&h.store, &timeline, "two-threads", 2),
        ),
        Remote::start(
            Flavor::CurrentThread,
            blocking_worker(&h.store, &timeline, "current-thread", 1),
        ),
        Remote::start(
            Flavor::Threads(8),
            blocking_worker(&h.store, &timeline, "eight-threads", 4),
        ),
    ];
    let mut rows = Vec::new();
    for id in &ids {
        rows.push(h.reaches(*id, JobState::Completed).await);
    }
    let mut stats = Vec::new();
    for worker in workers {
        stats.push(worker.stop().await);
    }
    timeline.assert_never_overlapping();
    for row in &rows {
        assert_eq!(row.attempt, 1, "job {}: {:?}", row.id, row.errors);
        assert!(row.errors.is_empty(), "job {}: {:?}", row.id, row.errors);
        assert_eq!(timeline.runs_of(row.id).len(), 1, "job {} ran once", row.id);
    }
    for s in &stats {
        assert_eq!((s.lease_lost, s.fenced), (0, 0), "{s:?}");
    }
    let ran_on: std::collections::HashSet<String> =
        timeline.runs().into_iter().map(|r| r.worker).collect();
    assert!(
        ran_on.contains("two-threads") && ran_on.contains("current-thread"),
        "the blocked runtimes ran jobs: {ran_on:?}"
    );
}
