//! The real-process chaos test: worker processes (the `job-chaos` binary) are SIGKILLed at
//! random moments while they work through thousands of jobs, and restarted, or paused with
//! SIGSTOP for longer than a lease and resumed, until every job is terminal. Some jobs block
//! their runtime's threads instead of awaiting. Then the database is audited against the
//! ledger the handlers wrote (`chaos.executions`, see `src/ledger.sql`) and the effects they
//! committed with their completions (`chaos.effects`).
//!
//! Seeded: the seed is printed at the start and in every failure; `CHAOS_SEED=<n>` replays
//! the same jobs and the same schedule of kills (the timing of the machine still varies).
//! `CHAOS_JOBS=<n>` runs more (or fewer) jobs than the default 2,000. The workers' output is
//! kept under `target/tmp/sigkill-*` when the test fails. A run takes 10 to 40 seconds: jobs
//! arrive over 10, and the long ones, which kills hit most, need several attempts.
//!
//! What is checked, and why it holds under at-least-once delivery, is on [`audit`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use job_chaos::{ChaosWork, ABORTED_LINE, LEASE, LEDGER_DDL, MAX_ATTEMPTS};
use job_core::{
    AttemptError, EnqueueOptions, NewJob, RunAt, Store, DEFAULT_PAYLOAD_LIMIT, MAX_ERROR_HISTORY,
};
use job_testkit::TestDb;
use sqlx::types::Json;
use sqlx::PgPool;
use uuid::Uuid;

/// Jobs in a run unless `CHAOS_JOBS` says otherwise.
const DEFAULT_JOBS: usize = 2000;
/// Worker processes alive at once.
const WORKERS: usize = 3;
/// Jobs each worker runs at once.
const CONCURRENCY: usize = 8;
/// Jobs become due over this long.
const SPREAD: Duration = Duration::from_secs(10);
/// Pause between two kills, in milliseconds.
const KILL_EVERY_MS: std::ops::RangeInclusive<u64> = 100..=700;
/// One kill in this many takes down every worker at once.
const MASS_KILL_ONE_IN: u8 = 20;
/// One chaos action in this many pauses a worker (SIGSTOP) instead of killing one.
const PAUSE_ONE_IN: u8 = 4;
/// How long a paused worker stays stopped, in milliseconds: more than a lease, so that its
/// leases expire and other workers take its jobs over while it cannot run.
const PAUSE_MS: std::ops::RangeInclusive<u64> = 1500..=2500;
/// The run fails if the jobs are not all terminal by then.
const DEADLINE: Duration = Duration::from_secs(120);
/// How long a worker may take to drain and exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// A statement a worker sent just before it was killed may still run in its orphaned
/// database session shortly after: writes of a killed worker (ledger rows, lease renewals) are
/// accepted up to this long after its death was observed.
const ZOMBIE_SLACK: TimeDelta = TimeDelta::seconds(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_lose_no_job_and_never_run_one_twice_at_once() {
    let seed = std::env::var("CHAOS_SEED")
        .ok()
        .map(|s| {
            s.parse::<u64>()
                .expect("CHAOS_SEED must be an unsigned integer")
        })
        .unwrap_or_else(|| fastrand::u64(..));
    let jobs: usize = std::env::var("CHAOS_JOBS")
        .ok()
        .map(|s| s.parse().expect("CHAOS_JOBS must be a number"))
        .unwrap_or(DEFAULT_JOBS);
    eprintln!("sigkill chaos: seed {seed} (replay with CHAOS_SEED={seed}), {jobs} jobs");
    let mut rng = fastrand::Rng::with_seed(seed);

    let db = TestDb::new().await;
    let pool = db.pool();
    sqlx::raw_sql(LEDGER_DDL)
        .execute(&pool)
        .await
        .unwrap_or_else(|e| panic!("[CHAOS_SEED={seed}] creating the ledger: {e}"));

    // The plan, fixed by the seed: most jobs complete at once, some fail an attempt or two
    // first, and a few fail every attempt and end discarded. Most take a few milliseconds,
    // some a good part of the lease, a few longer than the lease (only heartbeats keep them).
    // They become due over SPREAD, so the backlog stays short and a rescued job is claimed
    // again at once: a second execution overlapping a first one would show.
    let plan: Vec<(ChaosWork, i32, Duration)> = (0..jobs as u32)
        .map(|n| {
            let (fail_first, max_attempts) = match rng.u8(..100) {
                0..=3 => (3, 3),
                4..=23 => (1, MAX_ATTEMPTS),
                24..=33 => (2, MAX_ATTEMPTS),
                _ => (0, MAX_ATTEMPTS),
            };
            // Long jobs become due early, so that their many attempts (they are the ones
            // kills hit most) overlap the arrival of the others instead of trailing them.
            let (work_ms, due_within) = match rng.u16(..1000) {
                0..=14 => (rng.u64(1000..=1150), SPREAD / 3),
                15..=114 => (rng.u64(100..=500), SPREAD),
                _ => (rng.u64(2..=30), SPREAD),
            };
            let due_in = match rng.u8(..10) {
                0 => Duration::ZERO,
                _ => Duration::from_millis(rng.u64(..due_within.as_millis() as u64)),
            };
            // One job in ten blocks its worker's runtime thread for its whole work.
            let work = ChaosWork {
                n,
                fail_first,
                work_ms,
                blocking: rng.u8(..10) == 0,
            };
            (work, max_attempts, due_in)
        })
        .collect();
    let new_jobs = plan
        .iter()
        .map(|(work, max_attempts, due_in)| {
            let options = EnqueueOptions {
                max_attempts: Some(*max_attempts),
                run_at: RunAt::In(*due_in),
                ..EnqueueOptions::default()
            };
            NewJob::build(work, options, DEFAULT_PAYLOAD_LIMIT).expect("a valid chaos job")
        })
        .collect();
    let ids = db
        .store()
        .enqueue_many(new_jobs)
        .await
        .unwrap_or_else(|e| panic!("[CHAOS_SEED={seed}] enqueueing: {e}"));
    assert_eq!(
        ids.len(),
        jobs,
        "[CHAOS_SEED={seed}] enqueue_many returned too few ids"
    );

    let mut fleet = Fleet::new(seed, db.url());
    let started = Instant::now();
    for slot in 0..WORKERS {
        fleet.spawn(slot);
    }
    loop {
        tokio::time::sleep(Duration::from_millis(rng.u64(KILL_EVERY_MS))).await;
        fleet.resume_due();
        fleet.check_alive();
        let counts = state_counts(&pool).await;
        let terminal: i64 = ["completed", "cancelled", "discarded"]
            .iter()
            .filter_map(|s| counts.get(*s))
            .sum();
        if terminal == jobs as i64 {
            break;
        }
        if started.elapsed() > DEADLINE {
            panic!(
                "[CHAOS_SEED={seed}] only {terminal} of {jobs} jobs terminal after {DEADLINE:?} \
                 ({} kills); jobs per state: {counts:?}; worker logs in {}",
                fleet.kills,
                fleet.dir.display()
            );
        }
        if rng.u8(..PAUSE_ONE_IN) == 0 {
            let slot = rng.usize(..WORKERS);
            fleet.pause(slot, Duration::from_millis(rng.u64(PAUSE_MS)));
        } else if rng.u8(..MASS_KILL_ONE_IN) == 0 {
            fleet.mass_kills += 1;
            for slot in 0..WORKERS {
                fleet.kill(slot);
            }
            for slot in 0..WORKERS {
                fleet.spawn(slot);
            }
        } else {
            let slot = rng.usize(..WORKERS);
            fleet.kill(slot);
            fleet.spawn(slot);
        }
    }
    let run_time = started.elapsed();
    let last_words = fleet.stop_all();

    let rows = load_jobs(&pool).await;
    let executions = load_executions(&pool, &logged_aborts(&fleet.incarnations)).await;
    let effects = load_effects(&pool).await;
    let audit = audit(
        &ids,
        &plan,
        &rows,
        &executions,
        &effects,
        &fleet.incarnations,
    );
    let mut summary = format!(
        "sigkill chaos: seed {seed}: {jobs} jobs ({} completed, {} discarded) in {run_time:.1?}, \
         {} kills ({} of all workers at once), {} pauses, {} worker processes, {} executions \
         ({} of blocking jobs), {} effects; \
         {} attempts rescued after their lease expired ({} killed before the handler started, \
         {} finished but not finalized), {} leases lost by live workers, \
         {} executions started without a live lease, {} executions overlapped by the next \
         attempt after their worker was paused",
        audit.completed,
        audit.discarded,
        fleet.kills,
        fleet.mass_kills,
        fleet.pauses,
        fleet.incarnations.len(),
        executions.len(),
        audit.blocking_executions,
        effects.len(),
        audit.rescued,
        audit.rescued_unstarted,
        audit.rescued_finished,
        audit.lost_by_live_workers.len(),
        audit.started_without_live_lease,
        audit.overlaps_after_pause.len(),
    );
    for line in &last_words {
        let _ = write!(summary, "\n  {line}");
    }
    for lost in audit.lost_by_live_workers.iter().take(5) {
        let _ = write!(summary, "\n  lease lost by a live worker: {lost}");
    }
    for overlap in audit.overlaps_after_pause.iter().take(5) {
        let _ = write!(summary, "\n  after a pause: {overlap}");
    }
    eprintln!("{summary}");
    let mut violations = audit.violations;
    for line in &last_words {
        if !(line.contains("finished_in_time: true") && line.contains("released: 0")) {
            violations.push(
                "clean drain",
                format!("a worker did not drain cleanly: {line}"),
            );
        }
    }
    if !violations.is_empty() {
        dump(&pool, &fleet.dir).await;
    }
    assert!(
        violations.is_empty(),
        "[CHAOS_SEED={seed}] {} violations (worker logs in {}):\n{}\n{summary}",
        violations.len(),
        fleet.dir.display(),
        violations.report(),
    );
    if audit.lost_by_live_workers.is_empty() {
        fleet.clean_up();
    } else {
        eprintln!(
            "sigkill chaos: leases were lost by live workers; their logs are kept in {}",
            fleet.dir.display()
        );
    }
    db.close().await;
}

/// One run of the worker binary.
struct Incarnation {
    /// Its worker id (`locked_by`), `w<slot>.<number>`.
    id: String,
    spawned_at: DateTime<Utc>,
    /// When the test saw it dead after its SIGKILL.
    killed_at: Option<DateTime<Utc>>,
    /// When it was stopped with SIGSTOP (sent just before), and resumed with SIGCONT (sent
    /// just after), if it was: it ran no code in between.
    pauses: Vec<(DateTime<Utc>, Option<DateTime<Utc>>)>,
    log: PathBuf,
}

impl Incarnation {
    /// Whether a pause of this worker began at or after `from` and no later than `to`.
    fn paused_between(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> bool {
        self.pauses
            .iter()
            .any(|(stopped, _)| *stopped + ZOMBIE_SLACK >= from && *stopped <= to)
    }
}

struct Running {
    child: Child,
    incarnation: usize,
    /// Stopped with SIGSTOP until then.
    paused_until: Option<Instant>,
}

/// The worker processes, one per slot, and every process ever started.
struct Fleet {
    seed: u64,
    url: String,
    dir: PathBuf,
    slots: Vec<Option<Running>>,
    incarnations: Vec<Incarnation>,
    kills: usize,
    mass_kills: usize,
    pauses: usize,
}

impl Fleet {
    fn new(seed: u64, url: String) -> Fleet {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("sigkill-{seed}-{}", std::process::id()));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        Fleet {
            seed,
            url,
            dir,
            slots: (0..WORKERS).map(|_| None).collect(),
            incarnations: Vec::new(),
            kills: 0,
            mass_kills: 0,
            pauses: 0,
        }
    }

    fn spawn(&mut self, slot: usize) {
        assert!(self.slots[slot].is_none(), "slot {slot} is taken");
        let number = self.incarnations.len();
        let id = format!("w{slot}.{number}");
        let log = self.dir.join(format!("{id}.log"));
        let out =
            File::create(&log).unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let err = out.try_clone().expect("clone of a log file handle");
        let spawned_at = Utc::now();
        let child = Command::new(env!("CARGO_BIN_EXE_job-chaos"))
            .args(["--database-url", &self.url, "--worker-id", &id])
            .args(["--concurrency", &CONCURRENCY.to_string()])
            // Slot 0 claims only free slots; slot 1 prefetches as measured (the default) and
            // slot 2 a fixed number, so that killed workers also take claimed jobs that never
            // started down with them.
            .args(match slot {
                0 => vec!["--prefetch".to_owned(), "0".to_owned()],
                1 => vec![],
                _ => vec!["--prefetch".to_owned(), (slot * CONCURRENCY).to_string()],
            })
            // Slot 1 runs on a current-thread runtime, which a blocking job blocks whole.
            .args(if slot == 1 {
                &["--current-thread"][..]
            } else {
                &[]
            })
            .args(["--seed", &(self.seed ^ number as u64).to_string()])
            .arg("--watch-stdin")
            .env_remove("CHAOS_SEED")
            .stdin(Stdio::piped())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("[CHAOS_SEED={}] cannot start a worker: {e}", self.seed));
        self.incarnations.push(Incarnation {
            id,
            spawned_at,
            killed_at: None,
            pauses: Vec::new(),
            log,
        });
        self.slots[slot] = Some(Running {
            child,
            incarnation: number,
            paused_until: None,
        });
    }

    /// Stops the worker in `slot` with SIGSTOP for `how_long`, unless it is paused already.
    fn pause(&mut self, slot: usize, how_long: Duration) {
        let Some(running) = self.slots[slot].as_mut() else {
            return;
        };
        if running.paused_until.is_some() {
            return;
        }
        let stopped_at = Utc::now();
        signal(&running.child, "-STOP", self.seed);
        running.paused_until = Some(Instant::now() + how_long);
        self.incarnations[running.incarnation]
            .pauses
            .push((stopped_at, None));
        self.pauses += 1;
    }

    /// Resumes, with SIGCONT, every paused worker whose pause is over (or all, if `all`).
    fn resume(&mut self, all: bool) {
        for slot in 0..WORKERS {
            let Some(running) = self.slots[slot].as_mut() else {
                continue;
            };
            match running.paused_until {
                Some(until) if all || Instant::now() >= until => {
                    signal(&running.child, "-CONT", self.seed);
                    running.paused_until = None;
                    if let Some(pause) = self.incarnations[running.incarnation].pauses.last_mut() {
                        pause.1 = Some(Utc::now());
                    }
                }
                _ => {}
            }
        }
    }

    fn resume_due(&mut self) {
        self.resume(false);
    }

    /// SIGKILLs the worker in `slot` and waits until it is gone.
    fn kill(&mut self, slot: usize) {
        let Some(mut running) = self.slots[slot].take() else {
            return;
        };
        let inc = running.incarnation;
        // An exit of its own before the kill is a failure of the worker, not chaos.
        if let Ok(Some(status)) = running.child.try_wait() {
            self.died(inc, status);
        }
        running
            .child
            .kill()
            .unwrap_or_else(|e| panic!("[CHAOS_SEED={}] SIGKILL failed: {e}", self.seed));
        let status = running
            .child
            .wait()
            .unwrap_or_else(|e| panic!("[CHAOS_SEED={}] wait failed: {e}", self.seed));
        self.incarnations[inc].killed_at = Some(Utc::now());
        self.kills += 1;
        if status.signal() != Some(9) {
            self.died(inc, status);
        }
    }

    /// Fails the test if a worker exited by itself.
    fn check_alive(&mut self) {
        for slot in 0..WORKERS {
            let Some(running) = self.slots[slot].as_mut() else {
                continue;
            };
            if let Ok(Some(status)) = running.child.try_wait() {
                let inc = running.incarnation;
                self.slots[slot] = None;
                self.died(inc, status);
            }
        }
    }

    fn died(&self, inc: usize, status: ExitStatus) -> ! {
        let inc = &self.incarnations[inc];
        panic!(
            "[CHAOS_SEED={}] worker {} exited by itself ({status}); its output:\n{}",
            self.seed,
            inc.id,
            tail(&inc.log)
        );
    }

    /// SIGTERMs every worker and waits for each to drain and exit with code 0. Returns each
    /// one's last line of output.
    fn stop_all(&mut self) -> Vec<String> {
        self.resume(true);
        let mut stopping = Vec::new();
        for slot in 0..WORKERS {
            if let Some(running) = self.slots[slot].take() {
                // A worker restarted just now may not have installed its signal handlers
                // yet (SIGTERM would then kill it): wait until it says it started.
                let inc = &self.incarnations[running.incarnation];
                let deadline = Instant::now() + STOP_TIMEOUT;
                while !std::fs::read_to_string(&inc.log).is_ok_and(|out| out.contains("started")) {
                    assert!(
                        Instant::now() < deadline,
                        "[CHAOS_SEED={}] worker {} did not start within {STOP_TIMEOUT:?}; its \
                         output:\n{}",
                        self.seed,
                        inc.id,
                        tail(&inc.log)
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                let pid = running.child.id().to_string();
                let sent = Command::new("kill").args(["-TERM", &pid]).status();
                assert!(
                    sent.as_ref().is_ok_and(ExitStatus::success),
                    "[CHAOS_SEED={}] kill -TERM {pid} failed: {sent:?}",
                    self.seed
                );
                stopping.push(running);
            }
        }
        let deadline = Instant::now() + STOP_TIMEOUT;
        let mut last_words = Vec::new();
        for mut running in stopping {
            let inc = &self.incarnations[running.incarnation];
            let status = loop {
                match running.child.try_wait() {
                    Ok(Some(status)) => break status,
                    Ok(None) if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    other => {
                        let _ = running.child.kill();
                        let _ = running.child.wait();
                        panic!(
                            "[CHAOS_SEED={}] worker {} did not exit within {STOP_TIMEOUT:?} of \
                             SIGTERM ({other:?}); its output:\n{}",
                            self.seed,
                            inc.id,
                            tail(&inc.log)
                        );
                    }
                }
            };
            let output = std::fs::read_to_string(&inc.log).unwrap_or_default();
            assert!(
                status.success(),
                "[CHAOS_SEED={}] worker {} exited with {status} after SIGTERM; its output:\n{output}",
                self.seed,
                inc.id,
            );
            last_words.push(output.lines().last().unwrap_or("(no output)").to_owned());
        }
        last_words
    }

    fn clean_up(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Sends `signal` (`-STOP`, `-CONT`) to `child` with kill(1).
fn signal(child: &Child, signal: &str, seed: u64) {
    let pid = child.id().to_string();
    let sent = Command::new("kill").args([signal, &pid]).status();
    assert!(
        sent.as_ref().is_ok_and(ExitStatus::success),
        "[CHAOS_SEED={seed}] kill {signal} {pid} failed: {sent:?}"
    );
}

impl Drop for Fleet {
    /// A failing test leaves no worker behind (they also stop when their stdin closes).
    fn drop(&mut self) {
        for running in self.slots.iter_mut().filter_map(Option::take) {
            let mut child = running.child;
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Saves the job rows and the ledger as JSON lines next to the workers' logs, for a failed
/// run's post-mortem (the test database is dropped).
async fn dump(pool: &PgPool, dir: &Path) {
    for (file, query) in [
        (
            "jobs.jsonl",
            "SELECT row_to_json(j)::text FROM job.jobs j ORDER BY id",
        ),
        (
            "executions.jsonl",
            "SELECT row_to_json(e)::text FROM chaos.executions e ORDER BY job_id, started_at",
        ),
    ] {
        if let Ok(rows) = sqlx::query_scalar::<_, String>(query).fetch_all(pool).await {
            let _ = std::fs::write(dir.join(file), rows.join("\n"));
        }
    }
}

fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_else(|e| format!("(unreadable: {e})"));
    let start = text.len().saturating_sub(4000);
    let start = (start..text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    text[start..].to_owned()
}

async fn state_counts(pool: &PgPool) -> HashMap<String, i64> {
    sqlx::query_as::<_, (String, i64)>("SELECT state::text, count(*) FROM job.jobs GROUP BY state")
        .fetch_all(pool)
        .await
        .expect("counting jobs per state")
        .into_iter()
        .collect()
}

/// A job row, as much as the audit needs.
struct JobRow {
    id: i64,
    state: String,
    attempt: i32,
    max_attempts: i32,
    payload: ChaosWork,
    errors: Vec<AttemptError>,
    finalized_at: Option<DateTime<Utc>>,
}

type JobTuple = (
    i64,
    String,
    i32,
    i32,
    Json<ChaosWork>,
    Json<Vec<AttemptError>>,
    Option<DateTime<Utc>>,
);

async fn load_jobs(pool: &PgPool) -> Vec<JobRow> {
    sqlx::query_as::<_, JobTuple>(
        "SELECT id, state::text, attempt, max_attempts, payload, errors, finalized_at
         FROM job.jobs ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .expect("loading the jobs")
    .into_iter()
    .map(
        |(id, state, attempt, max_attempts, payload, errors, finalized_at)| JobRow {
            id,
            state,
            attempt,
            max_attempts,
            payload: payload.0,
            errors: errors.0,
            finalized_at,
        },
    )
    .collect()
}

/// One row of the ledger.
struct Execution {
    id: i64,
    job_id: i64,
    attempt: i32,
    worker: String,
    lock_token: Uuid,
    lease_live: bool,
    started_at: DateTime<Utc>,
    finished_at: Option<DateTime<Utc>>,
    outcome: Option<String>,
    aborted_at: Option<DateTime<Utc>>,
}

type ExecutionTuple = (
    i64,
    i64,
    i32,
    String,
    Uuid,
    bool,
    DateTime<Utc>,
    Option<DateTime<Utc>>,
    Option<String>,
    Option<DateTime<Utc>>,
);

/// The ledger, with the abort times the workers printed (a worker killed right after an
/// abort printed it but could not write it), by lease token.
async fn load_executions(pool: &PgPool, aborts: &HashMap<Uuid, DateTime<Utc>>) -> Vec<Execution> {
    sqlx::query_as::<_, ExecutionTuple>(
        "SELECT id, job_id, attempt, worker, lock_token, lease_live, started_at, finished_at,
                outcome, aborted_at
         FROM chaos.executions ORDER BY job_id, started_at, id",
    )
    .fetch_all(pool)
    .await
    .expect("loading the ledger")
    .into_iter()
    .map(|row| {
        let (id, job_id, attempt, worker, lock_token, lease_live, started_at) =
            (row.0, row.1, row.2, row.3, row.4, row.5, row.6);
        let (finished_at, outcome, aborted_at) = (row.7, row.8, row.9);
        Execution {
            id,
            job_id,
            attempt,
            worker,
            lock_token,
            lease_live,
            started_at,
            finished_at,
            outcome,
            aborted_at: aborted_at.or_else(|| aborts.get(&lock_token).copied()),
        }
    })
    .collect()
}

/// One committed effect.
struct Effect {
    job_id: i64,
    attempt: i32,
    worker: String,
    lock_token: Uuid,
}

async fn load_effects(pool: &PgPool) -> Vec<Effect> {
    sqlx::query_as::<_, (i64, i32, String, Uuid)>(
        "SELECT job_id, attempt, worker, lock_token FROM chaos.effects ORDER BY job_id, id",
    )
    .fetch_all(pool)
    .await
    .expect("loading the effects")
    .into_iter()
    .map(|(job_id, attempt, worker, lock_token)| Effect {
        job_id,
        attempt,
        worker,
        lock_token,
    })
    .collect()
}

/// Every `ledger: aborted execution` line of the workers' logs: lease token to time.
fn logged_aborts(incarnations: &[Incarnation]) -> HashMap<Uuid, DateTime<Utc>> {
    let mut aborts = HashMap::new();
    for inc in incarnations {
        let log = std::fs::read_to_string(&inc.log).unwrap_or_default();
        for line in log.lines() {
            let Some((at, rest)) = line.split_once(ABORTED_LINE) else {
                continue;
            };
            let id = rest
                .split_whitespace()
                .next()
                .and_then(|id| id.parse().ok());
            let at = DateTime::parse_from_rfc3339(at).ok();
            if let (Some(id), Some(at)) = (id, at) {
                aborts.insert(id, at.with_timezone(&Utc));
            }
        }
    }
    aborts
}

impl Execution {
    /// The latest moment the handler can have been running: its last ledger write or its
    /// abort, else the death of its worker.
    fn end(&self, killed_at: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
        match (self.finished_at, self.aborted_at) {
            (Some(f), Some(a)) => Some(f.max(a)),
            (Some(f), None) => Some(f),
            (None, Some(a)) => Some(a),
            (None, None) => killed_at.map(|k| k.max(self.started_at)),
        }
    }
}

/// Failed checks, by check.
#[derive(Default)]
struct Violations(BTreeMap<&'static str, Vec<String>>);

impl Violations {
    fn push(&mut self, check: &'static str, what: String) {
        self.0.entry(check).or_default().push(what);
    }

    fn len(&self) -> usize {
        self.0.values().map(Vec::len).sum()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each failed check with its count and first few cases.
    fn report(&self) -> String {
        let mut out = String::new();
        for (check, cases) in &self.0 {
            let _ = writeln!(out, "  {check}: {} violations", cases.len());
            for case in cases.iter().take(8) {
                let _ = writeln!(out, "    - {case}");
            }
        }
        out
    }
}

#[derive(Default)]
struct Audit {
    violations: Violations,
    completed: usize,
    discarded: usize,
    rescued: usize,
    rescued_unstarted: usize,
    rescued_finished: usize,
    /// Allowed (a worker that cannot renew in time fences itself), but worth a look.
    lost_by_live_workers: Vec<String>,
    started_without_live_lease: usize,
    /// Executions overlapped by the job's next attempt because their worker was paused
    /// (SIGSTOP) past their lease and ran on when resumed: the one case nothing can stop.
    /// Allowed, since the effect still commits once (its transaction is guarded by the lease).
    overlaps_after_pause: Vec<String>,
    blocking_executions: usize,
}

/// The attempts whose entries a history of `settled` attempts keeps: all of them, or the first
/// and the latest `MAX_ERROR_HISTORY - 1`.
fn kept_attempts(settled: i32) -> Vec<i32> {
    let max = MAX_ERROR_HISTORY as i32;
    if settled <= max {
        (1..=settled).collect()
    } else {
        std::iter::once(1)
            .chain(settled - max + 2..=settled)
            .collect()
    }
}

/// `lease of worker <id> expired at <timestamp>`, as the rescue writes it.
fn parse_lease_expired(message: &str) -> Option<(&str, DateTime<Utc>)> {
    let rest = message.strip_prefix("lease of worker ")?;
    let (worker, at) = rest.split_once(" expired at ")?;
    let at = DateTime::parse_from_str(at, "%Y-%m-%d %H:%M:%S%.f%#z").ok()?;
    Some((worker, at.with_timezone(&Utc)))
}

/// Checks every job against its payload, its error history and the ledger.
///
/// - No job lost: the rows are exactly the enqueued ids, every one terminal, in the state its
///   payload dictates (completed unless it fails every attempt, then discarded after all of
///   them).
/// - Attempts counted: a job's `attempt` is its number of claims, each accounted for exactly
///   once: the final attempt of a completed job by its success, every other one by an entry in
///   `errors` with that attempt number, in order: `error` (the handler failed by design: the
///   ledger has that attempt finished with outcome `error`) or `lease_expired` (its worker was
///   killed, or lost the lease: the rescue names that worker, whose lease had expired in
///   database time, and was not renewed after the worker's death).
/// - The ledger: every execution ran a distinct attempt of its job under a distinct lease
///   token, by a worker that was alive then; its outcome matches the payload's design. A
///   completed job's final attempt has a successful execution that finished before the job was
///   finalized; any earlier successful execution is an attempt whose worker died before
///   finalizing (`lease_expired`), which at-least-once delivery allows.
/// - Never twice at once: a job's executions, by start, have increasing attempts, and each one
///   started only after every earlier one had ended (its last ledger write, or its worker's
///   death) and after the earlier attempt's lease had ended in the database (its error entry).
///   The one exception is an execution whose worker was paused (SIGSTOP) while it ran: it
///   ran on when resumed, after its lease was taken over.
/// - Effects once: a completed job has exactly one effect, committed with its completion by
///   its final attempt under that attempt's lease; a discarded job has none.
fn audit(
    ids: &[i64],
    plan: &[(ChaosWork, i32, Duration)],
    rows: &[JobRow],
    executions: &[Execution],
    effects: &[Effect],
    incarnations: &[Incarnation],
) -> Audit {
    let mut a = Audit::default();
    let v = &mut a.violations;
    let workers: HashMap<&str, &Incarnation> =
        incarnations.iter().map(|i| (i.id.as_str(), i)).collect();
    let lease = TimeDelta::from_std(LEASE).expect("a small lease");

    let enqueued: HashSet<i64> = ids.iter().copied().collect();
    let stored: HashSet<i64> = rows.iter().map(|r| r.id).collect();
    if rows.len() != ids.len() || enqueued != stored {
        let lost: Vec<_> = enqueued.difference(&stored).take(10).collect();
        let extra: Vec<_> = stored.difference(&enqueued).take(10).collect();
        v.push(
            "no job lost",
            format!(
                "{} jobs enqueued but {} stored; lost {lost:?}, unexpected {extra:?}",
                ids.len(),
                rows.len()
            ),
        );
    }
    let planned: HashMap<u32, (ChaosWork, i32)> =
        plan.iter().map(|p| (p.0.n, (p.0, p.1))).collect();

    // Whether the worker of `e` was paused while `e` could have been running: from a lease
    // before its recorded start (it may have been claimed and started, but not yet recorded)
    // to its end.
    let paused_around = |e: &Execution| {
        workers.get(e.worker.as_str()).is_some_and(|w| {
            let end = e.end(w.killed_at).unwrap_or(e.started_at);
            w.paused_between(e.started_at - lease - lease, end)
        })
    };
    let mut effects_of: HashMap<i64, Vec<&Effect>> = HashMap::new();
    for e in effects {
        effects_of.entry(e.job_id).or_default().push(e);
    }
    let blocking: HashSet<u32> = plan
        .iter()
        .filter(|p| p.0.blocking)
        .map(|p| p.0.n)
        .collect();
    let blocking_jobs: HashSet<i64> = rows
        .iter()
        .filter(|r| blocking.contains(&r.payload.n))
        .map(|r| r.id)
        .collect();
    a.blocking_executions = executions
        .iter()
        .filter(|e| blocking_jobs.contains(&e.job_id))
        .count();

    let mut tokens = HashSet::new();
    let mut by_job: HashMap<i64, Vec<&Execution>> = HashMap::new();
    for e in executions {
        by_job.entry(e.job_id).or_default().push(e);
        if !tokens.insert(e.lock_token) {
            v.push(
                "one token per execution",
                format!(
                    "job {}: lease token {} ran two executions",
                    e.job_id, e.lock_token
                ),
            );
        }
        if !e.lease_live {
            a.started_without_live_lease += 1;
        }
        if !enqueued.contains(&e.job_id) {
            v.push(
                "no job lost",
                format!("an execution of job {}, which was never enqueued", e.job_id),
            );
        }
        let Some(w) = workers.get(e.worker.as_str()) else {
            v.push(
                "executions by known workers",
                format!(
                    "job {}: executed by unknown worker {:?}",
                    e.job_id, e.worker
                ),
            );
            continue;
        };
        if e.started_at < w.spawned_at {
            v.push(
                "executions by live workers",
                format!(
                    "job {} attempt {}: started at {} before its worker {} was spawned at {}",
                    e.job_id, e.attempt, e.started_at, w.id, w.spawned_at
                ),
            );
        }
        if let Some(killed) = w.killed_at {
            let last = [Some(e.started_at), e.finished_at, e.aborted_at]
                .into_iter()
                .flatten()
                .max()
                .expect("started_at is always there");
            if last > killed + ZOMBIE_SLACK {
                v.push(
                    "executions by live workers",
                    format!(
                        "job {} attempt {}: worker {} wrote to the ledger at {last}, after it was \
                     killed at {killed}",
                        e.job_id, e.attempt, w.id
                    ),
                );
            }
        }
    }

    for row in rows {
        let id = row.id;
        let work = row.payload;
        let Some(&(planned_work, planned_max)) = planned.get(&work.n) else {
            v.push(
                "payloads as planned",
                format!("job {id}: payload {work:?} is not in the plan"),
            );
            continue;
        };
        if planned_work != work || planned_max != row.max_attempts {
            v.push(
                "payloads as planned",
                format!(
                    "job {id}: stored as {work:?} with {} attempts, planned as {planned_work:?} \
                 with {planned_max}",
                    row.max_attempts
                ),
            );
        }
        let completes = work.fail_first < row.max_attempts;
        match (row.state.as_str(), completes) {
            ("completed", true) => a.completed += 1,
            ("discarded", false) => {
                a.discarded += 1;
                if row.attempt != row.max_attempts {
                    v.push(
                        "terminal as planned",
                        format!(
                            "job {id}: discarded after {} of {} attempts",
                            row.attempt, row.max_attempts
                        ),
                    );
                }
            }
            (state, _) => {
                let expected = if completes { "completed" } else { "discarded" };
                v.push(
                    "terminal as planned",
                    format!(
                        "job {id}: {state} after {} attempts, expected {expected} ({work:?}); \
                     errors {:?}",
                        row.attempt, row.errors
                    ),
                );
                continue;
            }
        }
        if row.finalized_at.is_none() {
            v.push(
                "terminal as planned",
                format!("job {id}: terminal without finalized_at"),
            );
        }

        // Attempts counted: one error entry per attempt that did not complete, in order (the
        // first and the latest, when there are more than the history keeps).
        let settled = if row.state == "completed" {
            row.attempt - 1
        } else {
            row.attempt
        };
        let kept = kept_attempts(settled);
        let recorded: Vec<i32> = row.errors.iter().map(|e| e.attempt).collect();
        if recorded != kept {
            v.push(
                "attempts counted",
                format!(
                    "job {id}: {} after {} attempts, so errors for attempts {kept:?} expected, \
                     but recorded: {:?}",
                    row.state, row.attempt, row.errors
                ),
            );
        }

        // Effects once.
        let job_effects = effects_of.remove(&id).unwrap_or_default();
        let effects_ok = match row.state.as_str() {
            "completed" => {
                job_effects.len() == 1
                    && job_effects[0].attempt == row.attempt
                    && executions.iter().any(|e| {
                        e.job_id == id
                            && e.attempt == row.attempt
                            && e.lock_token == job_effects[0].lock_token
                            && e.worker == job_effects[0].worker
                    })
            }
            _ => job_effects.is_empty(),
        };
        if !effects_ok {
            v.push(
                "effects once",
                format!(
                    "job {id}: {} after {} attempts with effects {:?}",
                    row.state,
                    row.attempt,
                    job_effects
                        .iter()
                        .map(|e| (e.attempt, e.worker.as_str(), e.lock_token))
                        .collect::<Vec<_>>()
                ),
            );
        }

        let mut execs = by_job.remove(&id).unwrap_or_default();
        execs.sort_by_key(|e| e.started_at);
        let mut at_attempt: HashMap<i32, &Execution> = HashMap::new();
        for e in &execs {
            if e.attempt < 1 || e.attempt > row.attempt {
                v.push(
                    "attempts counted",
                    format!(
                        "job {id}: an execution of attempt {} but the job counts {} attempts",
                        e.attempt, row.attempt
                    ),
                );
            }
            if at_attempt.insert(e.attempt, e).is_some() {
                v.push(
                    "one execution per attempt",
                    format!("job {id}: attempt {} executed twice", e.attempt),
                );
            }
            let expected = if work.fails_at(e.attempt) {
                "error"
            } else {
                "ok"
            };
            if e.outcome.as_deref().is_some_and(|o| o != expected) {
                v.push(
                    "outcomes as planned",
                    format!(
                        "job {id}: attempt {} ended {:?}, its payload says {expected}",
                        e.attempt, e.outcome
                    ),
                );
            }
        }

        for err in &row.errors {
            let exec = at_attempt.get(&err.attempt);
            match err.class.as_str() {
                "error" => {
                    if !exec.is_some_and(|e| {
                        e.outcome.as_deref() == Some("error") && e.finished_at.is_some()
                    }) {
                        v.push(
                            "errors match the ledger",
                            format!(
                            "job {id}: attempt {} failed with {:?} but the ledger has no failed \
                             execution of it",
                            err.attempt, err.message
                        ),
                        );
                    }
                }
                "lease_expired" => {
                    a.rescued += 1;
                    match exec {
                        None => a.rescued_unstarted += 1,
                        Some(e) if e.outcome.is_some() => a.rescued_finished += 1,
                        Some(_) => {}
                    }
                    let Some((worker, expired_at)) = parse_lease_expired(&err.message) else {
                        v.push(
                            "rescues match the ledger",
                            format!(
                                "job {id}: attempt {}: unreadable rescue message {:?}",
                                err.attempt, err.message
                            ),
                        );
                        continue;
                    };
                    if let Some(e) = exec {
                        if e.worker != worker {
                            v.push("rescues match the ledger", format!(
                                "job {id}: attempt {} ran on {} but its rescued lease was {worker}'s",
                                err.attempt, e.worker
                            ));
                        }
                    }
                    if expired_at >= err.at {
                        v.push("only expired leases rescued", format!(
                            "job {id}: attempt {} rescued at {} but its lease ran until {expired_at}",
                            err.attempt, err.at
                        ));
                    }
                    match workers.get(worker).and_then(|w| w.killed_at) {
                        Some(killed) if err.at >= killed => {
                            if expired_at > killed + lease + ZOMBIE_SLACK {
                                v.push(
                                    "dead workers renew nothing",
                                    format!(
                                        "job {id}: attempt {}: the lease of {worker} ran until \
                                     {expired_at}, renewed after its death at {killed}",
                                        err.attempt
                                    ),
                                );
                            }
                        }
                        killed => {
                            a.lost_by_live_workers.push(format!(
                                "job {id} attempt {} on {worker}: lease ran until {expired_at}, \
                                 rescued at {}, worker killed at {killed:?}, execution {:?}",
                                err.attempt,
                                err.at,
                                exec.map(|e| (e.started_at, e.finished_at, e.aborted_at))
                            ));
                        }
                    }
                }
                other => v.push(
                    "errors match the ledger",
                    format!(
                        "job {id}: attempt {} ended with an unexpected {other}: {:?}",
                        err.attempt, err.message
                    ),
                ),
            }
        }

        if row.state == "completed" {
            match at_attempt.get(&row.attempt) {
                Some(e) if e.outcome.as_deref() == Some("ok") => {
                    if let (Some(finished), Some(finalized)) = (e.finished_at, row.finalized_at) {
                        if finished > finalized {
                            v.push(
                                "completed by its final attempt",
                                format!(
                                    "job {id}: finalized at {finalized}, before its handler \
                                 finished at {finished}"
                                ),
                            );
                        }
                    }
                }
                other => v.push(
                    "completed by its final attempt",
                    format!(
                        "job {id}: completed by attempt {}, whose execution is {:?}",
                        row.attempt,
                        other.map(|e| (&e.worker, &e.outcome, e.finished_at))
                    ),
                ),
            }
        }

        // Never twice at once.
        for (j, later) in execs.iter().enumerate() {
            for earlier in &execs[..j] {
                if earlier.attempt >= later.attempt {
                    let what = format!(
                        "job {id}: attempt {} on {} started at {} after attempt {} on {} started \
                         at {}",
                        later.attempt,
                        later.worker,
                        later.started_at,
                        earlier.attempt,
                        earlier.worker,
                        earlier.started_at
                    );
                    // A stale attempt that recorded its start only after a newer one started:
                    // its worker was paused between its claim and that record.
                    if paused_around(later) && earlier.lease_live {
                        a.overlaps_after_pause.push(what);
                    } else {
                        v.push("never twice at once", what);
                    }
                    continue;
                }
                let killed = workers
                    .get(earlier.worker.as_str())
                    .and_then(|w| w.killed_at);
                match earlier.end(killed) {
                    None => v.push(
                        "never twice at once",
                        format!(
                        "job {id}: attempt {} on {} never ended (no finish, no abort, its worker \
                         was not killed)",
                        earlier.attempt, earlier.worker
                    ),
                    ),
                    Some(end) if end >= later.started_at => {
                        let what = format!(
                            "job {id}: attempt {} on {} (execution {}) started at {} while \
                             attempt {} on {} (execution {}) ran until {end}",
                            later.attempt,
                            later.worker,
                            later.id,
                            later.started_at,
                            earlier.attempt,
                            earlier.worker,
                            earlier.id
                        );
                        if paused_around(earlier) && later.lease_live {
                            a.overlaps_after_pause.push(what);
                        } else {
                            v.push("never twice at once", what);
                        }
                    }
                    Some(_) => {}
                }
                let lease_ended = row
                    .errors
                    .iter()
                    .find(|e| e.attempt == earlier.attempt)
                    .map(|e| e.at);
                match lease_ended {
                    Some(at) if at < later.started_at => {}
                    // The history no longer keeps that attempt's entry.
                    None if !kept.contains(&earlier.attempt) => {}
                    other => v.push(
                        "never twice at once",
                        format!(
                            "job {id}: attempt {} started at {} but the lease of attempt {} ended \
                         at {other:?}",
                            later.attempt, later.started_at, earlier.attempt
                        ),
                    ),
                }
            }
        }
    }
    for (job, execs) in by_job {
        if enqueued.contains(&job) {
            v.push(
                "no job lost",
                format!("job {job}: {} executions but no row", execs.len()),
            );
        }
    }
    for (job, effects) in effects_of {
        v.push(
            "effects once",
            format!("job {job}: {} effects but no row", effects.len()),
        );
    }
    a
}
