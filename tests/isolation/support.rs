//! An in-process timeline of executions, and workers on runtimes of their own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use job::{JobContext, JobId, Store, WorkerStats};
use job_core::WorkerBuilder;
use tokio::sync::oneshot;

/// One execution of a handler, on the process's monotonic clock.
#[derive(Debug, Clone)]
pub struct Run {
    pub job: JobId,
    pub attempt: i32,
    pub worker: String,
    pub started: Instant,
    pub ended: Option<Instant>,
}

/// Every execution, recorded by the handlers themselves (synchronously, so a blocked or
/// spinning handler records its true start and end).
#[derive(Clone, Default)]
pub struct Timeline(Arc<Mutex<Vec<Run>>>);

impl Timeline {
    /// Records the start of `ctx`'s execution; returns its index for [`Timeline::end`].
    pub fn start(&self, ctx: &JobContext, worker: &str) -> usize {
        let mut runs = self.0.lock().unwrap();
        runs.push(Run {
            job: ctx.id(),
            attempt: ctx.attempt(),
            worker: worker.to_owned(),
            started: Instant::now(),
            ended: None,
        });
        runs.len() - 1
    }

    pub fn end(&self, run: usize) {
        self.0.lock().unwrap()[run].ended = Some(Instant::now());
    }

    pub fn runs(&self) -> Vec<Run> {
        self.0.lock().unwrap().clone()
    }

    pub fn runs_of(&self, job: JobId) -> Vec<Run> {
        self.runs().into_iter().filter(|r| r.job == job).collect()
    }

    /// Fails when two executions of one job overlapped, or one never ended.
    pub fn assert_never_overlapping(&self) {
        let mut by_job: HashMap<JobId, Vec<Run>> = HashMap::new();
        for run in self.runs() {
            by_job.entry(run.job).or_default().push(run);
        }
        for (job, mut runs) in by_job {
            runs.sort_by_key(|r| r.started);
            for pair in runs.windows(2) {
                let end = pair[0]
                    .ended
                    .unwrap_or_else(|| panic!("job {job}: an execution never ended: {runs:?}"));
                assert!(
                    end <= pair[1].started,
                    "job {job}: attempt {} on {} started {:?} before attempt {} on {} ended",
                    pair[1].attempt,
                    pair[1].worker,
                    end - pair[1].started,
                    pair[0].attempt,
                    pair[0].worker,
                );
            }
        }
    }
}

/// A worker running on a Tokio runtime of its own, on a thread of its own.
pub struct Remote {
    stop: Option<oneshot::Sender<()>>,
    done: Option<std::thread::JoinHandle<WorkerStats>>,
}

/// The runtime a [`Remote`] worker runs on.
#[derive(Debug, Clone, Copy)]
pub enum Flavor {
    /// A multi-thread runtime with this many worker threads.
    Threads(usize),
    /// A current-thread runtime: one thread for everything.
    CurrentThread,
}

impl Remote {
    /// Builds the worker from `make` on a new thread with a runtime of `flavor`, and starts it.
    pub fn start<S: Store>(
        flavor: Flavor,
        make: impl FnOnce() -> WorkerBuilder<S> + Send + 'static,
    ) -> Remote {
        let (stop, stopped) = oneshot::channel::<()>();
        let done = std::thread::spawn(move || {
            let runtime = match flavor {
                Flavor::Threads(n) => tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(n)
                    .enable_all()
                    .build(),
                Flavor::CurrentThread => tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build(),
            }
            .expect("a runtime");
            runtime.block_on(async move {
                let worker = make().build().expect("a valid worker").start();
                let _ = stopped.await;
                worker.shutdown().await.stats
            })
        });
        Remote {
            stop: Some(stop),
            done: Some(done),
        }
    }

    /// Drains the worker and returns its final counters.
    pub async fn stop(mut self) -> WorkerStats {
        let _ = self.stop.take().expect("stopped once").send(());
        let done = self.done.take().expect("stopped once");
        tokio::task::spawn_blocking(move || done.join().expect("the worker's thread panicked"))
            .await
            .expect("joining the worker's thread")
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
