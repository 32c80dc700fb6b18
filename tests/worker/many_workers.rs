//! Several workers on one queue share the work without ever running a job twice.

use job::{JobState, Store};
use job_core::{EnqueueOptions, NewJob, DEFAULT_PAYLOAD_LIMIT};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_workers_perform_2000_jobs_exactly_once() {
    let h = Harness::new().await;
    let jobs: Vec<_> = (0..2000)
        .map(|n| {
            NewJob::build(
                &Noop { n },
                EnqueueOptions::default(),
                DEFAULT_PAYLOAD_LIMIT,
            )
            .unwrap()
        })
        .collect();
    let ids = h.store.enqueue_many(jobs).await.unwrap();
    assert_eq!(ids.len(), 2000);
    let workers: Vec<_> = (0..4)
        .map(|i| h.worker().id(format!("w{i}")).build().unwrap().start())
        .collect();
    eventually("all 2000 jobs to complete", || async {
        (count_in(&h.store, JobState::Completed).await == 2000).then_some(())
    })
    .await;
    let mut claimed = 0;
    for w in workers {
        let stats = w.stats();
        claimed += stats.claimed;
        assert_eq!(stats.lease_lost, 0);
        w.shutdown().await;
    }
    assert_eq!(claimed, 2000);
    let runs = h.ledger.snapshot();
    assert_eq!(runs.len(), 2000);
    for id in ids {
        assert_eq!(runs[&id], vec![1], "job {id} ran other than once");
    }
}
