//! What the real-process chaos tests (`sigkill.rs`, `ordering.rs`, `batches.rs`,
//! `rate_limits.rs`) share: the plan of a run ([`Planned`], with what each job waits for:
//! [`After`]), the chaos loop that enqueues it and SIGKILLs, restarts and pauses worker
//! processes (the `job-chaos` binary) until every job is terminal ([`Chaos::run`]), and the
//! audit of the database against the ledger the handlers wrote (`chaos.executions`, see
//! `src/ledger.sql`) and the effects they committed with their completions
//! (`chaos.effects`): [`audit`].
#![allow(dead_code, missing_docs, unreachable_pub)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::fs::File;
use std::ops::RangeInclusive;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use job_chaos::{ChaosWork, ABORTED_LINE, LEASE, LEDGER_DDL, MAX_ATTEMPTS};
use job_core::{
    AttemptError, Batch, Enqueue, EnqueueError, Job, NewJob, Store, DEFAULT_PAYLOAD_LIMIT,
    MAX_ERROR_HISTORY,
};
use job_testkit::TestDb;
use sqlx::types::Json;
use sqlx::{ConnectOptions, PgPool};
use uuid::Uuid;

#[path = "../../../tests/common/silence.rs"]
mod silence;
use silence::Blackhole;

/// How long a worker may take to drain and exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
/// Waited past a `ChaosWork` attempt's timeout before the workers of a run that silenced
/// connections are stopped (see `Chaos::run`): the executor's own ending of the timed-out
/// attempt.
const SILENCED_CODE_MARGIN: Duration = Duration::from_secs(2);
/// A statement a worker sent just before it was killed may still run in its orphaned
/// database session shortly after: writes of a killed worker (ledger rows, lease renewals) are
/// accepted up to this long after its death was observed.
pub const ZOMBIE_SLACK: TimeDelta = TimeDelta::seconds(1);

/// The seed of a run: `CHAOS_SEED`, else a random one.
pub fn seed() -> u64 {
    std::env::var("CHAOS_SEED")
        .ok()
        .map(|s| {
            s.parse::<u64>()
                .expect("CHAOS_SEED must be an unsigned integer")
        })
        .unwrap_or_else(|| fastrand::u64(..))
}

/// A fresh test database with the ledger's schema.
pub async fn ledger_db(seed: u64) -> TestDb {
    let db = TestDb::new().await;
    sqlx::raw_sql(LEDGER_DDL)
        .execute(&db.pool())
        .await
        .unwrap_or_else(|e| panic!("[CHAOS_SEED={seed}] creating the ledger: {e}"));
    db
}

/// One job of a run's plan.
#[derive(Debug, Clone)]
pub struct Planned {
    pub work: ChaosWork,
    pub max_attempts: i32,
    /// Due this long after it is enqueued.
    pub due_in: Duration,
    /// Its ordering key, set at the enqueue (as `Enqueue::ordering_key` does).
    pub ordering_key: Option<String>,
    /// Enqueued this long after the chaos began; zero: before the first worker starts.
    pub enqueue_after: Duration,
    /// What it waits for before it may run.
    pub after: After,
}

/// What a planned job waits for (see the README's dependencies and batches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum After {
    /// Nothing: enqueued with the other such jobs of its wave in one statement.
    #[default]
    Nothing,
    /// Nothing, but a member of batch `b`: enqueued with the batch's other members and its
    /// callback in one transaction (`job_core::Batch`), all of them in the same wave, before
    /// the callback in the plan.
    Member(u32),
    /// The callback of batch `b`: `pending` until every member of the batch has finished,
    /// however it ended; then it runs, and completes once.
    Callback(u32),
    /// The plan's job number `n` (its `work.n`), enqueued before it: enqueued with
    /// `Enqueue::depends_on`, it runs once that job has completed; when that one ends
    /// discarded, it is discarded with class `dependency` and never runs.
    DependsOn(u32),
}

/// How a planned job ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Completed,
    /// Discarded after failing every attempt.
    Discarded,
    /// Discarded with class `dependency`, never run: the plan's job number `n` it depends on
    /// does not complete.
    Dependency(u32),
}

impl Planned {
    /// Its enqueue, with the plan's options.
    pub fn enqueue(&self) -> Enqueue<ChaosWork> {
        let enqueue = Enqueue::new(self.work)
            .max_attempts(self.max_attempts)
            .schedule_in(self.due_in)
            .payload_limit(DEFAULT_PAYLOAD_LIMIT);
        match &self.ordering_key {
            Some(key) => enqueue.ordering_key(key.clone()),
            None => enqueue,
        }
    }

    fn new_job(&self) -> NewJob {
        self.enqueue().build().expect("a valid chaos job")
    }

    /// How it ends, given the plan's jobs by number: as its payload says, unless a job it
    /// depends on does not complete.
    pub fn end(&self, plan: &HashMap<u32, &Planned>) -> End {
        if let After::DependsOn(n) = self.after {
            if plan.get(&n).map(|on| on.end(plan)) != Some(End::Completed) {
                return End::Dependency(n);
            }
        }
        if self.work.fail_first < self.max_attempts {
            End::Completed
        } else {
            End::Discarded
        }
    }
}

/// Enqueues `wave` and returns its ids in its order: the jobs that wait for nothing in one
/// statement, then each batch (its members and its callback) in a transaction of its own
/// with `Batch`, and each dependent with `Enqueue::depends_on` naming the id of the job it
/// waits for, which must have been enqueued before it (`ids_of`: the ids so far, by the jobs'
/// numbers; the wave's are added).
async fn enqueue(
    db: &TestDb,
    seed: u64,
    wave: &[Planned],
    ids_of: &mut HashMap<u32, i64>,
) -> Vec<i64> {
    let failed = |what: &str, e: &dyn std::fmt::Display| -> ! {
        panic!("[CHAOS_SEED={seed}] enqueueing {what}: {e}")
    };
    let mut ids: Vec<Option<i64>> = vec![None; wave.len()];
    let plain: Vec<usize> = (0..wave.len())
        .filter(|&i| wave[i].after == After::Nothing)
        .collect();
    if !plain.is_empty() {
        let got = db
            .store()
            .enqueue_many(plain.iter().map(|&i| wave[i].new_job()).collect())
            .await
            .unwrap_or_else(|e| failed("jobs", &e));
        assert_eq!(
            got.len(),
            plain.len(),
            "[CHAOS_SEED={seed}] enqueue_many returned too few ids"
        );
        for (&i, id) in plain.iter().zip(got) {
            ids[i] = Some(id);
            ids_of.insert(wave[i].work.n, id);
        }
    }
    let pool = db.pool();
    for (i, planned) in wave.iter().enumerate() {
        match planned.after {
            After::Nothing | After::Member(_) => {}
            After::Callback(b) => {
                let members: Vec<usize> = (0..i)
                    .filter(|&m| wave[m].after == After::Member(b))
                    .collect();
                let batch = members
                    .iter()
                    .fold(Batch::new(), |batch, &m| batch.member(wave[m].enqueue()))
                    .callback(planned.enqueue());
                let what = format!("batch {b}");
                let mut tx = pool.begin().await.unwrap_or_else(|e| failed(&what, &e));
                let got = batch
                    .enqueue(&mut *tx)
                    .await
                    .unwrap_or_else(|e: EnqueueError| failed(&what, &e));
                tx.commit().await.unwrap_or_else(|e| failed(&what, &e));
                assert_eq!(
                    got.members.len(),
                    members.len(),
                    "[CHAOS_SEED={seed}] a batch returned too few ids"
                );
                for (&m, id) in members.iter().zip(got.members).chain([(&i, got.callback)]) {
                    ids[m] = Some(id);
                    ids_of.insert(wave[m].work.n, id);
                }
            }
            After::DependsOn(n) => {
                let on = *ids_of.get(&n).unwrap_or_else(|| {
                    panic!(
                        "a plan enqueues job #{n} before its dependent #{}",
                        planned.work.n
                    )
                });
                let id = planned
                    .enqueue()
                    .depends_on([on])
                    .enqueue(&pool)
                    .await
                    .unwrap_or_else(|e| failed("a dependent", &e));
                ids[i] = Some(id);
                ids_of.insert(planned.work.n, id);
            }
        }
    }
    ids.into_iter()
        .zip(wave)
        .map(|(id, p)| {
            id.unwrap_or_else(|| {
                panic!(
                    "job #{} of the plan is a member of a batch without a callback after it in \
                     its wave",
                    p.work.n
                )
            })
        })
        .collect()
}

/// A job's fate, as its `fail_first` and attempts: most complete at once, some fail an
/// attempt or two first, and a few fail every attempt and end discarded.
pub fn fate(rng: &mut fastrand::Rng) -> (i32, i32) {
    match rng.u8(..100) {
        0..=3 => (3, 3),
        4..=23 => (1, MAX_ATTEMPTS),
        24..=33 => (2, MAX_ATTEMPTS),
        _ => (0, MAX_ATTEMPTS),
    }
}

/// How a run treats its worker processes.
pub struct Chaos {
    /// Names the run in its summary and the directory of its workers' logs.
    pub name: &'static str,
    /// Worker processes alive at once.
    pub workers: usize,
    /// Jobs each worker runs at once.
    pub concurrency: usize,
    /// Pause between two chaos actions, in milliseconds.
    pub kill_every_ms: RangeInclusive<u64>,
    /// One kill in this many takes down every worker at once.
    pub mass_kill_one_in: u8,
    /// One chaos action in this many pauses a worker (SIGSTOP) instead of killing one; `None`:
    /// workers are only killed.
    pub pause_one_in: Option<u8>,
    /// How long a paused worker stays stopped, in milliseconds.
    pub pause_ms: RangeInclusive<u64>,
    /// One chaos action in this many (drawn before the pause) silences every connection a
    /// worker holds: each worker then connects through a proxy of its own, which stops
    /// forwarding those connections' bytes for good without closing them (a host or a flow
    /// gone without a reset); its new connections pass. The workers give up a call after 2 s
    /// (`--store-timeout-ms`). `None`: no proxy.
    pub silence_one_in: Option<u8>,
    /// The run fails if the jobs are not all terminal by then.
    pub deadline: Duration,
    /// The workers run `chaos.rated` too (`--rated`, see `job_chaos::worker`).
    pub rated: bool,
    /// A single kill takes a worker that holds a lease, when the one drawn holds none and
    /// another does: for a test whose run means something only if kills reach running jobs
    /// (a worker just restarted often holds nothing yet, and a short run kills a few times).
    pub kill_busy: bool,
}

/// A finished chaos loop: every job terminal, every worker stopped.
pub struct Run {
    pub seed: u64,
    pub name: &'static str,
    /// The jobs' ids, in the plan's order.
    pub ids: Vec<i64>,
    /// Jobs per state just after the first batch was enqueued, before any worker started.
    pub before_workers: HashMap<String, i64>,
    pub fleet: Fleet,
    /// From the first worker's start until every job was terminal.
    pub run_time: Duration,
    /// Each worker's last line of output after its drain.
    pub last_words: Vec<String>,
    /// The longest a dependent was seen ready (every job it waits for ended) but still
    /// pending, between the chaos loop's looks (a few hundred milliseconds apart).
    pub longest_ready: Duration,
}

impl Chaos {
    /// Enqueues `plan` (in its order, in waves of equal `enqueue_after`, which must not
    /// decrease: see [`enqueue`]), starts the workers, and until every job is terminal keeps
    /// killing (SIGKILL) and restarting them, or pausing (SIGSTOP) and resuming them; then
    /// stops them with SIGTERM. Fails at once when a job is stranded (an ordering key without
    /// a head or a wake-up, see [`Headless`]; a dependent nothing will resolve, see
    /// [`Waiting`]), and when the jobs are not all terminal by the deadline. Jobs the test
    /// enqueued itself before (of any kind) are worked through with the plan's: the run ends
    /// when they are terminal too.
    pub async fn run(
        &self,
        seed: u64,
        db: &TestDb,
        rng: &mut fastrand::Rng,
        plan: &[Planned],
    ) -> Run {
        assert!(
            plan.windows(2)
                .all(|w| w[0].enqueue_after <= w[1].enqueue_after),
            "a plan is enqueued in its order"
        );
        let pool = db.pool();
        let enqueued_before: i64 = state_counts(&pool).await.values().sum();
        let jobs = plan.len() as i64 + enqueued_before;
        let mut waves = plan
            .chunk_by(|a, b| a.enqueue_after == b.enqueue_after)
            .peekable();
        let mut ids = Vec::with_capacity(plan.len());
        let mut ids_of = HashMap::new();
        if let Some(wave) = waves.next_if(|w| w[0].enqueue_after.is_zero()) {
            ids.extend(enqueue(db, seed, wave, &mut ids_of).await);
        }
        let before_workers = state_counts(&pool).await;

        // The server's end of a silenced connection is closed 5 s after the silence: what the
        // server's TCP keepalive does about 25 s after it stops reaching a client (the
        // sessions of pool_options() pools ask for it), sooner so that a run is not all
        // waiting. Until then a transaction the worker's handler left open holds its locks.
        let mut proxies = Vec::new();
        if self.silence_one_in.is_some() {
            for _ in 0..self.workers {
                let verdict = Duration::from_secs(5);
                proxies.push(Blackhole::with_server_verdict(&db.connect_options(), verdict).await);
            }
        }
        let mut fleet = Fleet::new(self, seed, db.url(), proxies);
        // Dependents seen ready for the stager (every job they wait for has ended), since
        // when; and the longest any was seen so.
        let mut ready_since: HashMap<i64, Instant> = HashMap::new();
        let mut longest_ready = Duration::ZERO;
        let started = Instant::now();
        for slot in 0..self.workers {
            fleet.spawn(slot);
        }
        loop {
            tokio::time::sleep(Duration::from_millis(rng.u64(self.kill_every_ms.clone()))).await;
            fleet.resume_due();
            fleet.check_alive();
            while let Some(wave) = waves.next_if(|w| started.elapsed() >= w[0].enqueue_after) {
                ids.extend(enqueue(db, seed, wave, &mut ids_of).await);
            }
            let counts = state_counts(&pool).await;
            let stranded: Vec<Headless> = headless_keys(&pool)
                .await
                .into_iter()
                .filter(|h| !h.listed)
                .collect();
            if !stranded.is_empty() {
                dump(&pool, &fleet.dir).await;
                panic!(
                    "[CHAOS_SEED={seed}] jobs stranded after {:.1?}: ordering keys with pending \
                     jobs but neither a head nor an entry on the wake-up list, so nothing \
                     promotes them until another job of their key is enqueued (a lost \
                     wake-up): {stranded:?}; jobs per state: {counts:?}; worker logs and the \
                     database's rows in {}",
                    started.elapsed(),
                    fleet.dir.display()
                );
            }
            let (stranded, ready): (Vec<Waiting>, Vec<Waiting>) = waiting_dependents(&pool)
                .await
                .into_iter()
                .partition(|w| w.open == 0);
            if !stranded.is_empty() {
                dump(&pool, &fleet.dir).await;
                panic!(
                    "[CHAOS_SEED={seed}] jobs stranded after {:.1?}: dependents left pending \
                     with no unresolved edge, so no stager will ever promote or discard them \
                     (it reads only unresolved edges): {stranded:?}; jobs per state: \
                     {counts:?}; worker logs and the database's rows in {}",
                    started.elapsed(),
                    fleet.dir.display()
                );
            }
            let now = Instant::now();
            ready_since.retain(|id, _| ready.iter().any(|w| w.id == *id));
            for w in &ready {
                let since = *ready_since.entry(w.id).or_insert(now);
                longest_ready = longest_ready.max(now - since);
            }
            let terminal: i64 = ["completed", "cancelled", "discarded"]
                .iter()
                .filter_map(|s| counts.get(*s))
                .sum();
            if ids.len() == plan.len() && terminal == jobs {
                break;
            }
            if started.elapsed() > self.deadline {
                let headless = headless_keys(&pool).await;
                dump(&pool, &fleet.dir).await;
                panic!(
                    "[CHAOS_SEED={seed}] only {terminal} of {jobs} jobs terminal after {:?} \
                     ({} kills); jobs per state: {counts:?}; ordering keys whose pending jobs \
                     have no head to wait for: {headless:?}; dependents whose dependencies \
                     have all ended, waiting for a stager: {ready:?}; worker logs and the \
                     database's rows in {}",
                    self.deadline,
                    fleet.kills,
                    fleet.dir.display()
                );
            }
            let silence = self
                .silence_one_in
                .is_some_and(|one_in| rng.u8(..one_in) == 0);
            let pause = !silence
                && self
                    .pause_one_in
                    .is_some_and(|one_in| rng.u8(..one_in) == 0);
            if silence {
                fleet.silence(rng.usize(..self.workers));
            } else if pause {
                let slot = rng.usize(..self.workers);
                fleet.pause(slot, Duration::from_millis(rng.u64(self.pause_ms.clone())));
            } else if rng.u8(..self.mass_kill_one_in) == 0 {
                fleet.mass_kills += 1;
                for slot in 0..self.workers {
                    fleet.kill(slot);
                }
                for slot in 0..self.workers {
                    fleet.spawn(slot);
                }
            } else {
                let mut slot = rng.usize(..self.workers);
                if self.kill_busy {
                    let busy = fleet.busy_slots(&pool).await;
                    if !busy.is_empty() && !busy.contains(&slot) {
                        slot = busy[rng.usize(..busy.len())];
                    }
                }
                fleet.kill(slot);
                fleet.spawn(slot);
            }
        }
        let run_time = started.elapsed();
        // A handler's COMMIT whose answer a silence swallowed (the server committed it, and the
        // job is completed) waits for that answer until its attempt's timeout. A SIGTERM sent
        // before then finds its code running, and no drain could end in time (a CI run: the
        // job completed, SIGTERM came 3.6 s later, the 5 s drain passed, and the code ended at
        // the 10 s timeout). No handler starts once every job has ended, so all such waits end
        // within a timeout from now: the workers are stopped after it, and must then drain
        // cleanly (`conclude`).
        if fleet.silences > 0 {
            tokio::time::sleep(ChaosWork::OPTIONS.timeout + SILENCED_CODE_MARGIN).await;
        }
        let last_words = fleet.stop_all();
        Run {
            seed,
            name: self.name,
            ids,
            before_workers,
            fleet,
            run_time,
            last_words,
            longest_ready,
        }
    }
}

/// What the database holds after a run.
pub struct Records {
    pub rows: Vec<JobRow>,
    pub executions: Vec<Execution>,
    pub effects: Vec<Effect>,
    /// The attempts (job, attempt) whose handler a worker printed it aborted: their handler
    /// ran, though its first ledger write may never have landed (a silenced connection).
    pub aborted_attempts: HashSet<(i64, i32)>,
}

impl Run {
    /// The job rows, the ledger (with the aborts the workers printed) and the effects.
    pub async fn records(&self, pool: &PgPool) -> Records {
        let aborts = logged_aborts(&self.fleet.incarnations);
        let abort_times = aborts.iter().map(|a| (a.token, a.at)).collect();
        Records {
            rows: load_jobs(pool).await,
            executions: load_executions(pool, &abort_times).await,
            effects: load_effects(pool).await,
            aborted_attempts: aborts.iter().filter_map(|a| a.attempt).collect(),
        }
    }

    /// The run in one paragraph: its numbers, the workers' last words, and the first few
    /// lost leases and overlaps after pauses.
    pub fn summary(&self, records: &Records, audit: &Audit) -> String {
        let fleet = &self.fleet;
        let mut summary = format!(
            "{} chaos: seed {}: {} jobs ({} completed, {} discarded, {} of them by a \
             dependency) in {:.1?}, \
             {} kills ({} of all workers at once), {} pauses, {} silences, {} worker processes, \
             {} executions \
             ({} of blocking jobs), {} effects; \
             {} attempts rescued after their lease expired ({} killed before the handler started, \
             {} finished but not finalized, {} last attempts killed after their recorded \
             start), {} leases lost by live workers, \
             {} executions started without a live lease, {} executions overlapped by the next \
             attempt after their worker was paused, {} attempts timed out on a silenced \
             connection, {} attempts failed by their own ledger or effect write in a silence, \
             {} executions fenced by a live worker and released, {} fenced while their \
             transaction held the row, {} last attempts aborted before their first ledger \
             write landed",
            self.name,
            self.seed,
            self.ids.len(),
            audit.completed,
            audit.discarded + audit.dependency_discarded,
            audit.dependency_discarded,
            self.run_time,
            fleet.kills,
            fleet.mass_kills,
            fleet.pauses,
            fleet.silences,
            fleet.incarnations.len(),
            records.executions.len(),
            audit.blocking_executions,
            records.effects.len(),
            audit.rescued,
            audit.rescued_unstarted,
            audit.rescued_finished,
            audit.killed_after_last_start,
            audit.lost_by_live_workers.len(),
            audit.started_without_live_lease,
            audit.overlaps_after_pause.len(),
            audit.timed_out_in_silence,
            audit.app_writes_failed_in_silence,
            audit.fenced_released,
            audit.fenced_held,
            audit.aborted_before_ledger,
        );
        for line in &self.last_words {
            let _ = write!(summary, "\n  {line}");
        }
        for lost in audit.lost_by_live_workers.iter().take(5) {
            let _ = write!(summary, "\n  lease lost by a live worker: {lost}");
        }
        for overlap in audit.overlaps_after_pause.iter().take(5) {
            let _ = write!(summary, "\n  after a pause: {overlap}");
        }
        summary
    }

    /// Prints `summary` and fails with every violation of `audit` (and every worker that did
    /// not drain cleanly), keeping the workers' logs and a dump of the database; else removes
    /// the logs (unless a live worker lost a lease) and drops the database.
    pub async fn conclude(self, db: TestDb, audit: Audit, summary: String) {
        let seed = self.seed;
        let fleet = &self.fleet;
        eprintln!("{summary}");
        let mut violations = audit.violations;
        for line in &self.last_words {
            if !(line.contains("finished_in_time: true") && line.contains("released: 0")) {
                violations.push(
                    "clean drain",
                    format!("a worker did not drain cleanly: {line}"),
                );
            }
        }
        if !violations.is_empty() {
            dump(&db.pool(), &fleet.dir).await;
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
                "{} chaos: leases were lost by live workers; their logs are kept in {}",
                self.name,
                fleet.dir.display()
            );
        }
        db.close().await;
    }
}

/// One run of the worker binary.
pub struct Incarnation {
    /// Its worker id (`locked_by`), `w<slot>.<number>`.
    pub id: String,
    pub spawned_at: DateTime<Utc>,
    /// When the test saw it dead after its SIGKILL.
    pub killed_at: Option<DateTime<Utc>>,
    /// When it was stopped with SIGSTOP (sent just before), and resumed with SIGCONT (sent
    /// just after), if it was: it ran no code in between.
    pub pauses: Vec<(DateTime<Utc>, Option<DateTime<Utc>>)>,
    pub log: PathBuf,
}

impl Incarnation {
    /// Whether this worker was paused at some time from `from` to `to`: a pause that began
    /// by `to` and had not ended by `from` (one begun before `from` counts too: a pause longer
    /// than the window, the execution claimed just before it, started on the resume).
    fn paused_between(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> bool {
        self.pauses.iter().any(|(stopped, resumed)| {
            *stopped <= to && resumed.is_none_or(|resumed| resumed + ZOMBIE_SLACK >= from)
        })
    }
}

struct Running {
    child: Child,
    incarnation: usize,
    /// Stopped with SIGSTOP until then.
    paused_until: Option<Instant>,
}

/// The worker processes, one per slot, and every process ever started.
pub struct Fleet {
    seed: u64,
    url: String,
    workers: usize,
    concurrency: usize,
    rated: bool,
    pub dir: PathBuf,
    slots: Vec<Option<Running>>,
    pub incarnations: Vec<Incarnation>,
    pub kills: usize,
    pub mass_kills: usize,
    pub pauses: usize,
    pub silences: usize,
    /// Each slot's proxy, when the run silences connections.
    proxies: Vec<Blackhole>,
}

impl Fleet {
    fn new(chaos: &Chaos, seed: u64, url: String, proxies: Vec<Blackhole>) -> Fleet {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{}-{seed}-{}",
            chaos.name,
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        Fleet {
            seed,
            url,
            workers: chaos.workers,
            concurrency: chaos.concurrency,
            rated: chaos.rated,
            dir,
            slots: (0..chaos.workers).map(|_| None).collect(),
            incarnations: Vec::new(),
            kills: 0,
            mass_kills: 0,
            pauses: 0,
            silences: 0,
            proxies,
        }
    }

    /// Silences every connection the worker in `slot` holds now (see [`Chaos::silence_one_in`]).
    fn silence(&mut self, slot: usize) {
        if let Some(proxy) = self.proxies.get(slot) {
            proxy.silence();
            self.silences += 1;
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
        // Through the slot's proxy, and giving up calls after 2 s, when connections are silenced.
        let (url, store_timeout) = match self.proxies.get(slot) {
            Some(proxy) => (
                proxy.options().to_url_lossy().to_string(),
                vec!["--store-timeout-ms".to_owned(), "2000".to_owned()],
            ),
            None => (self.url.clone(), vec![]),
        };
        let child = Command::new(env!("CARGO_BIN_EXE_job-chaos"))
            .args(["--database-url", &url, "--worker-id", &id])
            .args(store_timeout)
            .args(["--concurrency", &self.concurrency.to_string()])
            // Slot 0 claims only free slots; slot 1 prefetches as measured (the default) and
            // slot 2 a fixed number, so that killed workers also take claimed jobs that never
            // started down with them.
            .args(match slot {
                0 => vec!["--prefetch".to_owned(), "0".to_owned()],
                1 => vec![],
                _ => vec![
                    "--prefetch".to_owned(),
                    (slot * self.concurrency).to_string(),
                ],
            })
            // Slot 1 runs on a current-thread runtime, which a blocking job blocks whole.
            .args(if slot == 1 {
                &["--current-thread"][..]
            } else {
                &[]
            })
            .args(["--seed", &(self.seed ^ number as u64).to_string()])
            .args(if self.rated { &["--rated"][..] } else { &[] })
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
        for slot in 0..self.workers {
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

    /// The slots whose worker holds a lease now (`locked_by` is the worker's id).
    async fn busy_slots(&self, pool: &PgPool) -> Vec<usize> {
        let holders: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT locked_by FROM job.jobs \
             WHERE state = 'running' AND locked_by IS NOT NULL",
        )
        .fetch_all(pool)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "[CHAOS_SEED={}] reading the leases' holders: {e}",
                self.seed
            )
        });
        (0..self.workers)
            .filter(|&slot| {
                self.slots[slot].as_ref().is_some_and(|running| {
                    holders.contains(&self.incarnations[running.incarnation].id)
                })
            })
            .collect()
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
        for slot in 0..self.workers {
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
        for slot in 0..self.workers {
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
            // Its report of the drain: the last line it prints itself, though a task of the
            // runtime may log after it (sqlx's UNLISTEN of a listener given up on a silenced
            // connection, answered once the server's end was closed).
            let report = output
                .lines()
                .rev()
                .find(|line| line.starts_with("job-chaos ") && line.contains(": stopped: "))
                .or_else(|| output.lines().last());
            last_words.push(report.unwrap_or("(no output)").to_owned());
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
        (
            "ordering_wake.jsonl",
            "SELECT row_to_json(w)::text FROM job.ordering_wake w",
        ),
        (
            "dependencies.jsonl",
            "SELECT row_to_json(d)::text FROM job.dependencies d ORDER BY job_id, depends_on",
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

/// An ordering key with pending jobs but no head (no job of it scheduled, available, running
/// or retryable). (A pending job without a key is a dependent: see [`Waiting`].)
#[derive(Debug)]
struct Headless {
    key: String,
    /// Its pending jobs.
    pending: Vec<i64>,
    /// Whether the key is on the wake-up list (`job.ordering_wake`), so that a stager will
    /// promote its oldest pending job. A head finishing and the promotion of the next job, or
    /// the key's entry on that list, commit together (the release trigger, migration 0012),
    /// and so do a promotion and the removal of the entry (`job.ordering_wake_up`): a key seen
    /// headless and unlisted in one snapshot stays so until an enqueue of that key.
    listed: bool,
}

/// The headless ordering keys, read in one statement (one snapshot).
async fn headless_keys(pool: &PgPool) -> Vec<Headless> {
    sqlx::query_as::<_, (String, Vec<i64>, bool)>(
        "SELECT p.ordering_key, array_agg(p.id ORDER BY p.id),
                EXISTS (SELECT 1 FROM job.ordering_wake w WHERE w.ordering_key = p.ordering_key)
         FROM job.jobs p
         WHERE p.state = 'pending' AND p.ordering_key IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM job.jobs h
                           WHERE h.ordering_key = p.ordering_key
                             AND h.state IN ('scheduled', 'available', 'running', 'retryable'))
         GROUP BY p.ordering_key ORDER BY p.ordering_key",
    )
    .fetch_all(pool)
    .await
    .expect("looking for headless ordering keys")
    .into_iter()
    .map(|(key, pending, listed)| Headless {
        key,
        pending,
        listed,
    })
    .collect()
}

/// A dependent (a pending job without an ordering key) none of whose unresolved edges waits
/// for a job still unfinished.
#[derive(Debug)]
pub struct Waiting {
    pub id: i64,
    /// Its unresolved edges (`job.dependencies`), every one to a job that has ended (or is
    /// gone): the next stager pass resolves it. None: stranded. The stager reads only
    /// unresolved edges, and it marks a dependent's edges resolved and promotes or discards it
    /// in one transaction (`job.dependencies_resolve`, migration 0013), as an enqueue inserts
    /// its edges and makes it pending: a dependent seen pending without one in one snapshot
    /// stays so forever.
    pub open: i64,
}

/// The pending dependents that wait for no unfinished job, read in one statement.
async fn waiting_dependents(pool: &PgPool) -> Vec<Waiting> {
    sqlx::query_as::<_, (i64, i64)>(
        "SELECT j.id, count(d.job_id) FILTER (WHERE NOT d.resolved)
         FROM job.jobs j
         LEFT JOIN job.dependencies d ON d.job_id = j.id
         LEFT JOIN job.jobs x ON x.id = d.depends_on
         WHERE j.state = 'pending' AND j.ordering_key IS NULL
         GROUP BY j.id
         HAVING count(d.job_id) FILTER (WHERE NOT d.resolved)
              = count(d.job_id) FILTER (WHERE NOT d.resolved
                                          AND (x.id IS NULL OR x.state IN ('completed',
                                               'cancelled', 'discarded')))
         ORDER BY j.id",
    )
    .fetch_all(pool)
    .await
    .expect("looking for dependents waiting for nothing")
    .into_iter()
    .map(|(id, open)| Waiting { id, open })
    .collect()
}

/// A job row, as much as the audit needs.
pub struct JobRow {
    pub id: i64,
    pub state: String,
    pub attempt: i32,
    pub max_attempts: i32,
    pub payload: ChaosWork,
    pub errors: Vec<AttemptError>,
    pub finalized_at: Option<DateTime<Utc>>,
    pub ordering_key: Option<String>,
    /// A worker recorded the start of a last attempt (`job.jobs.started_lease`).
    pub last_start_recorded: bool,
}

type JobTuple = (
    i64,
    String,
    i32,
    i32,
    Json<ChaosWork>,
    Json<Vec<AttemptError>>,
    Option<DateTime<Utc>>,
    Option<String>,
    bool,
);

async fn load_jobs(pool: &PgPool) -> Vec<JobRow> {
    sqlx::query_as::<_, JobTuple>(
        "SELECT id, state::text, attempt, max_attempts, payload, errors, finalized_at,
                ordering_key, started_lease IS NOT NULL
         FROM job.jobs ORDER BY id",
    )
    .fetch_all(pool)
    .await
    .expect("loading the jobs")
    .into_iter()
    .map(
        |(
            id,
            state,
            attempt,
            max_attempts,
            payload,
            errors,
            finalized_at,
            ordering_key,
            recorded,
        )| {
            JobRow {
                id,
                state,
                attempt,
                max_attempts,
                payload: payload.0,
                errors: errors.0,
                finalized_at,
                ordering_key,
                last_start_recorded: recorded,
            }
        },
    )
    .collect()
}

/// One row of the ledger.
pub struct Execution {
    pub id: i64,
    pub job_id: i64,
    pub attempt: i32,
    pub worker: String,
    pub lock_token: Uuid,
    pub lease_live: bool,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub outcome: Option<String>,
    pub aborted_at: Option<DateTime<Utc>>,
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
pub struct Effect {
    pub job_id: i64,
    pub attempt: i32,
    pub worker: String,
    pub lock_token: Uuid,
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

/// One `ledger: aborted execution` line of a worker's log.
struct LoggedAbort {
    token: Uuid,
    at: DateTime<Utc>,
    /// The job and attempt it names, `(job N, attempt M)`.
    attempt: Option<(i64, i32)>,
}

/// Every `ledger: aborted execution` line of the workers' logs
/// (`<time> ledger: aborted execution <token> (job N, attempt M)`).
fn logged_aborts(incarnations: &[Incarnation]) -> Vec<LoggedAbort> {
    let mut aborts = Vec::new();
    for inc in incarnations {
        let log = std::fs::read_to_string(&inc.log).unwrap_or_default();
        for line in log.lines() {
            let Some((at, rest)) = line.split_once(ABORTED_LINE) else {
                continue;
            };
            let words: Vec<&str> = rest.split_whitespace().collect();
            let token = words.first().and_then(|id| id.parse().ok());
            let at = DateTime::parse_from_rfc3339(at).ok();
            let job = words
                .get(2)
                .and_then(|w| w.trim_end_matches(',').parse().ok());
            let attempt = words
                .get(4)
                .and_then(|w| w.trim_end_matches(')').parse().ok());
            if let (Some(token), Some(at)) = (token, at) {
                aborts.push(LoggedAbort {
                    token,
                    at: at.with_timezone(&Utc),
                    attempt: job.zip(attempt),
                });
            }
        }
    }
    aborts
}

impl Execution {
    /// The latest moment the handler can have been running: its last ledger write or its
    /// abort, else the death of its worker.
    pub fn end(&self, killed_at: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
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
pub struct Violations(BTreeMap<&'static str, Vec<String>>);

impl Violations {
    pub fn push(&mut self, check: &'static str, what: String) {
        self.0.entry(check).or_default().push(what);
    }

    fn len(&self) -> usize {
        self.0.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
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
pub struct Audit {
    pub violations: Violations,
    pub completed: usize,
    pub discarded: usize,
    /// Discarded with class `dependency` (never run) because a job they depend on was.
    pub dependency_discarded: usize,
    pub rescued: usize,
    pub rescued_unstarted: usize,
    /// Jobs discarded whose last attempt's start was recorded and whose worker was killed
    /// before the handler's first ledger write.
    pub killed_after_last_start: usize,
    /// Jobs discarded whose last attempt's handler ran (its worker printed that it aborted
    /// it) but whose first ledger write never landed: on a silenced connection, it waited
    /// until the worker fenced the execution, and the lease could not be given back.
    pub aborted_before_ledger: usize,
    pub rescued_finished: usize,
    /// Allowed (a worker that cannot renew in time fences itself), but worth a look.
    pub lost_by_live_workers: Vec<String>,
    pub started_without_live_lease: usize,
    /// Executions overlapped by the job's next attempt because their worker was paused
    /// (SIGSTOP) past their lease and ran on when resumed: the one case nothing can stop.
    /// Allowed, since the effect still commits once (its transaction is guarded by the lease).
    pub overlaps_after_pause: Vec<String>,
    /// Attempts that timed out, their handler's statement on a silenced connection.
    pub timed_out_in_silence: usize,
    /// Attempts whose handler's own write (the ledger's start or end, the effect's
    /// transaction) failed while connections were silenced: the application's pool, its slots
    /// held by statements on silenced connections, gave no connection in time, so the ledger
    /// could not record the failed execution it was writing. The job is retried as for any
    /// error; no lost job, double run or double effect is excused by it.
    pub app_writes_failed_in_silence: usize,
    /// Executions a live worker fenced (it could not renew their lease for two thirds of it:
    /// paused, say) and whose lease it then gave back, the attempt not counted (class
    /// `released`): the job's next execution runs the same attempt again, once the fenced
    /// one has ended.
    pub fenced_released: usize,
    /// Executions fenced while their own `complete_in` transaction held the job's row, their
    /// attempt written as failed (class `lease_held`).
    pub fenced_held: usize,
    pub blocking_executions: usize,
}

/// Checks `row`, planned to be discarded because the job it depends on (`on`, if that was
/// stored) did not complete: discarded without a single attempt, its only error entry of
/// class `dependency` naming `on`, and never run (`ran`: its executions and effects).
fn audit_dependency_discard(row: &JobRow, on: Option<i64>, ran: usize, v: &mut Violations) {
    let id = row.id;
    let message = on.map(|on| format!("job {on}, which this job depends on, was discarded"));
    let entry_ok = |e: &AttemptError| {
        e.class == "dependency" && e.attempt == 0 && Some(&e.message) == message.as_ref()
    };
    if row.state != "discarded"
        || row.attempt != 0
        || row.finalized_at.is_none()
        || !matches!(row.errors.as_slice(), [e] if entry_ok(e))
    {
        v.push(
            "discarded by its dependency",
            format!(
                "job {id}: {} after {} attempts (finalized at {:?}) with errors {:?}; expected \
                 discarded, unattempted, with one `dependency` error: {message:?}",
                row.state, row.attempt, row.finalized_at, row.errors
            ),
        );
    }
    if ran > 0 {
        v.push(
            "discarded by its dependency",
            format!("job {id}: never to run, but {ran} executions and effects recorded"),
        );
    }
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
/// - No dead letter unrun: a job discarded for its attempts has an execution of its last one.
/// - Discarded by its dependency: a job planned to depend on one that does not complete
///   ([`End::Dependency`]) is discarded without an attempt, its one error entry of class
///   `dependency` naming the job it depended on, and never ran (no execution, no effect).
pub fn audit(run: &Run, plan: &[Planned], records: &Records) -> Audit {
    let (ids, incarnations) = (&run.ids, &run.fleet.incarnations);
    let (rows, executions, effects) = (&records.rows, &records.executions, &records.effects);
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
    let planned: HashMap<u32, &Planned> = plan.iter().map(|p| (p.work.n, p)).collect();
    let planned_by_n = &planned;
    let id_of: HashMap<u32, i64> = rows.iter().map(|r| (r.payload.n, r.id)).collect();

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
        .filter(|p| p.work.blocking)
        .map(|p| p.work.n)
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
        let Some(planned) = planned.get(&work.n) else {
            v.push(
                "payloads as planned",
                format!("job {id}: payload {work:?} is not in the plan"),
            );
            continue;
        };
        if planned.work != work
            || planned.max_attempts != row.max_attempts
            || planned.ordering_key != row.ordering_key
        {
            v.push(
                "payloads as planned",
                format!(
                    "job {id}: stored as {work:?} with {} attempts and ordering key {:?}, \
                     planned as {:?} with {} and {:?}",
                    row.max_attempts,
                    row.ordering_key,
                    planned.work,
                    planned.max_attempts,
                    planned.ordering_key
                ),
            );
        }
        let completes = match planned.end(planned_by_n) {
            End::Dependency(on) => {
                a.dependency_discarded += 1;
                let ran = by_job.remove(&id).unwrap_or_default().len();
                let effects = effects_of.remove(&id).unwrap_or_default().len();
                audit_dependency_discard(row, id_of.get(&on).copied(), ran + effects, v);
                continue;
            }
            end => end == End::Completed,
        };
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
        // A `released` entry gives its attempt back: the attempt runs again under its number.
        let recorded: Vec<i32> = row
            .errors
            .iter()
            .filter(|e| e.class != "released")
            .map(|e| e.attempt)
            .collect();
        let released = |attempt: i32, before: DateTime<Utc>| {
            row.errors
                .iter()
                .filter(|e| e.class == "released" && e.attempt == attempt && e.at < before)
                .count()
        };
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
        let mut runs_of: HashMap<i32, usize> = HashMap::new();
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
            at_attempt.insert(e.attempt, e);
            let runs = runs_of.entry(e.attempt).or_default();
            *runs += 1;
            // Each release before it gave the attempt back for one more execution.
            if *runs > 1 + released(e.attempt, e.started_at) {
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
                "error"
                    if run.fleet.silences > 0
                        && (err.message.starts_with("ledger: ")
                            || err.message.starts_with("effect: ")) =>
                {
                    a.app_writes_failed_in_silence += 1;
                }
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
                    // A release between the attempt's last execution and this rescue gave the
                    // attempt back: the lease rescued was a later claim of the same attempt
                    // number, which never started (no execution of it is in the ledger).
                    let exec = exec.filter(|e| {
                        released(err.attempt, err.at) <= released(err.attempt, e.started_at)
                    });
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
                // A handler's own statement on a connection that went silent waits until the
                // attempt's timeout ends it (tests/silence.rs).
                "timeout" if run.fleet.silences > 0 => a.timed_out_in_silence += 1,
                // A live worker fenced the execution and gave its lease back; that it ended
                // before the attempt ran again is checked below ("never twice at once").
                "released" | "lease_held" if exec.is_some() => {
                    if err.class == "released" {
                        a.fenced_released += 1;
                    } else {
                        a.fenced_held += 1;
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

        // No dead letter unrun: a job discarded after its attempts ran its last one (a last
        // attempt claimed and lost with its worker before it started is retried, not counted).
        // Its start is recorded before its handler's first ledger write: a worker killed
        // between the two leaves a started attempt with no execution, rescued as one.
        let killed_after_its_start = row.state == "discarded"
            && row.last_start_recorded
            && row.errors.last().is_some_and(|e| {
                e.attempt == row.attempt
                    && e.class == "lease_expired"
                    && parse_lease_expired(&e.message).is_some_and(|(worker, _)| {
                        workers.get(worker).is_some_and(|w| w.killed_at.is_some())
                    })
            });
        if killed_after_its_start && !at_attempt.contains_key(&row.attempt) {
            a.killed_after_last_start += 1;
        } else if row.state == "discarded"
            && !at_attempt.contains_key(&row.attempt)
            && records.aborted_attempts.contains(&(id, row.attempt))
        {
            a.aborted_before_ledger += 1;
        } else if row.state == "discarded" && !at_attempt.contains_key(&row.attempt) {
            v.push(
                "no dead letter unrun",
                format!(
                    "job {id}: discarded after {} attempts, but the ledger has no execution of \
                     the last; errors {:?}",
                    row.attempt, row.errors
                ),
            );
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
                // The same attempt again after a release of it is the next execution.
                let again = earlier.attempt == later.attempt
                    && released(later.attempt, later.started_at) > 0;
                if earlier.attempt >= later.attempt && !again {
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

/// The plan of `sigkill.rs` and `silence.rs`, fixed by the seed: most jobs complete at once,
/// some fail an attempt or two first, and a few fail every attempt and end discarded. Most take
/// a few milliseconds, some a good part of the lease, a few longer than the lease (only
/// heartbeats keep them). They become due over `spread`, so the backlog stays short and a
/// rescued job is claimed again at once: a second execution overlapping a first one would
/// show. With `blocking`, one job in ten blocks its worker's runtime thread for its whole work.
pub fn mixed_plan(
    rng: &mut fastrand::Rng,
    jobs: usize,
    spread: Duration,
    blocking: bool,
) -> Vec<Planned> {
    (0..jobs as u32)
        .map(|n| {
            let (fail_first, max_attempts) = fate(rng);
            // Long jobs become due early, so that their many attempts (they are the ones
            // kills hit most) overlap the arrival of the others instead of trailing them.
            let (work_ms, due_within) = match rng.u16(..1000) {
                0..=14 => (rng.u64(1000..=1150), spread / 3),
                15..=114 => (rng.u64(100..=500), spread),
                _ => (rng.u64(2..=30), spread),
            };
            let due_in = match rng.u8(..10) {
                0 => Duration::ZERO,
                _ => Duration::from_millis(rng.u64(..due_within.as_millis() as u64)),
            };
            // Drawn either way, so that a seed plans the same jobs with or without blocking.
            let blocks = rng.u8(..10) == 0;
            let work = ChaosWork {
                n,
                fail_first,
                work_ms,
                blocking: blocking && blocks,
            };
            Planned {
                work,
                max_attempts,
                due_in,
                ordering_key: None,
                enqueue_after: Duration::ZERO,
                after: After::Nothing,
            }
        })
        .collect()
}
