//! Jobs on their last attempt, claimed into a worker's prefetch buffer, are not lost with it:
//! a worker process holding a long job and twenty prefetched ones, every one of them on its
//! only attempt (`max_attempts = 1`), is SIGKILLed. The rescuer counts the long job's attempt
//! (its handler started: a dead letter, as a job that may have killed its worker must be), and
//! retries the twenty that never started without counting theirs: another worker completes
//! each of them, once.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use job_chaos::{ChaosWork, LEDGER_DDL};
use job_core::{EnqueueOptions, JobState, NewJob, Store, DEFAULT_PAYLOAD_LIMIT};
use job_testkit::TestDb;
use sqlx::PgPool;

/// The jobs that wait in the doomed worker's prefetch buffer.
const PREFETCHED: usize = 20;

fn spawn(url: &str, id: &str, concurrency: usize, prefetch: usize) -> Child {
    Command::new(env!("CARGO_BIN_EXE_job-chaos"))
        .args(["--database-url", url, "--worker-id", id])
        .args(["--concurrency", &concurrency.to_string()])
        .args(["--prefetch", &prefetch.to_string()])
        .arg("--watch-stdin")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting a job-chaos worker")
}

fn only_attempt(n: u32, work_ms: u64) -> NewJob {
    let work = ChaosWork {
        n,
        fail_first: 0,
        work_ms,
        blocking: false,
    };
    let options = EnqueueOptions {
        max_attempts: Some(1),
        ..EnqueueOptions::default()
    };
    NewJob::build(&work, options, DEFAULT_PAYLOAD_LIMIT).expect("a valid job")
}

async fn count(pool: &PgPool, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(pool)
        .await
        .expect("reading the job table")
}

/// Polls `sql` (a count) until it reaches `want`, for at most `within`.
async fn wait_for(pool: &PgPool, sql: &str, want: i64, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        let n = count(pool, sql).await;
        if n == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {n} after {within:?}, want {want}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetched_last_attempts_lost_with_their_worker_run_once_elsewhere() {
    let db = TestDb::new().await;
    let pool = db.pool();
    sqlx::raw_sql(LEDGER_DDL).execute(&pool).await.unwrap();
    let store = db.store();
    let long = store.enqueue(only_attempt(0, 60_000)).await.unwrap();
    let short: Vec<i64> = store
        .enqueue_many(
            (1..=PREFETCHED as u32)
                .map(|n| only_attempt(n, 10))
                .collect(),
        )
        .await
        .unwrap();

    // One slot, taken by the long job; the others wait in the prefetch buffer, leased.
    let mut doomed = spawn(&db.url(), "doomed", 1, PREFETCHED);
    wait_for(
        &pool,
        "SELECT count(*) FROM chaos.executions",
        1,
        Duration::from_secs(30),
        "executions started by the doomed worker",
    )
    .await;
    wait_for(
        &pool,
        "SELECT count(*) FROM job.jobs WHERE state = 'running'",
        PREFETCHED as i64 + 1,
        Duration::from_secs(30),
        "jobs the doomed worker holds",
    )
    .await;
    doomed.kill().unwrap();
    doomed.wait().unwrap();

    let mut heir = spawn(&db.url(), "heir", 4, 0);
    wait_for(
        &pool,
        "SELECT count(*) FROM job.jobs WHERE state IN ('completed', 'discarded')",
        PREFETCHED as i64 + 1,
        Duration::from_secs(60),
        "jobs finished after the kill",
    )
    .await;
    let _ = heir.kill();
    let _ = heir.wait();

    let long_row = store.get(long).await.unwrap().unwrap();
    assert_eq!(
        (long_row.state, long_row.attempt),
        (JobState::Discarded, 1),
        "the long job's attempt started: the rescuer must count it"
    );
    let classes: Vec<&str> = long_row.errors.iter().map(|e| e.class.as_str()).collect();
    assert_eq!(classes, ["lease_expired"]);
    for id in short {
        let row = store.get(id).await.unwrap().unwrap();
        assert_eq!(
            (row.state, row.attempt, row.errors.len()),
            (JobState::Completed, 1, 0),
            "job {id}, prefetched and never started by the killed worker: {:?}",
            row.errors
        );
    }
    let runs: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT job_id, count(*) FROM chaos.executions GROUP BY job_id HAVING count(*) <> 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert!(runs.is_empty(), "jobs not executed exactly once: {runs:?}");
    assert_eq!(
        count(&pool, "SELECT count(DISTINCT job_id) FROM chaos.executions").await,
        PREFETCHED as i64 + 1
    );
    db.close().await;
}
