//! Recovery with a backlog: a worker process is SIGKILLed while it runs a long job, and
//! another worker is busy with a backlog of thousands of due jobs. The killed job must start
//! again within two leases plus the poll interval of the kill, not behind the backlog: the
//! rescue keeps the job's place in the claim order.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use job_chaos::{ChaosWork, LEASE, LEDGER_DDL, POLL_INTERVAL};
use job_core::{EnqueueOptions, NewJob, Store, DEFAULT_PAYLOAD_LIMIT};
use job_testkit::TestDb;
use sqlx::PgPool;

/// Jobs of the backlog: 20 ms each, far more than the second worker runs in the test's time.
const BACKLOG: usize = 3000;

fn spawn(url: &str, id: &str, concurrency: usize) -> Child {
    Command::new(env!("CARGO_BIN_EXE_job-chaos"))
        .args(["--database-url", url, "--worker-id", id])
        .args(["--concurrency", &concurrency.to_string()])
        .arg("--watch-stdin")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting a job-chaos worker")
}

/// When the execution of `attempt` of job `id` started, once it has.
async fn started(pool: &PgPool, id: i64, attempt: i32) -> Option<DateTime<Utc>> {
    sqlx::query_scalar("SELECT started_at FROM chaos.executions WHERE job_id = $1 AND attempt = $2")
        .bind(id)
        .bind(attempt)
        .fetch_optional(pool)
        .await
        .expect("reading the ledger")
}

fn job(n: u32, work_ms: u64) -> NewJob {
    let work = ChaosWork {
        n,
        fail_first: 0,
        work_ms,
        blocking: false,
    };
    NewJob::build(&work, EnqueueOptions::default(), DEFAULT_PAYLOAD_LIMIT).expect("a valid job")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_job_starts_again_within_two_leases_despite_a_backlog() {
    let db = TestDb::new().await;
    let pool = db.pool();
    sqlx::raw_sql(LEDGER_DDL).execute(&pool).await.unwrap();
    let store = db.store();
    let long = store.enqueue(job(0, 60_000)).await.unwrap();

    let mut doomed = spawn(&db.url(), "doomed", 1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while started(&pool, long, 1).await.is_none() {
        assert!(Instant::now() < deadline, "the long job never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A backlog that became due after the long job, and a worker busy with it.
    store
        .enqueue_many((1..=BACKLOG as u32).map(|n| job(n, 20)).collect())
        .await
        .unwrap();
    let mut busy = spawn(&db.url(), "busy", 2);
    let deadline = Instant::now() + Duration::from_secs(30);
    while started(&pool, long, 1).await.is_some()
        && sqlx::query_scalar::<_, i64>("SELECT count(*) FROM chaos.executions")
            .fetch_one(&pool)
            .await
            .unwrap()
            < 20
    {
        assert!(Instant::now() < deadline, "the busy worker never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    doomed.kill().unwrap();
    doomed.wait().unwrap();
    let killed_at: DateTime<Utc> = sqlx::query_scalar("SELECT clock_timestamp()")
        .fetch_one(&pool)
        .await
        .unwrap();
    let bound = LEASE * 2 + POLL_INTERVAL;
    let give_up = Instant::now() + bound + Duration::from_secs(2);
    let restarted = loop {
        if let Some(at) = started(&pool, long, 2).await {
            break at;
        }
        if Instant::now() > give_up {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM job.jobs WHERE state IN ('available', 'retryable')",
            )
            .fetch_one(&pool)
            .await
            .unwrap();
            panic!(
                "the killed worker's job did not start again within {bound:?} of the kill \
                 ({waiting} jobs still waiting)"
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let recovery = (restarted - killed_at).to_std().unwrap_or_default();
    eprintln!(
        "recovery: the killed job started again {recovery:?} after the kill (bound {bound:?})"
    );
    let _ = busy.kill();
    let _ = busy.wait();
    assert!(
        recovery <= bound,
        "the killed job started again {recovery:?} after the kill, over {bound:?}"
    );
    db.close().await;
}
