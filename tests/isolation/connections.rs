//! The worker states its connection budget and refuses one it cannot work with; it opens no
//! more connections than it states, and none of the application's pool.

use std::time::Duration;

use job::{BuildError, JobState};
use sqlx::postgres::PgPoolOptions;

use crate::common::{enqueue, Harness, Ledger, Noop};

#[tokio::test]
async fn the_worker_states_its_connection_budget_and_refuses_too_small_a_one() {
    let h = Harness::new().await;
    let two_queues = h.worker().queue("mail", 3).build().unwrap();
    let budget = two_queues.connections();
    assert_eq!(
        (budget.lease_keeper, budget.runtime, budget.total()),
        (3, 8, 11)
    );
    let set = h.worker().connections(4).build().unwrap().connections();
    assert_eq!(set.runtime, 4);
    let too_few = h.worker().queue("mail", 3).connections(4).build();
    match too_few {
        Err(BuildError::InvalidOption { option, reason }) => {
            assert_eq!(option, "connections");
            assert!(reason.contains("at least 5"), "{reason}");
        }
        other => panic!("expected an invalid `connections`, got {:?}", other.err()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_uses_its_own_connections_within_its_budget_and_none_of_the_applications() {
    let h = Harness::new().await;
    // Opens a connection only when asked for one.
    let app = PgPoolOptions::new()
        .max_connections(3)
        .connect_lazy_with((*h.store.pool().connect_options()).clone());
    let ledger = Ledger::default();
    let mut ids = Vec::new();
    for n in 0..300 {
        ids.push(enqueue(&h.store, Noop { n }).await);
    }
    let worker = job::Worker::builder(job::PgStore::new(app.clone()))
        .register::<Noop>()
        .queue("default", 20)
        .poll_interval(Duration::from_millis(20))
        .state(ledger.clone())
        .build()
        .unwrap();
    let budget = worker.connections().total() as i64;
    let handle = worker.start();
    let mut most = 0;
    for id in &ids {
        h.reaches(*id, JobState::Completed).await;
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND application_name LIKE 'job %'",
        )
        .fetch_one(h.store.pool())
        .await
        .unwrap();
        most = most.max(open);
    }
    handle.shutdown().await;
    assert!(
        most > 0 && most <= budget,
        "{most} connections of the worker's, budget {budget}"
    );
    assert_eq!(app.size(), 0, "the application's pool was never used");
    app.close().await;
}
