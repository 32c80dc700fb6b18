//! A backlog of expired leases too large for the database to rescue in one statement within
//! `store_timeout` is still rescued: the rescuer halves its batch after a statement that
//! failed, and grows it back after each answered one.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{BoxFuture, Call, JobState, Layered, Returned, StoreError, StoreLayer};

use crate::common::*;

/// A database that cannot finish a rescue of more than `most` jobs: such a statement never
/// answers (the worker's `store_timeout` gives it up, as it would a statement still running
/// at its bound, which the server then rolls back). Counts them.
#[derive(Clone)]
struct SlowBigRescues {
    most: usize,
    stalled: Arc<AtomicU32>,
}

impl StoreLayer for SlowBigRescues {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        if call.name == "rescue_expired" && call.sent > self.most {
            drop(run);
            self.stalled.fetch_add(1, Ordering::SeqCst);
            return Box::pin(std::future::pending());
        }
        run
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backlog_of_expired_leases_too_big_for_one_statement_is_rescued() {
    let h = Harness::new().await;
    let mut ids = Vec::new();
    for n in 0..200 {
        ids.push(enqueue(&h.store, Noop { n }).await);
    }
    // Claimed by a worker that died: every lease ran out a minute ago.
    sqlx::query(
        "UPDATE job.jobs SET state = 'running', attempt = 1, lock_token = gen_random_uuid(), \
         locked_by = 'gone', locked_until = now() - interval '1 minute' WHERE id = ANY($1)",
    )
    .bind(&ids)
    .execute(h.store.pool())
    .await
    .unwrap();
    let layer = SlowBigRescues {
        most: 100,
        stalled: Arc::new(AtomicU32::new(0)),
    };
    let store = Layered::new(h.store.clone(), layer.clone());
    let worker = worker(&store, &h.ledger)
        .configure(|c| {
            c.rescuer.batch = 200;
            c.rescuer.interval = Duration::from_millis(50);
            // The floor: each statement too big is given up after a second.
            c.store_timeout = Duration::from_secs(1);
        })
        .build()
        .unwrap()
        .start();
    eventually("every job of the backlog to be rescued and run", || async {
        (count_in(&h.store, JobState::Completed).await == 200).then_some(())
    })
    .await;
    assert!(
        layer.stalled.load(Ordering::SeqCst) >= 1,
        "the statement of 200 jobs was given up"
    );
    for id in &ids {
        let row = h.row(*id).await;
        assert_eq!(row.attempt, 2, "the dead worker's attempt is counted");
        assert_eq!(row.errors[0].class, "lease_expired");
    }
    worker.shutdown().await;
}
