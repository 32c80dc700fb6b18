//! Lost database connections lose no job, and the worker carries on.

use job::{JobState, Store};
use job_core::{EnqueueOptions, NewJob, DEFAULT_PAYLOAD_LIMIT};
use sqlx::Connection;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_connections_lose_no_job() {
    let h = Harness::new().await;
    let jobs: Vec<_> = (0..600)
        .map(|_| {
            NewJob::build(
                &Sleepy { ms: 10 },
                EnqueueOptions::default(),
                DEFAULT_PAYLOAD_LIMIT,
            )
            .unwrap()
        })
        .collect();
    let ids = h.store.enqueue_many(jobs).await.unwrap();
    let worker = h.worker().build().unwrap().start();
    let mut admin = sqlx::PgConnection::connect(&h.db.url()).await.unwrap();
    let mut kills = 0i64;
    while count_in(&h.store, JobState::Completed).await < 600 && kills < 200 {
        let killed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid()) t",
        )
        .fetch_one(&mut admin)
        .await
        .unwrap();
        kills += killed;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(kills > 0, "the test should have cut some connections");
    eventually("all 600 jobs to complete after the outage", || async {
        (count_in(&h.store, JobState::Completed).await == 600).then_some(())
    })
    .await;
    for id in &ids {
        assert!(h.ledger.runs(*id) >= 1);
    }
    // The worker is still alive and claiming.
    let after = enqueue(&h.store, Noop { n: 9999 }).await;
    h.reaches(after, JobState::Completed).await;
    worker.shutdown().await;
    admin.close().await.unwrap();
}
