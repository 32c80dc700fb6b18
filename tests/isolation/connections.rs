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

/// The reason `build()` refused `connections` with; fails the test when it built or refused
/// something else.
fn refused_connections(built: Result<job::Worker<job::PgStore>, BuildError>) -> String {
    match built {
        Err(BuildError::InvalidOption { option, reason }) => {
            assert_eq!(option, "connections", "{reason}");
            reason
        }
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("built"),
    }
}

/// At `u32::MAX` the pool's slot array was allocated at `start()` (300 GB: the process
/// aborted); thousands of queues took thousands of connections by default.
#[tokio::test]
async fn a_budget_over_ten_thousand_connections_is_refused_naming_connections() {
    let h = Harness::new().await;
    for n in [10_001, u32::MAX] {
        let reason = refused_connections(h.worker().connections(n).build());
        assert!(
            reason.contains(&format!("at most 10000, got {n}")),
            "{reason}"
        );
    }
    let most = h
        .worker()
        .connections(10_000)
        .build()
        .unwrap()
        .connections();
    assert_eq!((most.runtime, most.total()), (10_000, 10_003));
    // The harness's worker runs one queue; `extra` more make `extra + 1`.
    let queues = |extra: usize| (0..extra).fold(h.worker(), |w, i| w.queue(format!("q{i}"), 1));
    // 4,998 queues take 2 per queue + 4 = 10,000 by default; 4,999 would take 10,002.
    let default = queues(4_997).build().unwrap().connections();
    assert_eq!(default.runtime, 10_000);
    let reason = refused_connections(queues(4_998).build());
    assert!(reason.contains("4999 queues"), "{reason}");
    assert!(
        reason.contains("set `connections` (5002 to 10000)"),
        "{reason}"
    );
    let set = queues(4_998).connections(10_000).build().unwrap();
    assert_eq!(set.connections().runtime, 10_000);
    // 9,998 queues need one connection each + 3: more than the bound, whatever is set.
    for connections in [None, Some(10_000)] {
        let reason = refused_connections(
            queues(9_997)
                .configure(|c| c.connections = connections)
                .build(),
        );
        assert!(reason.contains("at least 10001"), "{reason}");
        assert!(reason.contains("several workers"), "{reason}");
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
