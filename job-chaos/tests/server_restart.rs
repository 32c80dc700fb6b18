//! Server restarts: worker processes (the `job-chaos` binary) run against a PostgreSQL cluster
//! of the test's own ([`PrivateCluster`]), which is stopped (`fast`, `immediate`, `fast`) for
//! [`DOWN`] and started again, three times. After each start, jobs enqueued once the server
//! answers must be done promptly: the stalls of the three restarts (from the server answering
//! to the last of its jobs completed) must add up to under [`BOUND`].
//!
//! What it guards: sqlx retries a connection the server refuses inside the acquire that needs
//! it, sleeping up to a fifth of the pool's `acquire_timeout` between tries and never sooner
//! when the server returns. With sqlx's default (30 s) on the worker's own pools, the tries
//! are 6 s apart after the first 10 s of an outage, and a worker slept on that long past the
//! server's return; [`DOWN`] has the server answer about 11 s into the outage, just after such
//! a try, so each restart idled the fleet about 5 s (15 s or more in all). The worker's pools
//! give up an acquire after `job_postgres::ACQUIRE_TIMEOUT` (5 s), which keeps the tries at
//! most a second apart: each stall is about a second at most.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use job_chaos::{ChaosWork, LEDGER_DDL, QUEUE};
use job_testkit::{PrivateCluster, StopMode};
use sqlx::{Connection, Executor, PgConnection};

/// Worker processes, each with 4 execution slots.
const WORKERS: usize = 2;

/// How long the server stays down each time: it answers again about 11 s after the workers'
/// first failed connection, just after the fourth of sqlx's tries at a 30 s acquire timeout
/// (0.01 s, then doubling: the ninth is 5.1 s in, then 10.2, 16.2, 22.2 s).
const DOWN: Duration = Duration::from_secs(11);

/// Jobs enqueued after each restart.
const JOBS: usize = 10;

/// The three restarts' stalls together at most: about 3 s in the fixed worker, about 15 s
/// before.
const BOUND: Duration = Duration::from_secs(10);

/// How long one restart's jobs may take before the test gives up on them.
const GIVE_UP: Duration = Duration::from_secs(60);

const DATABASE: &str = "chaos_restart";

/// A worker process, stopped (stdin closed, then killed if it has not exited) when dropped.
struct Worker {
    child: Child,
    log: PathBuf,
}

impl Worker {
    fn spawn(url: &str, id: &str) -> Worker {
        let log = std::env::temp_dir().join(format!(
            "job-chaos-server-restart-{}-{id}.log",
            std::process::id()
        ));
        let out = std::fs::File::create(&log).expect("creating a worker's log");
        let child = Command::new(env!("CARGO_BIN_EXE_job-chaos"))
            .args([
                "--database-url",
                url,
                "--worker-id",
                id,
                "--concurrency",
                "4",
            ])
            .arg("--watch-stdin")
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(Stdio::null())
            .spawn()
            .expect("starting a job-chaos worker");
        Worker { child, log }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Its stdin closed, it drains and exits.
        drop(self.child.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A new connection to the test's database, tried every 20 ms until the server takes it:
/// the time it did, and the connection. Never a pooled one, whose acquire has the very
/// back-off under test.
async fn connect(cluster: &PrivateCluster) -> (Instant, PgConnection) {
    let options = cluster.connect_options(DATABASE);
    let deadline = Instant::now() + GIVE_UP;
    loop {
        match PgConnection::connect_with(&options).await {
            Ok(conn) => return (Instant::now(), conn),
            Err(e) if Instant::now() > deadline => {
                panic!(
                    "the restarted server does not answer: {e}\n{}",
                    cluster.log_tail(20)
                )
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// Enqueues `JOBS` short chaos jobs, numbered from `first`, and returns their ids.
async fn enqueue(conn: &mut PgConnection, first: u32) -> Vec<i64> {
    let mut ids = Vec::with_capacity(JOBS);
    for n in first..first + JOBS as u32 {
        let work = ChaosWork {
            n,
            fail_first: 0,
            work_ms: 10,
            blocking: false,
        };
        let id: i64 = sqlx::query_scalar("SELECT job.enqueue('chaos.work', $1, queue => $2)")
            .bind(serde_json::to_value(work).unwrap())
            .bind(QUEUE)
            .fetch_one(&mut *conn)
            .await
            .expect("enqueueing a chaos job");
        ids.push(id);
    }
    ids
}

/// Waits until every job of `ids` has completed; false when `GIVE_UP` passed first.
async fn completed(conn: &mut PgConnection, ids: &[i64]) -> bool {
    let deadline = Instant::now() + GIVE_UP;
    while Instant::now() < deadline {
        let done: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM job.jobs WHERE id = ANY($1) AND state = 'completed'",
        )
        .bind(ids)
        .fetch_one(&mut *conn)
        .await
        .expect("reading the jobs' states");
        if done as usize == ids.len() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// `f` (which blocks: `pg_ctl`, `initdb`) off the runtime's threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f)
        .await
        .expect("a blocking task panicked")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_claim_again_within_a_second_or_so_of_a_restarted_server_answering() {
    let cluster = blocking(PrivateCluster::start).await.unwrap_or_else(|why| {
        panic!(
            "this test restarts a PostgreSQL cluster of its own, and none could be made: {why} \
             (set JOB_TESTKIT_PG_BINDIR to the directory of initdb and pg_ctl)"
        )
    });
    let cluster = std::sync::Arc::new(cluster);
    {
        let mut admin = PgConnection::connect_with(&cluster.connect_options("postgres"))
            .await
            .expect("connecting to the private cluster");
        admin
            .execute(format!("CREATE DATABASE {DATABASE}").as_str())
            .await
            .unwrap();
        admin.close().await.unwrap();
    }
    {
        let pool = job_postgres::pool_options()
            .max_connections(1)
            .connect_with(cluster.connect_options(DATABASE))
            .await
            .unwrap();
        job_postgres::migrate(&pool).await.expect("migrating");
        sqlx::raw_sql(LEDGER_DDL).execute(&pool).await.unwrap();
        pool.close().await;
    }

    let url = cluster.url(DATABASE);
    let workers: Vec<Worker> = (1..=WORKERS)
        .map(|i| Worker::spawn(&url, &format!("w{i}")))
        .collect();
    let logs: Vec<String> = workers
        .iter()
        .map(|w| w.log.display().to_string())
        .collect();

    // Running: a first batch completes.
    let (_, mut conn) = connect(&cluster).await;
    let ids = enqueue(&mut conn, 0).await;
    assert!(
        completed(&mut conn, &ids).await,
        "the workers never completed their first jobs (logs: {logs:?})"
    );
    conn.close().await.unwrap();

    let mut stalls = Vec::new();
    for (round, mode) in [StopMode::Fast, StopMode::Immediate, StopMode::Fast]
        .into_iter()
        .enumerate()
    {
        let c = cluster.clone();
        blocking(move || c.stop(mode))
            .await
            .expect("stopping the server");
        tokio::time::sleep(DOWN).await;
        let c = cluster.clone();
        blocking(move || c.start_again())
            .await
            .expect("starting the server again");
        let (answered, mut conn) = connect(&cluster).await;
        let ids = enqueue(&mut conn, 1000 * (round as u32 + 1)).await;
        let done = completed(&mut conn, &ids).await;
        let stall = answered.elapsed();
        conn.close().await.unwrap();
        assert!(
            done,
            "restart {} ({mode:?}): the jobs enqueued after it were not completed within \
             {GIVE_UP:?} (logs: {logs:?})",
            round + 1
        );
        eprintln!(
            "restart {} ({mode:?}): the jobs enqueued once the server answered were done \
             {stall:?} after it answered",
            round + 1
        );
        stalls.push(stall);
    }
    let total: Duration = stalls.iter().sum();
    drop(workers);
    assert!(
        total < BOUND,
        "after three restarts, the workers took {stalls:?} from the server answering to \
         completing the jobs enqueued then, {total:?} in all (bound {BOUND:?}): the worker's \
         pools waited out sqlx's reconnection back-off (see job_postgres::ACQUIRE_TIMEOUT); \
         worker logs: {logs:?}"
    );
    for log in &logs {
        let _ = std::fs::remove_file(log);
    }
}
