//! Database outages longer than a lease lose no job and apply no stale outcome.

use std::time::Duration;

use job_testkit::{Outage, OutageStore};

use crate::support::*;

/// Waits until the worker has claimed something, so the outage hits work in progress.
async fn under_way(worker: &job::WorkerHandle) {
    let started = tokio::time::Instant::now();
    while worker.stats().claimed == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the worker never claimed"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_database_loses_no_job_and_applies_no_stale_outcome() {
    let chaos = Chaos::new().await;
    let ids = chaos.enqueue(60, 100).await;
    let store = OutageStore::new(chaos.store.clone(), Outage::default());
    let worker = chaos.worker(store.clone()).build().unwrap().start();
    // Once work is under way, stall the store for three leases.
    under_way(&worker).await;
    store.layer().stall_for(Duration::from_millis(900));
    let rows = chaos.all_terminal(&ids).await;
    let stats = worker.shutdown().await.stats;
    assert!(
        store.layer().calls_refused() > 0,
        "the outage should have hit some calls"
    );
    assert!(
        stats.fenced > 0,
        "executions during the stall must fence themselves"
    );
    assert_each_completed(&rows);
    chaos.timeline.assert_never_concurrent();
    assert_eq!(stats.completed, 60, "each job is finalized exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_database_loses_no_job_and_the_worker_recovers() {
    let chaos = Chaos::new().await;
    let ids = chaos.enqueue(60, 20).await;
    let store = OutageStore::new(chaos.store.clone(), Outage::default());
    let worker = chaos.worker(store.clone()).build().unwrap().start();
    under_way(&worker).await;
    store.layer().fail_for(Duration::from_millis(700));
    let rows = chaos.all_terminal(&ids).await;
    let stats = worker.shutdown().await.stats;
    assert!(store.layer().calls_refused() > 0);
    assert_each_completed(&rows);
    chaos.timeline.assert_never_concurrent();
    assert_eq!(stats.completed, 60);
}
