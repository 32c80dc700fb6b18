//! Lost database connections lose no job, and the worker carries on.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{BoxFuture, Call, JobState, Layered, Returned, Store, StoreError, StoreLayer};
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
        tokio::time::sleep(Duration::from_millis(20)).await;
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

/// Fails every subscription to wake-ups (`Store::listen`, a LISTEN on PostgreSQL) while
/// `refusing`, counting them, says when one went through, and counts claims.
#[derive(Clone, Default)]
struct RefusedListens {
    refusing: Arc<AtomicBool>,
    refused: Arc<AtomicU32>,
    listening: Arc<AtomicBool>,
    claims_sent: Arc<AtomicU32>,
    claims_answered: Arc<AtomicU32>,
}

impl StoreLayer for RefusedListens {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let (listen, claim) = (call.name == "listen", call.name == "claim");
        Box::pin(async move {
            if listen && self.refusing.load(Ordering::SeqCst) {
                drop(run);
                self.refused.fetch_add(1, Ordering::SeqCst);
                return Err(StoreError::new("injected: the LISTEN failed"));
            }
            if claim {
                self.claims_sent.fetch_add(1, Ordering::SeqCst);
            }
            let answer = run.await;
            if claim {
                self.claims_answered.fetch_add(1, Ordering::SeqCst);
            }
            if listen && answer.is_ok() {
                self.listening.store(true, Ordering::SeqCst);
            }
            answer
        })
    }
}

/// A worker whose LISTEN failed polls meanwhile, but it waited a whole poll interval before
/// listening again, and then woke no queue: with an hour's, a job enqueued during a blip of
/// the database waited up to an hour. It tries again after 100 ms, doubling up to the poll
/// interval, and wakes every queue once it listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_listen_failed_listens_again_and_claims_what_came_meanwhile() {
    let h = Harness::new().await;
    let layer = RefusedListens::default();
    layer.refusing.store(true, Ordering::SeqCst);
    let store = Layered::new(h.store.clone(), layer.clone());
    let worker = worker(&store, &h.ledger)
        .poll_interval(Duration::from_secs(3600))
        .build()
        .unwrap()
        .start();
    // Refused twice (so retried once), and the fetcher's first claims answered: it now
    // waits for a wake-up or its hour's poll.
    eventually(
        "two refused LISTENs and the first claims answered",
        || async {
            let (sent, answered) = (
                layer.claims_sent.load(Ordering::SeqCst),
                layer.claims_answered.load(Ordering::SeqCst),
            );
            (layer.refused.load(Ordering::SeqCst) >= 2 && answered > 0 && sent == answered)
                .then_some(())
        },
    )
    .await;
    // Enqueued while nothing listens: its notification is lost.
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    layer.refusing.store(false, Ordering::SeqCst);
    eventually(
        "the worker to listen again (within its hour's poll interval)",
        || async { layer.listening.load(Ordering::SeqCst).then_some(()) },
    )
    .await;
    h.reaches(id, JobState::Completed).await;
    // Listening, it hears of a new job at once, not at its next poll.
    let next = enqueue(&h.store, Noop { n: 2 }).await;
    h.reaches(next, JobState::Completed).await;
    worker.shutdown().await;
}
