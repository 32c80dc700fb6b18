//! Connections that go silent: the server's host vanishes (or a firewall drops the flow)
//! without a reset, so a statement sent on an open connection never gets an answer and no
//! error ever comes. Only a bound on the call ends it. The worker must recover on the
//! connections it opens afterwards, lose no job, and never hold a lease it cannot use.

use std::time::Duration;

use crate::silence::Blackhole;
use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_go_silent_stall_no_job_for_ever() {
    let chaos = Chaos::new().await;
    let options = chaos.db().connect_options();
    let hole = Blackhole::start(&options).await;
    let pool = job::pool_options()
        .max_connections(4)
        .connect_lazy_with(hole.options());
    let store = job::PgStore::new(pool);

    let ids = chaos.enqueue(600, 20).await;
    let worker = chaos
        .worker(store)
        .configure(|c| c.store_timeout = Duration::from_secs(2))
        .build()
        .unwrap()
        .start();
    // Three times, each once the worker has made progress again: the connections open at
    // that moment (idle ones, and those with a claim or a batch of outcomes in flight) go
    // silent for good.
    for round in 1..=3 {
        let before = worker.stats().completed;
        let started = tokio::time::Instant::now();
        while worker.stats().completed < before + 20 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no progress within 30s before silence {round}"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        hole.silence();
    }
    let rows = chaos.all_terminal(&ids).await;
    let stats = worker.shutdown().await.stats;
    assert_each_completed(&rows);
    chaos.timeline.assert_never_concurrent();
    assert!(stats.completed <= 600, "{stats:?}");
}
