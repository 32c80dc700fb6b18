//! A job that records when each of its executions started and ended, and the checks run
//! over those records.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use job::{
    Admin, Backoff, Job, JobContext, JobError, JobFilter, JobId, JobOptions, JobState, Store,
};

use crate::backend::{self, Backend};
use job_core::RescuerConfig;
use job_core::WorkerBuilder;
use job_core::{EnqueueOptions, NewJob, DEFAULT_PAYLOAD_LIMIT};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

#[derive(Debug, Clone)]
pub struct Execution {
    pub attempt: i32,
    pub started: Instant,
    /// `None` when the execution was killed (its future dropped) before it returned.
    pub ended: Option<Instant>,
    pub killed_at: Option<Instant>,
}

#[derive(Clone, Default)]
pub struct Timeline(Arc<Mutex<HashMap<JobId, Vec<Execution>>>>);

impl Timeline {
    pub fn executions(&self, id: JobId) -> Vec<Execution> {
        self.0.lock().unwrap().get(&id).cloned().unwrap_or_default()
    }

    /// No two executions of one job overlap: each starts after the previous one ended or was
    /// killed.
    pub fn assert_never_concurrent(&self) {
        for (id, runs) in self.0.lock().unwrap().iter() {
            for pair in runs.windows(2) {
                let end = pair[0]
                    .ended
                    .or(pair[0].killed_at)
                    .expect("an execution either returns or is dropped");
                assert!(
                    pair[1].started >= end,
                    "job {id}: attempt {} started while attempt {} was still running",
                    pair[1].attempt,
                    pair[0].attempt
                );
            }
        }
    }
}

/// Records its execution and sleeps `ms`.
#[derive(Debug, Serialize, Deserialize)]
pub struct Traced {
    pub ms: u64,
}

impl Job for Traced {
    const KIND: &'static str = "chaos.traced";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_millis(300),
        backoff: Backoff::new(Duration::from_millis(5), Duration::from_millis(20)),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let timeline = ctx.state::<Timeline>()?.clone();
        let index = {
            let mut map = timeline.0.lock().unwrap();
            let runs = map.entry(ctx.id()).or_default();
            runs.push(Execution {
                attempt: ctx.attempt(),
                started: Instant::now(),
                ended: None,
                killed_at: None,
            });
            runs.len() - 1
        };
        // Marks the end whether the future returns or is dropped by a crash or an abort.
        struct Mark(Timeline, JobId, usize, bool);
        impl Drop for Mark {
            fn drop(&mut self) {
                let mut map = self.0 .0.lock().unwrap();
                let run = &mut map.get_mut(&self.1).unwrap()[self.2];
                if self.3 {
                    run.ended = Some(Instant::now());
                } else {
                    run.killed_at = Some(Instant::now());
                }
            }
        }
        let mut mark = Mark(timeline, ctx.id(), index, false);
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        mark.3 = true;
        Ok(())
    }
}

pub struct Chaos {
    /// Kept so the database lives as long as the test.
    _db: backend::Guard,
    pub store: Backend,
    pub timeline: Timeline,
}

impl Chaos {
    pub async fn new() -> Chaos {
        let (store, db) = backend::fresh().await;
        Chaos {
            _db: db,
            store,
            timeline: Timeline::default(),
        }
    }

    /// The test's database (the blackhole test connects to it through a proxy).
    #[allow(dead_code)]
    pub fn db(&self) -> &backend::Guard {
        &self._db
    }

    pub async fn enqueue(&self, n: usize, ms: u64) -> Vec<JobId> {
        let jobs = (0..n)
            .map(|_| {
                NewJob::build(
                    &Traced { ms },
                    EnqueueOptions::default(),
                    DEFAULT_PAYLOAD_LIMIT,
                )
                .unwrap()
            })
            .collect();
        self.store.enqueue_many(jobs).await.unwrap()
    }

    /// A worker with a fast rescuer, over any store (the outage tests wrap it).
    pub fn worker<S: Store>(&self, store: S) -> WorkerBuilder<S> {
        let mut config = job::WorkerConfig::default();
        config.poll_interval = Duration::from_millis(20);
        config.rescuer = RescuerConfig {
            interval: Duration::from_millis(50),
            ..RescuerConfig::default()
        };
        job::Worker::builder(store)
            .register::<Traced>()
            .queue("default", 8)
            .config(config)
            .state(self.timeline.clone())
    }

    /// Waits until every job is terminal, then returns the rows.
    pub async fn all_terminal(&self, ids: &[JobId]) -> Vec<job::JobRow> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let stats = self.store.stats(&JobFilter::default()).await.unwrap();
            let pending: u64 = stats
                .counts
                .iter()
                .filter(|c| !c.state.is_terminal())
                .map(|c| c.count)
                .sum();
            if pending == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{pending} jobs still not terminal after 60s"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut rows = Vec::new();
        for id in ids {
            rows.push(self.store.get(*id).await.unwrap().expect("no job is lost"));
        }
        rows
    }
}

/// Every job completed exactly once as far as the row can tell.
pub fn assert_each_completed(rows: &[job::JobRow]) {
    for row in rows {
        assert_eq!(
            row.state,
            JobState::Completed,
            "job {} ended {}",
            row.id,
            row.state
        );
        assert!(row.finalized_at.is_some());
        assert_eq!(row.lock_token, None);
    }
}
