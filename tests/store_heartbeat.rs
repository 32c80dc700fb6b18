//! Heartbeats, PostgreSQL specifics: a cancellation requested in SQL is reported. The
//! heartbeat contract (renewal, lost leases) is in `job_testkit::conformance::heartbeat`.

mod store_support;

use std::time::Duration;

use job_core::{Lease, Renewal, Store};
use job_testkit::TestDb;
use store_support::{claim_one, new_job};

fn renew(lease: Lease, secs: u64) -> Renewal {
    Renewal {
        lease,
        extend_by: Duration::from_secs(secs),
        stuck: false,
    }
}

#[tokio::test]
async fn heartbeat_reports_requested_cancellations() {
    let db = TestDb::new().await;
    let store = db.store();
    store.enqueue(new_job("noop")).await.unwrap();
    let job = claim_one(&store, "noop").await;
    sqlx::query("UPDATE job.jobs SET cancel_requested = true WHERE id = $1")
        .bind(job.lease.id)
        .execute(store.pool())
        .await
        .unwrap();
    let report = store.heartbeat(&[renew(job.lease, 30)]).await.unwrap();
    assert_eq!(report.cancel_requested, vec![job.lease]);
    assert!(report.lost.is_empty());
    db.close().await;
}

/// A worker's heartbeat and its completer write overlapping batches at the same time; both
/// lock rows in id order, so they never deadlock (PostgreSQL would abort one after
/// `deadlock_timeout`, which costs every lease in the heartbeat). The finalize skips the rows
/// the heartbeat holds at that moment (`Busy`), and writes them when tried again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_heartbeat_and_finalize_of_overlapping_batches_never_deadlock() {
    let db = TestDb::new().await;
    let store = db.store();
    for round in 0..20u64 {
        let jobs: Vec<_> = (0..200).map(|_| new_job("noop")).collect();
        store.enqueue_many(jobs).await.unwrap();
        let mut claimed = Vec::new();
        while claimed.len() < 200 {
            let got = store
                .claim(&store_support::request(&["noop"], 200))
                .await
                .unwrap();
            assert!(!got.is_empty(), "the jobs should be claimable");
            claimed.extend(got);
        }
        let mut rng = fastrand::Rng::with_seed(round);
        let mut renewals: Vec<_> = claimed.iter().map(|c| renew(c.lease, 30)).collect();
        rng.shuffle(&mut renewals);
        let mut finals: Vec<_> = claimed
            .iter()
            .map(|c| job_core::Finalize {
                result: None,
                lease: c.lease,
                outcome: job_core::Outcome::Complete,
            })
            .collect();
        rng.shuffle(&mut finals);
        let (beat, fin) = tokio::join!(
            {
                let s = store.clone();
                async move { s.heartbeat(&renewals).await }
            },
            {
                let (s, finals) = (store.clone(), finals.clone());
                async move { s.finalize(&finals).await }
            },
        );
        beat.unwrap_or_else(|e| panic!("round {round}: heartbeat failed: {e}"));
        let fin = fin.unwrap_or_else(|e| panic!("round {round}: finalize failed: {e}"));
        let busy: Vec<_> = finals
            .iter()
            .zip(&fin)
            .filter(|(_, f)| **f == job_core::Finalized::Busy)
            .map(|(item, _)| item.clone())
            .collect();
        assert_eq!(
            fin.iter()
                .filter(|f| **f == job_core::Finalized::Applied)
                .count()
                + busy.len(),
            200,
            "round {round}: {fin:?}"
        );
        let again = store.finalize(&busy).await.unwrap();
        assert!(
            again.iter().all(|f| *f == job_core::Finalized::Applied),
            "round {round}: {again:?}"
        );
    }
    db.close().await;
}

/// A row that another transaction holds (here an open transaction that completed the job, as
/// `complete_in` does before its commit) is reported busy, neither renewed nor lost, without
/// the heartbeat waiting for it; the others are renewed. Once that transaction commits, the
/// next heartbeat finds the lease gone.
#[tokio::test]
async fn a_row_another_transaction_holds_is_reported_busy_without_waiting_for_it() {
    let db = TestDb::new().await;
    let store = db.store();
    store
        .enqueue_many(vec![new_job("noop"), new_job("noop"), new_job("noop")])
        .await
        .unwrap();
    let claimed = store
        .claim(&store_support::request(&["noop"], 3))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 3);
    // The middle one is held: a heartbeat that waited for it would hold the first one too.
    let held = claimed[1].lease;
    let until = |id| {
        sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>(
            "SELECT coalesce(locked_until, 'epoch') FROM job.jobs WHERE id = $1",
        )
        .bind(id)
        .fetch_one(store.pool())
    };
    let held_until = until(held.id).await.unwrap();
    let mut tx = store.pool().begin().await.unwrap();
    sqlx::query(
        "UPDATE job.jobs SET state = 'completed', finalized_at = now(), lock_token = NULL, \
         locked_until = NULL, locked_by = NULL WHERE id = $1",
    )
    .bind(held.id)
    .execute(&mut *tx)
    .await
    .unwrap();

    let renewals: Vec<_> = claimed.iter().map(|c| renew(c.lease, 3600)).collect();
    let report = tokio::time::timeout(Duration::from_secs(10), store.heartbeat(&renewals))
        .await
        .expect("the heartbeat waited for the row another transaction holds")
        .unwrap();
    assert_eq!(report.busy, vec![held], "{report:?}");
    assert!(report.lost.is_empty(), "{report:?}");
    assert_eq!(until(held.id).await.unwrap(), held_until, "not renewed");
    for other in [claimed[0].lease.id, claimed[2].lease.id] {
        let renewed = until(other).await.unwrap();
        assert!(
            renewed > chrono::Utc::now() + chrono::Duration::minutes(30),
            "job {other} renewed by an hour: {renewed}"
        );
    }

    tx.commit().await.unwrap();
    let report = store.heartbeat(&renewals).await.unwrap();
    assert_eq!((report.lost, report.busy), (vec![held], vec![]));
    db.close().await;
}

/// Moves the server's start time, as `job.rescue_expired` reads it, to `ago` before now.
async fn server_started(store: &job_postgres::PgStore, ago: &str) {
    sqlx::query(&format!(
        "CREATE OR REPLACE FUNCTION job.server_started_at() RETURNS timestamptz
         LANGUAGE sql STABLE AS $$ SELECT now() - interval '{ago}' $$"
    ))
    .execute(store.pool())
    .await
    .unwrap();
}

/// Migration 0041: a lease that ran out while the server was down (or that runs out just
/// after its start) is left to its holder for the first 15 seconds of the server's life, so
/// that a holder whose code cannot stop renews it before anyone runs the job beside that code.
/// A lease out since well before the start is rescued as before, and so is every lease once
/// the server is 15 seconds old.
#[tokio::test]
async fn the_rescue_leaves_leases_that_ran_out_across_a_restart_to_their_holders_for_a_while() {
    let db = TestDb::new().await;
    let store = db.store();
    store.enqueue(new_job("noop")).await.unwrap();
    let during = claim_one(&store, "noop").await;
    store.enqueue(new_job("noop")).await.unwrap();
    let before = claim_one(&store, "noop").await;
    // The server started 5 seconds ago; one lease ran out during the restart, 3 seconds
    // before the start, the other a minute before it, while the server still answered.
    server_started(&store, "5 seconds").await;
    for (job, out) in [(&during, "8 seconds"), (&before, "65 seconds")] {
        sqlx::query(&format!(
            "UPDATE job.jobs SET locked_until = now() - interval '{out}' WHERE id = $1"
        ))
        .bind(job.lease.id)
        .execute(store.pool())
        .await
        .unwrap();
    }
    let rescued = store.rescue_expired(100).await.unwrap();
    assert_eq!(rescued.retried, 1, "{rescued:?}");
    let state = |id| {
        let pool = store.pool().clone();
        async move {
            sqlx::query_scalar::<_, String>("SELECT state::text FROM job.jobs WHERE id = $1")
                .bind(id)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(state(before.lease.id).await, "retryable");
    assert_eq!(
        state(during.lease.id).await,
        "running",
        "left to its holder"
    );
    // Its holder's heartbeat renews it, however late.
    let report = store.heartbeat(&[renew(during.lease, 30)]).await.unwrap();
    assert!(report.lost.is_empty(), "{report:?}");
    // A holder that died: once the server is 15 seconds old, its lease is rescued.
    sqlx::query("UPDATE job.jobs SET locked_until = now() - interval '8 seconds' WHERE id = $1")
        .bind(during.lease.id)
        .execute(store.pool())
        .await
        .unwrap();
    server_started(&store, "16 seconds").await;
    assert_eq!(store.rescue_expired(100).await.unwrap().retried, 1);
    assert_eq!(state(during.lease.id).await, "retryable");
    db.close().await;
}

/// A crash restart (a backend killed: the postmaster ends every session, runs crash recovery
/// and answers again, as after the OOM killer) is a start for the restart hold (migrations
/// 0041 and 0043): `job.server_started_at()` moves to the recovery's end, though
/// `pg_postmaster_start_time()` keeps the postmaster's first start. On a private cluster, the
/// one kind of server a test may crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_restart_moves_the_start_the_restart_hold_counts_from() {
    use chrono::{DateTime, Utc};
    use sqlx::{Connection, PgConnection};
    let cluster = tokio::task::spawn_blocking(job_testkit::PrivateCluster::start)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("a private cluster: {e}"));
    let url = cluster.url("postgres");
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    job_postgres::migrate(&pool).await.unwrap();
    // The private cluster commits without waiting for its WAL to reach the disk, and a crash
    // restart loses what shared memory held: make the schema durable first.
    sqlx::query("CHECKPOINT").execute(&pool).await.unwrap();
    pool.close().await;
    // The checkpointer, like every process of the server but the postmaster, is started anew
    // by a crash restart: its pid tells when the restart happened.
    const CHECKPOINTER: &str =
        "SELECT pid FROM pg_stat_activity WHERE backend_type = 'checkpointer'";
    let mut victim = PgConnection::connect(&url).await.unwrap();
    let (pid, before, checkpointer): (i32, DateTime<Utc>, i32) = sqlx::query_as(&format!(
        "SELECT pg_backend_pid(), clock_timestamp(), ({CHECKPOINTER})"
    ))
    .fetch_one(&mut victim)
    .await
    .unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success(), "kill -KILL {pid} failed");
    drop(victim);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut conn = loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the server was not back within 60 s of the crash:\n{}",
            cluster.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let Ok(mut conn) = PgConnection::connect(&url).await else {
            continue;
        };
        let now: Result<(Option<i32>, bool), _> =
            sqlx::query_as(&format!("SELECT ({CHECKPOINTER}), pg_is_in_recovery()"))
                .fetch_one(&mut conn)
                .await;
        if let Ok((Some(new), false)) = now {
            if new != checkpointer {
                break conn;
            }
        }
    };
    let (postmaster, started): (DateTime<Utc>, DateTime<Utc>) =
        sqlx::query_as("SELECT pg_postmaster_start_time(), job.server_started_at()")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert!(
        postmaster < before,
        "the postmaster restarted ({postmaster}): not a crash restart"
    );
    assert!(
        started > before,
        "job.server_started_at() is {started}, before the crash at {before}"
    );
    drop(conn);
    tokio::task::spawn_blocking(move || drop(cluster))
        .await
        .unwrap();
}

/// A rescue gives an `UntilStarted` key back when the job's only attempt never started
/// (migration 0044), unless another job took the key meanwhile. One that commits between the
/// rescue's snapshot and its write makes the write a unique violation: the rescue then runs
/// again without giving the key back, and the other job keeps it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rescue_racing_an_enqueue_of_the_key_it_gives_back_leaves_the_key_to_the_enqueue() {
    let db = TestDb::new().await;
    let store = db.store();
    let pool = store.pool().clone();
    let keyed = || job_core::NewJob {
        max_attempts: 1,
        unique: Some(job_core::Unique {
            key: "k".into(),
            scope: job_core::UniqueScope::UntilStarted,
            on_duplicate: job_core::OnDuplicate::Keep,
        }),
        ..new_job("noop")
    };
    let first = store.enqueue(keyed()).await.unwrap();
    let job = claim_one(&store, "noop").await;
    assert_eq!(job.lease.id, first);
    // Its worker died before it started: the lease ran out a minute ago.
    let key: String = sqlx::query_scalar(
        "UPDATE job.jobs SET locked_until = now() - interval '1 minute' WHERE id = $1
         RETURNING unique_key",
    )
    .bind(first)
    .fetch_one(&pool)
    .await
    .unwrap();
    // Another transaction takes the key (the claim spent it), not yet committed.
    let mut tx = pool.begin().await.unwrap();
    let second: i64 = sqlx::query_scalar(
        "INSERT INTO job.jobs (kind, payload, unique_key, unique_scope, max_attempts)
         VALUES ('noop', '{}', $1, 'started', 1) RETURNING id",
    )
    .bind(&key)
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    let rescuer = store.clone();
    let rescue = tokio::spawn(async move { rescuer.rescue_expired(10).await });
    // The rescue's write waits for that transaction's key.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(
            !rescue.is_finished(),
            "the rescue ended without waiting for the key: {:?}",
            rescue.await
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the rescue never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tx.commit().await.unwrap();
    let rescued = rescue
        .await
        .unwrap()
        .expect("the rescue runs again and goes through");
    assert_eq!((rescued.retried, rescued.discarded), (1, 0));
    let (state, scope, attempt): (String, String, i32) =
        sqlx::query_as("SELECT state::text, unique_scope, attempt FROM job.jobs WHERE id = $1")
            .bind(first)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(
        (state.as_str(), scope.as_str(), attempt),
        ("retryable", "spent", 0)
    );
    match store.enqueue(keyed()).await {
        Err(job_core::EnqueueError::Duplicate { existing, .. }) => assert_eq!(existing, second),
        other => panic!("expected a duplicate of job {second}, got {other:?}"),
    }
    db.close().await;
}
