//! `Drain`, inline `perform` and a worker run one attempt pipeline: for every way an attempt
//! can end, they reach the same outcome, the snooze bound included.

use std::time::Duration;

use job::{
    Backoff, Job, JobContext, JobError, JobOptions, JobRow, JobState, NewJob, PgStore, Store,
    DEFAULT_MAX_SNOOZES,
};
use job_testkit::{Drain, Inline, TestDb};
use serde::{Deserialize, Serialize};

/// How an attempt of [`Behaves`] ends.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) enum How {
    Completes,
    Fails,
    FailsForGood,
    Cancels,
    Snoozes,
    Panics,
    TimesOut,
    StoresAnUnstorableStep,
}

/// Ends its attempt as `how` says.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Behaves {
    pub(crate) how: How,
}

impl Job for Behaves {
    const KIND: &'static str = "testkit.behaves";
    const OPTIONS: JobOptions = JobOptions {
        // Long enough that a panic's backtrace (RUST_BACKTRACE=1, as CI sets it) is printed
        // within it on a loaded machine: a panic must end as a panic, not as a timeout.
        timeout: Duration::from_secs(2),
        // Retries wait long enough that one attempt is all a test sees.
        backoff: Backoff::new(Duration::from_secs(3600), Duration::from_secs(7200)),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        match self.how {
            How::Completes => Ok(()),
            How::Fails => Err(JobError::retryable("smtp timeout")),
            How::FailsForGood => Err(JobError::terminal("no such invoice")),
            How::Cancels => Err(JobError::cancel("the customer left")),
            How::Snoozes => Err(JobError::snooze(Duration::from_secs(60))),
            How::Panics => panic!("a bug"),
            How::TimesOut => std::future::pending().await,
            How::StoresAnUnstorableStep => {
                let _ = ctx.step("nan", || async { Ok(f64::NAN) }).await;
                Ok(())
            }
        }
    }
}

/// Every case: the job, whether it snoozed to the bound already, and a payload that does not
/// decode (poison).
fn cases() -> Vec<(String, NewJob, i32)> {
    let how = [
        How::Completes,
        How::Fails,
        How::FailsForGood,
        How::Cancels,
        How::Snoozes,
        How::Panics,
        How::TimesOut,
        How::StoresAnUnstorableStep,
    ];
    let mut cases: Vec<(String, NewJob, i32)> = how
        .iter()
        .map(|h| (format!("{h:?}"), new_job(&Behaves { how: *h }), 0))
        .collect();
    cases.push((
        "Snoozes at the bound".into(),
        new_job(&Behaves { how: How::Snoozes }),
        DEFAULT_MAX_SNOOZES,
    ));
    cases.push((
        "Poison".into(),
        NewJob::new(Behaves::KIND, r#"{"how": 42}"#),
        0,
    ));
    cases
}

fn new_job(job: &Behaves) -> NewJob {
    NewJob::build(job, Default::default(), job::DEFAULT_PAYLOAD_LIMIT).unwrap()
}

/// What the first attempt left in the row: state, attempt, the classes of its history.
fn summary(row: &JobRow) -> (JobState, i32, Vec<String>) {
    let classes = row.errors.iter().map(|e| e.class.clone()).collect();
    (row.state, row.attempt, classes)
}

/// Enqueues `job` with `snoozes` already used, in a fresh database.
async fn enqueued(job: NewJob, snoozes: i32) -> (TestDb, PgStore, i64) {
    let db = TestDb::new().await;
    let store = db.store();
    let id = store.enqueue(job).await.unwrap();
    sqlx::query("UPDATE job.jobs SET snoozes = $2 WHERE id = $1")
        .bind(id)
        .bind(snoozes)
        .execute(store.pool())
        .await
        .unwrap();
    (db, store, id)
}

async fn by_drain(job: NewJob, snoozes: i32) -> (JobState, i32, Vec<String>) {
    let (db, store, id) = enqueued(job, snoozes).await;
    let report = Drain::new()
        .register::<Behaves>()
        .run(&store, "default")
        .await;
    assert_eq!(report.len(), 1, "one attempt: {report:?}");
    let row = store.get(id).await.unwrap().unwrap();
    db.close().await;
    summary(&row)
}

async fn by_worker(job: NewJob, snoozes: i32) -> (JobState, i32, Vec<String>) {
    let (db, store, id) = enqueued(job, snoozes).await;
    let worker = job::Worker::builder(store.clone())
        .register::<Behaves>()
        .queue("default", 1)
        .poll_interval(Duration::from_millis(20))
        .build()
        .unwrap()
        .start();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let row = loop {
        let row = store.get(id).await.unwrap().unwrap();
        if row.attempt >= 1 && !matches!(row.state, JobState::Running | JobState::Available)
            || row.state == JobState::Scheduled && row.attempt == 0 && row.run_at > row.created_at
        {
            break row;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job never ran: {row:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    worker.shutdown().await;
    db.close().await;
    summary(&row)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_and_a_worker_reach_the_same_outcome_for_every_end_of_an_attempt() {
    for (name, job, snoozes) in cases() {
        let drained = by_drain(job.clone(), snoozes).await;
        let worked = by_worker(job, snoozes).await;
        assert_eq!(
            drained, worked,
            "{name}: Drain wrote one thing, a worker another"
        );
    }
}

#[tokio::test]
async fn inline_perform_concludes_like_a_worker() {
    let outcome = Inline::new()
        .snoozes(DEFAULT_MAX_SNOOZES)
        .perform(Behaves { how: How::Snoozes })
        .await;
    assert_eq!(outcome.name(), "discard", "{outcome:?}");
    let outcome = Inline::new()
        .perform(Behaves {
            how: How::StoresAnUnstorableStep,
        })
        .await;
    match outcome {
        job::Outcome::Discard { failure } => {
            assert_eq!(failure.class.as_str(), "step_unstorable")
        }
        other => panic!("expected a step_unstorable discard, got {other:?}"),
    }
}
