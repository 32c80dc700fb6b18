//! LISTEN/NOTIFY wake-ups. Every wait is bounded; absence is shown by ordering, not by time.

#[path = "common/silence.rs"]
mod silence;
mod store_support;

use std::time::Duration;

use job_core::{NewJob, Store, Wakeups};
use job_postgres::PgStore;
use job_testkit::TestDb;
use store_support::{claim_one, new_job};

const WAIT: Duration = Duration::from_secs(5);

fn on(queue: &str) -> NewJob {
    NewJob {
        queue: queue.to_owned(),
        ..new_job("noop")
    }
}

/// The next wake-up, failing after [`WAIT`].
async fn next(wakeups: &mut Wakeups) -> String {
    tokio::time::timeout(WAIT, wakeups.recv())
        .await
        .expect("no wake-up within the wait")
        .expect("the listener ended")
}

/// Enqueues on `marker` and returns every wake-up up to and including its own. Notifications
/// arrive in commit order, so anything committed before the marker shows up first.
async fn until_marker(store: &PgStore, wakeups: &mut Wakeups, marker: &str) -> Vec<String> {
    store.enqueue(on(marker)).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let queue = next(wakeups).await;
        let done = queue == marker;
        seen.push(queue);
        if done {
            return seen;
        }
    }
}

#[tokio::test]
async fn listen_delivers_a_wake_up_for_a_committed_insert() {
    let db = TestDb::new().await;
    let store = db.store();
    let mut wakeups = store.listen().await.unwrap();
    store.enqueue(on("mail")).await.unwrap();
    assert_eq!(next(&mut wakeups).await, "mail");
    // One per distinct queue per statement, whatever the batch size.
    let batch = vec![on("a"), on("b"), on("a"), on("a")];
    store.enqueue_many(batch).await.unwrap();
    let mut queues = vec![next(&mut wakeups).await, next(&mut wakeups).await];
    queues.sort();
    assert_eq!(queues, ["a", "b"]);
    assert_eq!(
        until_marker(&store, &mut wakeups, "marker").await,
        ["marker"]
    );
    db.close().await;
}

#[tokio::test]
async fn listen_delivers_no_wake_up_for_a_rolled_back_insert_or_a_future_job() {
    let db = TestDb::new().await;
    let store = db.store();
    let mut wakeups = store.listen().await.unwrap();
    let mut tx = store.pool().begin().await.unwrap();
    job_postgres::enqueue(&mut *tx, &on("rolled_back"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let later = NewJob {
        run_at: job_core::RunAt::In(Duration::from_secs(3600)),
        ..on("later")
    };
    store.enqueue(later).await.unwrap();
    assert_eq!(
        until_marker(&store, &mut wakeups, "marker").await,
        ["marker"]
    );
    db.close().await;
}

#[tokio::test]
async fn raw_sql_inserts_and_releases_wake_listeners_too() {
    let db = TestDb::new().await;
    let store = db.store();
    let mut wakeups = store.listen().await.unwrap();
    sqlx::query("SELECT job.enqueue('noop', '{}', queue => 'from_sql')")
        .execute(store.pool())
        .await
        .unwrap();
    assert_eq!(next(&mut wakeups).await, "from_sql");
    sqlx::query("INSERT INTO job.jobs (kind, queue) VALUES ('noop', 'raw'), ('noop', 'raw')")
        .execute(store.pool())
        .await
        .unwrap();
    assert_eq!(next(&mut wakeups).await, "raw");
    store.enqueue(new_job("noop")).await.unwrap();
    assert_eq!(next(&mut wakeups).await, "default");
    // Drain the default queue's jobs' wake-ups and claim one of them, then release it.
    let claimed = claim_one(&store, "noop").await;
    assert_eq!(
        store
            .release(&[job::Release::unstarted(claimed.lease)])
            .await
            .unwrap(),
        1
    );
    assert_eq!(next(&mut wakeups).await, "default");
    db.close().await;
}

#[tokio::test]
async fn after_its_connection_is_terminated_the_listener_reconnects_and_delivers_again() {
    let db = TestDb::new().await;
    let store = db.store();
    let mut wakeups = store.listen().await.unwrap();
    assert_eq!(
        until_marker(&store, &mut wakeups, "before").await,
        ["before"]
    );

    let listener_pids = || async {
        sqlx::query_scalar::<_, i32>(
            "SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND query ILIKE 'LISTEN%'",
        )
        .fetch_all(store.pool())
        .await
        .unwrap()
    };
    let old = listener_pids().await;
    assert_eq!(
        old.len(),
        1,
        "expected one listening backend, found {old:?}"
    );
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(old[0])
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert!(terminated);

    // Wake-ups sent while it reconnects are lost, so keep sending until one arrives.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        store.enqueue(on("after")).await.unwrap();
        match tokio::time::timeout(Duration::from_millis(250), wakeups.recv()).await {
            Ok(Some(queue)) if queue == "after" => break,
            Ok(Some(_)) => {}
            Ok(None) => panic!("the listener ended instead of reconnecting"),
            Err(_) => assert!(
                tokio::time::Instant::now() < deadline,
                "the listener did not reconnect within 15s"
            ),
        }
    }
    let new = listener_pids().await;
    assert_eq!(new.len(), 1);
    assert_ne!(new, old);
    db.close().await;
}

#[tokio::test]
async fn the_listener_task_ends_when_the_receiver_is_dropped() {
    let db = TestDb::new().await;
    let store = db.store();
    let wakeups = store.listen().await.unwrap();
    drop(wakeups);
    // Its connection goes away once the task notices.
    store_support::eventually(WAIT, "the listening connection closed", || async {
        let listening: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND query ILIKE 'LISTEN%'",
        )
        .fetch_one(store.pool())
        .await
        .unwrap();
        listening == 0
    })
    .await;
    db.close().await;
}

#[tokio::test]
async fn closing_the_pool_ends_the_listener_and_does_not_hang() {
    let db = TestDb::new().await;
    let store = db.store();
    let mut wakeups = store.listen().await.unwrap();
    tokio::time::timeout(WAIT, store.pool().close())
        .await
        .expect("the pool did not close: the listener kept its connection");
    let ended = tokio::time::timeout(WAIT, wakeups.recv()).await;
    assert_eq!(ended, Ok(None), "the listener should end with the pool");
    db.close().await;
}

#[tokio::test]
async fn a_listener_that_listens_again_wakes_every_queue() {
    // Notifications sent while the listener was gone are lost: once it listens again, every
    // queue is woken (an empty name), so that what was enqueued meanwhile is claimed then and
    // not at the workers' next poll.
    let db = TestDb::new().await;
    let store = db.store();
    let mut wakeups = store.listen().await.unwrap();
    assert_eq!(
        until_marker(&store, &mut wakeups, "before").await,
        ["before"]
    );
    let terminated: bool = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()
           AND query ILIKE 'LISTEN%'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert!(terminated);
    // Nothing is enqueued: the wake-up comes from the listener itself.
    assert_eq!(next(&mut wakeups).await, "", "every queue woken");
    // And it delivers again.
    assert_eq!(until_marker(&store, &mut wakeups, "after").await, ["after"]);
    db.close().await;
}

#[tokio::test]
async fn a_listener_whose_connection_goes_silent_is_replaced_and_delivers_again() {
    // A connection that goes silent (its server's host vanished, a firewall dropped the flow)
    // never fails: a listener on it would hear nothing for ever. After a quiet spell the
    // listener checks its connection, and replaces one that does not answer.
    let db = TestDb::new().await;
    let direct = db.store();
    let hole = silence::Blackhole::start(&db.connect_options()).await;
    let proxied = PgStore::new(job_postgres::pool_options().connect_lazy_with(hole.options()))
        .with_listen_check(Duration::from_millis(200));
    let mut wakeups = proxied.listen().await.unwrap();
    assert_eq!(
        until_marker(&direct, &mut wakeups, "before").await,
        ["before"]
    );
    hole.silence();
    // The quiet spell, the check's bound and a new connection; nothing enqueued meanwhile.
    let bound = Duration::from_millis(200) + job_postgres::POOL_CHECK_TIMEOUT + WAIT;
    let woken = tokio::time::timeout(bound, wakeups.recv())
        .await
        .expect("the listener was not replaced")
        .expect("the listener ended");
    assert_eq!(woken, "", "every queue woken once it listens again");
    assert_eq!(
        until_marker(&direct, &mut wakeups, "after").await,
        ["after"]
    );
    db.close().await;
}
