//! Database outages longer than a lease lose no job and apply no stale outcome.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{BoxFuture, Call, Returned, StoreError, StoreLayer};
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

/// Holds for ever the next heartbeats sent once armed (as many as armed with), as connections
/// that go silent while the statement is on them would; every other call passes.
#[derive(Clone, Default)]
struct SilentHeartbeats {
    /// Heartbeats still to hold.
    to_hold: Arc<AtomicU8>,
    /// Heartbeats held.
    held: Arc<AtomicU8>,
}

impl StoreLayer for SilentHeartbeats {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let silent = call.name == "heartbeat"
            && self
                .to_hold
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if silent {
            self.held.fetch_add(1, Ordering::SeqCst);
            return Box::pin(std::future::pending());
        }
        run
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_that_are_never_answered_fence_no_execution() {
    // Leases of 6 s: a heartbeat every 2 s, the fence point 4 s after the last renewal. The
    // keeper waited out a held heartbeat's whole period and reached the fence point; it sends
    // the heartbeat again a quarter of the period apart, three times at most. Two are held
    // here (a silent connection, then a silent spare), so only the third renews.
    let chaos = Chaos::new().await;
    let silent = SilentHeartbeats::default();
    let store = job::Layered::new(chaos.store.clone(), silent.clone());
    let ids = chaos.enqueue(4, 7_000).await;
    let worker = chaos
        .worker(store)
        .configure(|c| c.lease = Some(Duration::from_secs(6)))
        .build()
        .unwrap()
        .start();
    let started = tokio::time::Instant::now();
    while ids
        .iter()
        .any(|id| chaos.timeline.executions(*id).is_empty())
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the jobs never started"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    silent.to_hold.store(2, Ordering::SeqCst);
    let rows = chaos.all_terminal(&ids).await;
    let stats = worker.shutdown().await.stats;
    assert_eq!(silent.held.load(Ordering::SeqCst), 2, "two heartbeats held");
    assert_each_completed(&rows);
    assert_eq!(stats.fenced, 0, "executions were fenced: {stats:?}");
    for id in &ids {
        assert_eq!(
            chaos.timeline.executions(*id).len(),
            1,
            "job {id} ran again"
        );
    }
}
