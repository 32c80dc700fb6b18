//! A SQLite worker with thousands of queues opens a bounded number of connections. Each
//! SQLite connection is a thread of its own (sqlx's) and a few file descriptors, while the
//! file takes one write at a time; the worker's budget is two connections per queue (4,004 for
//! 2,000 queues), and its pool opened one for every claim waiting at the write gate.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{Job, JobContext, JobError, JobId, JobOptions, JobState};
use job_core::{EnqueueOptions, NewJob, Store, DEFAULT_PAYLOAD_LIMIT};
use serde::{Deserialize, Serialize};

use crate::common::*;

const QUEUES: usize = 2_000;

/// The connections of the test's store that may be open at once: the application's pool
/// (`store.pool()`, 8), the lease keeper's (3) and the worker's runtime's
/// ([`job_sqlite::MAX_DEDICATED_CONNECTIONS`]).
const BOUND: usize = 8 + 3 + job_sqlite::MAX_DEDICATED_CONNECTIONS as usize;

/// The open connections to the database file at `path`: each holds one descriptor on it.
fn connections_to(path: &Path) -> usize {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return 0;
    };
    fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target == path)
        .count()
}

/// The threads of this process (shared with the tests running beside this one).
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

/// The most connections to the file seen, and where to look.
#[derive(Clone)]
struct Probe {
    path: Arc<std::path::PathBuf>,
    most: Arc<AtomicUsize>,
}

impl Probe {
    fn look(&self) -> usize {
        let now = connections_to(&self.path);
        self.most.fetch_max(now, Ordering::SeqCst);
        now
    }
}

/// Records its run, and every 50th looks at the connections open to the file while the
/// worker's fetchers are claiming.
#[derive(Debug, Serialize, Deserialize)]
struct Counted {
    n: usize,
}

impl Job for Counted {
    const KIND: &'static str = "sqlite.counted";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        if self.n % 50 == 0 {
            ctx.state::<Probe>()?.look();
        }
        ctx.state::<Ledger>()?.record(&ctx);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_with_two_thousand_queues_runs_them_all_on_a_bounded_number_of_connections() {
    let h = Harness::new().await;
    let path = std::fs::canonicalize(h.db.path()).expect("the database file");
    let probe = Probe {
        path: Arc::new(path),
        most: Arc::default(),
    };
    let jobs: Vec<NewJob> = (0..QUEUES)
        .map(|n| {
            let options = EnqueueOptions {
                queue: Some(format!("q{n}")),
                ..EnqueueOptions::default()
            };
            NewJob::build(&Counted { n }, options, DEFAULT_PAYLOAD_LIMIT).expect("valid job")
        })
        .collect();
    let ids: Vec<JobId> = h.store.enqueue_many(jobs).await.expect("enqueue");
    let threads_before = threads();

    let mut builder = job::Worker::builder(h.store.clone())
        .register::<Counted>()
        .poll_interval(Duration::from_millis(500))
        .drain_timeout(Duration::from_secs(5))
        .state(h.ledger.clone())
        .state(probe.clone());
    for n in 0..QUEUES {
        builder = builder.queue(format!("q{n}"), 1);
    }
    let worker = builder.build().expect("a worker of 2,000 queues").start();

    let ledger = h.ledger.clone();
    // Up to 2 minutes: 2,000 queues claim on one writer, on a small machine.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut most_threads = 0;
    while ledger.total() < QUEUES {
        probe.look();
        most_threads = most_threads.max(threads());
        assert!(
            tokio::time::Instant::now() < deadline,
            "ran {} of {QUEUES} jobs in 2 minutes",
            ledger.total()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The pools keep an idle connection for 60 s: those still open now are all they opened
    // (unless this run took longer).
    let at_end = probe.look();
    most_threads = most_threads.max(threads());
    worker.shutdown().await;

    let most = probe.most.load(Ordering::SeqCst);
    eprintln!(
        "connections to the file: at most {most} seen, {at_end} once every job ran; threads: \
         {threads_before} before the worker, at most {most_threads} while it ran"
    );
    assert!(
        most <= BOUND,
        "a worker of {QUEUES} queues opened {most} connections to its file (each a thread of its \
         own) at once; expected at most {BOUND}"
    );
    for id in ids {
        let row = h.row(id).await;
        assert_eq!(row.state, JobState::Completed, "job {id} of {}", row.queue);
    }
    let runs = ledger.snapshot();
    assert_eq!(runs.len(), QUEUES, "every job ran");
    assert!(
        runs.values().all(|attempts| attempts == &[1]),
        "each job ran once"
    );
}
