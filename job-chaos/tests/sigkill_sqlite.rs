//! Real processes sharing one SQLite file, killed with SIGKILL while they work: every job
//! still completes, its effect (written with `complete_in` in the job's own transaction) exists
//! exactly once, and the jobs the dead processes held are rescued by the others once their
//! leases expire in the database's time.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use job_core::{Admin, JobFilter, JobState, NewJob, Store};
use job_testkit::TestSqlite;

const JOBS: u32 = 240;
const WORKERS: usize = 3;
const KILLS: usize = 6;

/// A `job-chaos-sqlite` process; stopping it (closing its stdin) or killing it is the test's.
struct Process {
    child: Child,
}

impl Process {
    fn spawn(db: &std::path::Path, id: &str) -> Process {
        let child = Command::new(env!("CARGO_BIN_EXE_job-chaos-sqlite"))
            .arg(db)
            .arg(id)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn job-chaos-sqlite");
        Process { child }
    }

    /// SIGKILL: no drain, no release, nothing written.
    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reap");
    }

    /// Closes stdin: the worker drains and exits 0.
    fn stop(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "a worker exited with {status}");
    }
}

async fn completed<S: Store + Admin>(store: &S) -> u64 {
    store
        .stats(&JobFilter::default())
        .await
        .unwrap()
        .in_state(JobState::Completed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkilled_processes_on_one_sqlite_file_lose_no_job_and_repeat_no_effect() {
    let db = TestSqlite::new().await;
    let store = db.store();
    for table in ["chaos_starts", "chaos_effects"] {
        sqlx::query(&format!(
            "CREATE TABLE {table} (job_id INTEGER NOT NULL, attempt INTEGER NOT NULL, \
             worker TEXT NOT NULL)"
        ))
        .execute(store.pool())
        .await
        .unwrap();
    }
    let jobs = (0..JOBS)
        .map(|n| NewJob::new("chaos.sqlite_work", format!(r#"{{"n":{n}}}"#)))
        .collect();
    store.enqueue_many(jobs).await.unwrap();

    let mut next = 0;
    let mut spawn = |db: &std::path::Path| {
        next += 1;
        Process::spawn(db, &format!("sqlite-worker-{next}"))
    };
    let mut fleet: Vec<Process> = (0..WORKERS).map(|_| spawn(&db.path())).collect();

    // Kill a worker every 300 ms while work remains, replacing it at once.
    let mut kills = 0;
    while kills < KILLS && completed(&store).await < u64::from(JOBS) * 3 / 4 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let victim = fleet.remove(kills % fleet.len());
        victim.kill();
        kills += 1;
        fleet.push(spawn(&db.path()));
    }
    assert!(
        kills >= 2,
        "the work ended before the kills: only {kills} landed"
    );

    let deadline = Instant::now() + Duration::from_secs(120);
    while completed(&store).await < u64::from(JOBS) {
        assert!(
            Instant::now() < deadline,
            "only {} of {JOBS} jobs completed within 120 s",
            completed(&store).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for process in fleet {
        process.stop();
    }

    let stats = store.stats(&JobFilter::default()).await.unwrap();
    assert_eq!(
        stats.in_state(JobState::Completed),
        u64::from(JOBS),
        "{stats:?}"
    );
    let (effects, distinct): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT job_id) FROM chaos_effects")
            .fetch_one(store.pool())
            .await
            .unwrap();
    assert_eq!(
        (effects, distinct),
        (i64::from(JOBS), i64::from(JOBS)),
        "every job's effect exactly once"
    );
    // The kills landed on running work: some executions never finished, and their jobs were
    // rescued from expired leases and run again.
    let started: i64 = sqlx::query_scalar("SELECT count(*) FROM chaos_starts")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert!(
        started > i64::from(JOBS),
        "{started} starts for {JOBS} jobs"
    );
    let rows = store
        .list(&JobFilter {
            limit: Some(JOBS),
            ..JobFilter::default()
        })
        .await
        .unwrap();
    let rescued = rows
        .iter()
        .filter(|r| r.errors.iter().any(|e| e.class == "lease_expired"))
        .count();
    assert!(rescued > 0, "no job was rescued from a killed worker");
    // Every effect was written by the attempt that completed the job.
    for row in &rows {
        let attempts: Vec<i32> =
            sqlx::query_scalar("SELECT attempt FROM chaos_effects WHERE job_id = ?1")
                .bind(row.id)
                .fetch_all(store.pool())
                .await
                .unwrap();
        assert_eq!(attempts, vec![row.attempt], "job {}", row.id);
    }
    db.close().await;
}
