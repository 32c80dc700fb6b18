//! `Faults::rescue_at_once`: a crashed execution comes back without waiting out its lease,
//! on either store. The workers here would never rescue it by themselves within the test's
//! wait (an hour's lease, a rescuer every hour): only the faults' rescue brings it back.

use std::time::Duration;

use job_core::{Job, JobContext, JobError, JobState, NewJob, Store, Worker, WorkerBuilder};
use job_testkit::{wait_for, Faults, Point, TestDb, TestSqlite, TestStore, TestWorker};

#[derive(serde::Serialize, serde::Deserialize)]
struct Noop {}

impl Job for Noop {
    const KIND: &'static str = "noop";
    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// A test worker whose own rescue of a crash would take an hour.
fn slow_to_rescue<S: Store>(store: S, faults: Faults) -> WorkerBuilder<S> {
    Worker::builder(store)
        .register::<Noop>()
        .queue("default", 1)
        .faults(faults)
        .for_tests()
        .configure(|c| {
            c.lease = Some(Duration::from_secs(3600));
            c.rescuer.interval = Duration::from_secs(3600);
        })
}

async fn crashed_and_rescued<S: TestStore>(store: S, point: Point) {
    let id = store.enqueue(NewJob::new("noop", "{}")).await.unwrap();
    let faults = Faults::new()
        .crash_after(point)
        .times(1)
        .rescue_at_once(&store);
    let worker = slow_to_rescue(store.clone(), faults.clone())
        .build()
        .unwrap()
        .start();
    let row = wait_for(&store, id, JobState::Completed).await;
    worker.shutdown().await;
    faults.assert_fired();
    assert_eq!(row.attempt, 2, "{:?}", row.errors);
    assert_eq!(row.errors.len(), 1);
    assert_eq!(row.errors[0].class, "lease_expired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_execution_is_rescued_at_once_on_postgres() {
    let db = TestDb::new().await;
    crashed_and_rescued(db.store(), Point::Perform).await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_execution_is_rescued_at_once_on_sqlite() {
    let db = TestSqlite::new().await;
    crashed_and_rescued(db.store(), Point::Perform).await;
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_claim_is_rescued_at_once_too() {
    let db = TestDb::new().await;
    let store = db.store();
    let id = store.enqueue(NewJob::new("noop", "{}")).await.unwrap();
    let faults = Faults::new()
        .crash_after(Point::Claim)
        .times(1)
        .rescue_at_once(&store);
    let worker = slow_to_rescue(store.clone(), faults.clone())
        .build()
        .unwrap()
        .start();
    let row = wait_for(&store, id, JobState::Completed).await;
    worker.shutdown().await;
    faults.assert_fired();
    assert_eq!(row.attempt, 2);
    db.close().await;
}
