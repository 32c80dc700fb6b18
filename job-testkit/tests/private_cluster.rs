//! `TestDb`'s fallback to a private throwaway cluster when no server answers.
//!
//! Each case runs `TestDb` in child processes of this test binary, with the default server
//! pointed at a port where nothing listens (`JOB_TESTKIT_DEFAULT_URL`) and the cluster in a
//! directory of its own (`JOB_TESTKIT_CLUSTER_DIR`): deterministic, and the machine's real
//! server is never touched. The cluster started here is stopped at the end.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Instant;

use job_core::{Job, JobContext, JobError, JobState, NewJob, Store, Worker};
use job_testkit::{wait_for, Faults, Point, PrivateCluster, TestDb, TestWorker};

/// A port where no PostgreSQL listens.
const NOWHERE: &str = "postgres://postgres@127.0.0.1:1/test";

/// The test a child process runs.
const CHILD: &str = "child_uses_a_test_db";

/// What each child does: a `TestDb` from whatever server the harness finds, used and closed.
#[tokio::test]
#[ignore = "run in child processes by the tests below"]
async fn child_uses_a_test_db() {
    let db = TestDb::new().await;
    let id = db.store().enqueue(NewJob::new("noop", "{}")).await.unwrap();
    assert!(db.store().get(id).await.unwrap().is_some());
    println!("served by {}", db.url());
    db.close().await;
}

/// A job that does nothing; crashed once by the child below.
#[derive(serde::Serialize, serde::Deserialize)]
struct Noop {}

impl Job for Noop {
    const KIND: &'static str = "noop";
    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// The child of a fresh server's test: a job crashed after its handler ran, which only a
/// rescue brings back, waited for with the testkit's own wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run in a child process by the test below"]
async fn child_waits_for_a_crashed_job() {
    let db = TestDb::new().await;
    let store = db.store();
    let id = store.enqueue(NewJob::new("noop", "{}")).await.unwrap();
    let faults = Faults::new().crash_after(Point::Perform).times(1);
    let worker = Worker::builder(store.clone())
        .register::<Noop>()
        .queue("default", 1)
        .faults(faults.clone())
        .for_tests()
        .build()
        .unwrap()
        .start();
    let row = wait_for(&store, id, JobState::Completed).await;
    worker.shutdown().await;
    assert_eq!(row.attempt, 2);
    assert_eq!(row.errors[0].class, "lease_expired");
    assert_eq!(faults.crashes().len(), 1);
    db.close().await;
}

#[test]
fn on_a_server_started_a_moment_ago_a_crashed_job_is_rescued_within_the_wait() {
    let cluster = PrivateCluster::start().expect("a private cluster");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_waits_for_a_crashed_job",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("DATABASE_URL", cluster.url("postgres"))
        .output()
        .unwrap();
    let text = said(&out);
    assert!(out.status.success(), "the child failed:\n{text}");
    // The first TestDb waited out the rest of the restart hold, and said why.
    assert!(text.contains("rescues no lease in the first 15s"), "{text}");
    eprintln!("{text}");
}

fn child(dir: &Path) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            CHILD,
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env_remove("DATABASE_URL")
        .env("JOB_TESTKIT_DEFAULT_URL", NOWHERE)
        .env("JOB_TESTKIT_CLUSTER_DIR", dir);
    command
}

fn said(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn scratch_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("job-testkit-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Stops the cluster in `dir` (as `postgres` when we are root) and removes it.
fn stop_and_remove(dir: &Path) {
    let bindir = std::fs::read_to_string(dir.join("bindir")).unwrap_or_default();
    let pg_ctl = Path::new(bindir.trim()).join("pg_ctl");
    let data = dir.join("data");
    if !data.join("postmaster.pid").exists() {
        let _ = std::fs::remove_dir_all(dir);
        return;
    }
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"));
    let mut stop = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&pg_ctl);
        c
    } else {
        Command::new(&pg_ctl)
    };
    let status = stop
        .arg("-D")
        .arg(&data)
        .args(["-m", "immediate", "-w", "stop"])
        .status();
    let _ = std::fs::remove_dir_all(dir);
    assert!(
        status.is_ok_and(|s| s.success()),
        "could not stop the cluster in {}",
        dir.display()
    );
}

#[test]
fn without_a_server_test_processes_share_one_private_cluster() {
    let dir = scratch_dir("cluster-test");
    // Three processes race to start it; each gets a working TestDb from the same cluster.
    let started = Instant::now();
    let racers: Vec<_> = (0..3)
        .map(|_| child(&dir).output_async())
        .collect::<Vec<_>>();
    let outputs: Vec<Output> = racers.into_iter().map(|r| r.wait()).collect();
    let first_round = started.elapsed();
    // Whatever fails below, the cluster is stopped afterwards.
    let result = std::panic::catch_unwind(|| {
        let port = std::fs::read_to_string(dir.join("port")).expect("no port recorded");
        for out in &outputs {
            assert!(out.status.success(), "a child failed:\n{}", said(out));
            let text = said(out);
            let (_, url) = text
                .split_once("served by ")
                .unwrap_or_else(|| panic!("a child did not say where it ran:\n{text}"));
            let served = url.split(':').nth(2).and_then(|p| p.split('/').next());
            assert_eq!(served, Some(port.trim()), "a child used another server");
        }
        assert!(dir.join("data").join("PG_VERSION").exists());
        // A later process finds it running and starts nothing.
        let again = Instant::now();
        let out = child(&dir).output().unwrap();
        assert!(out.status.success(), "{}", said(&out));
        assert_eq!(std::fs::read_to_string(dir.join("port")).unwrap(), port);
        assert!(!dir.join("lock").exists(), "the lock was left behind");
        eprintln!(
            "first round (initdb + start, 3 racers): {first_round:?}; reuse: {:?}",
            again.elapsed()
        );
    });
    stop_and_remove(&dir);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// A child that asks for a `TestDb` twice where no server answers, printing each failure.
#[tokio::test]
#[ignore = "run in a child process by the test below"]
async fn child_asks_twice() {
    for i in 0..2 {
        let panic = tokio::spawn(TestDb::new())
            .await
            .expect_err("no server answers")
            .into_panic();
        let said = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        println!("try {i}: {said}");
    }
}

#[test]
fn a_server_that_cannot_be_used_is_found_once_per_process() {
    let dir = scratch_dir("found-once-test");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_asks_twice", "--ignored", "--nocapture"])
        .env("DATABASE_URL", NOWHERE)
        .env("JOB_TESTKIT_CLUSTER_DIR", &dir)
        .output()
        .unwrap();
    let text = said(&out);
    let first = text
        .lines()
        .find(|l| l.starts_with("try 0: "))
        .expect(&text);
    let second = text
        .lines()
        .find(|l| l.starts_with("try 1: "))
        .expect(&text);
    assert!(
        first.contains("DATABASE_URL names a PostgreSQL server at 127.0.0.1:1"),
        "{text}"
    );
    assert!(!first.contains("not tried again"), "{text}");
    assert!(
        second.ends_with("(found by this process's first TestDb; not tried again)"),
        "{text}"
    );
    assert!(!dir.exists());
}

#[test]
fn an_explicit_database_url_that_does_not_answer_fails_naming_it() {
    let dir = scratch_dir("explicit-url-test");
    let out = child(&dir).env("DATABASE_URL", NOWHERE).output().unwrap();
    assert!(!out.status.success());
    let text = said(&out);
    assert!(
        text.contains("DATABASE_URL names a PostgreSQL server at 127.0.0.1:1"),
        "{text}"
    );
    assert!(!dir.exists(), "a cluster was set up despite DATABASE_URL");
}

#[test]
fn without_a_server_or_binaries_the_failure_says_what_was_tried() {
    let dir = scratch_dir("no-binaries-test");
    let out = child(&dir)
        .env("JOB_TESTKIT_PG_BINDIR", "/nonexistent/bin")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = said(&out);
    for needle in [
        "no PostgreSQL answers at 127.0.0.1:1",
        "/nonexistent/bin",
        "pg_ctlcluster 15 main start",
        "DATABASE_URL",
    ] {
        assert!(text.contains(needle), "expected {needle:?} in:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `Command::output` on a thread, so several children run at once.
trait OutputAsync {
    fn output_async(&mut self) -> Racer;
}

struct Racer(std::thread::JoinHandle<Output>);

impl Racer {
    fn wait(self) -> Output {
        self.0.join().unwrap()
    }
}

impl OutputAsync for Command {
    fn output_async(&mut self) -> Racer {
        let child = self
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        Racer(std::thread::spawn(move || {
            child.wait_with_output().unwrap()
        }))
    }
}
