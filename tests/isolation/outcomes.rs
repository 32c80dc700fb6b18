//! Outcomes the database would refuse never wedge a worker: a NUL byte or megabytes in an error
//! message or a panic, an application trigger that refuses an update, a snooze longer than a
//! timestamp holds. The other outcomes of the batch are written at once, the refused one is made
//! storable or discarded with its reason, and shutdown returns.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{Admin, Job, JobContext, JobError, JobFilter, JobOptions, JobState, MAX_ERROR_MESSAGE};
use serde::{Deserialize, Serialize};

use crate::common::{enqueue, eventually, Harness, FAST_BACKOFF};

/// How a [`Refusable`] job ends.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum End {
    Ok,
    /// A retryable error whose message holds NUL bytes.
    NulError,
    /// A panic whose message holds a NUL byte.
    NulPanic,
    /// A 12 MiB error message.
    HugeError,
    /// A snooze of `Duration::MAX`.
    EndlessSnooze,
}

/// Starts, waits until every job of its batch has started, then ends as told: the outcomes
/// reach the completer together.
#[derive(Debug, Serialize, Deserialize)]
pub struct Refusable {
    pub end: End,
}

/// How many [`Refusable`] jobs the batch has, and how many started.
#[derive(Clone)]
pub struct Batch {
    size: usize,
    started: Arc<AtomicUsize>,
}

impl Batch {
    /// Counts this job as started, and waits until every job of the batch has.
    async fn all_started(&self) {
        self.started.fetch_add(1, Ordering::SeqCst);
        while self.started.load(Ordering::SeqCst) < self.size {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Job for Refusable {
    const KIND: &'static str = "isolation.refusable";
    const OPTIONS: JobOptions = JobOptions {
        max_attempts: 1,
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Batch>()?.all_started().await;
        match self.end {
            End::Ok => Ok(()),
            End::NulError => Err(JobError::retryable("smtp said \0\0 nothing")),
            End::NulPanic => panic!("bad byte \0 in a panic"),
            End::HugeError => Err(JobError::retryable("x".repeat(12 * 1024 * 1024))),
            End::EndlessSnooze => Err(JobError::snooze(Duration::MAX)),
        }
    }
}

/// Completes, unless the test's trigger refuses its completion.
#[derive(Debug, Serialize, Deserialize)]
pub struct Refused {}

impl Job for Refused {
    const KIND: &'static str = "isolation.refused";
    const OPTIONS: JobOptions = JobOptions {
        max_attempts: 1,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Batch>()?.all_started().await;
        Ok(())
    }
}

fn worker(h: &Harness, batch: &Batch) -> job::WorkerBuilder<job::PgStore> {
    job::Worker::builder(h.store.clone())
        .register::<Refusable>()
        .register::<Refused>()
        .queue("default", batch.size)
        .poll_interval(Duration::from_millis(20))
        .drain_timeout(Duration::from_secs(5))
        .state(batch.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_with_nul_bytes_or_megabytes_are_stored_and_the_rest_of_the_batch_too() {
    let h = Harness::new().await;
    let ends = [
        End::Ok,
        End::NulError,
        End::Ok,
        End::NulPanic,
        End::Ok,
        End::HugeError,
        End::Ok,
        End::EndlessSnooze,
        End::Ok,
    ];
    let batch = Batch {
        size: ends.len(),
        started: Arc::default(),
    };
    let mut ids = Vec::new();
    for end in ends {
        ids.push((end, enqueue(&h.store, Refusable { end }).await));
    }
    let worker = worker(&h, &batch).build().unwrap().start();
    for (end, id) in &ids {
        let want = match end {
            End::Ok => JobState::Completed,
            End::EndlessSnooze => JobState::Scheduled,
            _ => JobState::Discarded,
        };
        let row = h.reaches(*id, want).await;
        match end {
            End::NulError => assert_eq!(row.errors[0].message, "smtp said  nothing"),
            End::NulPanic => {
                assert_eq!(row.errors[0].class, "panic");
                assert_eq!(row.errors[0].message, "bad byte  in a panic");
            }
            End::HugeError => {
                let message = &row.errors[0].message;
                assert!(message.len() <= MAX_ERROR_MESSAGE, "{}", message.len());
                assert!(message.ends_with("bytes cut]"), "{}", &message[8000..]);
            }
            End::EndlessSnooze => {
                assert!(row.run_at > chrono::Utc::now() + chrono::Duration::days(365 * 50));
            }
            End::Ok => assert!(row.errors.is_empty()),
        }
    }
    let report = tokio::time::timeout(Duration::from_secs(30), worker.shutdown())
        .await
        .expect("shutdown returns");
    assert!(report.finished_in_time);
    assert_eq!(
        report.stats.unstorable, 0,
        "made storable before the store saw them"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_the_database_refuses_is_isolated_and_discarded_with_its_reason() {
    let h = Harness::new().await;
    // The application's own rule, which the worker cannot know of: it refuses to complete
    // `isolation.refused` jobs.
    sqlx::raw_sql(
        "CREATE FUNCTION refuse_completion() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.state = 'completed' AND NEW.kind = 'isolation.refused' THEN
                 RAISE EXCEPTION 'completing job % is not allowed', NEW.id;
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_completion BEFORE UPDATE ON job.jobs
             FOR EACH ROW EXECUTE FUNCTION refuse_completion();",
    )
    .execute(h.store.pool())
    .await
    .unwrap();
    let batch = Batch {
        size: 9,
        started: Arc::default(),
    };
    let mut good = Vec::new();
    for _ in 0..8 {
        good.push(enqueue(&h.store, Refusable { end: End::Ok }).await);
    }
    let refused = enqueue(&h.store, Refused {}).await;
    let worker = worker(&h, &batch).build().unwrap().start();
    for id in &good {
        h.reaches(*id, JobState::Completed).await;
    }
    let row = h.reaches(refused, JobState::Discarded).await;
    assert_eq!(row.errors.len(), 1, "{:?}", row.errors);
    assert_eq!(row.errors[0].class, "unstorable");
    assert!(
        row.errors[0].message.contains("completing job")
            && row.errors[0].message.contains("`complete`"),
        "{}",
        row.errors[0].message
    );
    let report = tokio::time::timeout(Duration::from_secs(30), worker.shutdown())
        .await
        .expect("shutdown returns");
    assert_eq!(report.stats.unstorable, 1);
    assert_eq!(report.stats.completed, 8);
    assert_eq!(report.stats.discarded, 1);
}

/// Fails every attempt with a 10 MiB message.
#[derive(Debug, Serialize, Deserialize)]
pub struct FailsLoudly {}

impl Job for FailsLoudly {
    const KIND: &'static str = "isolation.fails_loudly";
    const OPTIONS: JobOptions = JobOptions {
        max_attempts: 25,
        backoff: job::Backoff::new(Duration::from_millis(1), Duration::from_millis(2)),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        Err(JobError::retryable(format!(
            "attempt {}: {}",
            ctx.attempt(),
            "y".repeat(10 * 1024 * 1024)
        )))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_of_a_job_that_fails_forever_stays_bounded() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, FailsLoudly {}).await;
    let worker = job::Worker::builder(h.store.clone())
        .register::<FailsLoudly>()
        .queue("default", 1)
        .poll_interval(Duration::from_millis(10))
        .build()
        .unwrap()
        .start();
    let row = h.reaches(id, JobState::Discarded).await;
    worker.shutdown().await;
    assert_eq!(row.attempt, 25);
    let attempts: Vec<i32> = row.errors.iter().map(|e| e.attempt).collect();
    let mut expected = vec![1];
    expected.extend(7..=25);
    assert_eq!(attempts, expected, "the first entry and the latest 19");
    for e in &row.errors {
        assert!(e.message.len() <= MAX_ERROR_MESSAGE);
    }
    let stored: i64 =
        sqlx::query_scalar("SELECT pg_column_size(errors)::bigint FROM job.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(h.store.pool())
            .await
            .unwrap();
    assert!(stored < 200 * 1024, "the history takes {stored} bytes");
    let listed = eventually("the job to be listed", || async {
        let jobs = h.store.list(&JobFilter::default()).await.ok()?;
        jobs.into_iter().find(|j| j.id == id)
    })
    .await;
    assert_eq!(listed.errors.len(), job::MAX_ERROR_HISTORY);
}
