//! The lease keeper lives and dies with its worker: a worker whose runtime is dropped without a
//! `shutdown()` renews nothing any more, so its jobs are rescued.

use std::time::Duration;

use job::{Job, JobContext, JobError, JobOptions, JobState, Store};
use serde::{Deserialize, Serialize};

use crate::common::{enqueue, eventually, Harness};

/// Never ends by itself.
#[derive(Debug, Serialize, Deserialize)]
pub struct Forever {}

impl Job for Forever {
    const KIND: &'static str = "isolation.forever";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_millis(300),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_dropped_with_its_runtime_stops_renewing_its_leases() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, Forever {}).await;
    let store = h.store.clone();
    let (started_tx, started) = tokio::sync::oneshot::channel::<()>();
    let (drop_tx, drop_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let worker = runtime.block_on(async {
            job::Worker::builder(store)
                .register::<Forever>()
                .queue("default", 1)
                .build()
                .unwrap()
                .start()
        });
        let _ = started_tx.send(());
        let _ = drop_rx.recv();
        // No shutdown(): the runtime goes, with every task of the worker on it.
        drop(runtime);
        drop(worker);
    });
    started.await.unwrap();
    let running = h.reaches(id, JobState::Running).await;
    drop_tx.send(()).unwrap();
    tokio::task::spawn_blocking(move || thread.join().unwrap())
        .await
        .unwrap();
    let rescued = eventually(
        "the dropped worker's lease to expire and be rescued",
        || async {
            let r = h.store.rescue_expired(10).await.unwrap();
            (r.retried == 1).then_some(())
        },
    )
    .await;
    let row = h.row(id).await;
    assert_eq!(
        (rescued, row.state, row.attempt),
        ((), JobState::Retryable, 1)
    );
    assert_ne!(row.lock_token, running.lock_token);
}
