//! The worker side of the real-process chaos test (`tests/sigkill.rs`): one job kind,
//! [`ChaosWork`], whose handler records every execution in the `chaos.executions` ledger
//! ([`LEDGER_DDL`]) of the same database, its rate-limited twin [`ChaosRated`]
//! (`tests/rate_limits.rs`), and the worker that runs them ([`worker`]). The `job-chaos`
//! binary runs that worker until it is told to stop or killed.

use std::time::Duration;

use chrono::{SecondsFormat, Utc};
use job_core::{Backoff, BuildError, Job, JobContext, JobError, JobOptions, RateLimit};
use job_core::{Prefetch, Worker, WorkerConfig};
use job_postgres::PgStore;
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

/// The queue the chaos jobs run on.
pub const QUEUE: &str = "chaos";

/// The lease of a chaos job: short, so that a killed worker's jobs come back within seconds.
pub const LEASE: Duration = Duration::from_millis(1000);

/// How often every worker's rescuer looks for expired leases.
pub const RESCUE_EVERY: Duration = Duration::from_millis(150);

/// How often an idle chaos worker looks for due jobs without a notification.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Attempts in all of a chaos job, unless the enqueue overrides it: many, so that kills alone
/// never exhaust a job's attempts (a job killed this often would take minutes of chaos).
pub const MAX_ATTEMPTS: i32 = 100;

/// The ledger's schema, created by the test before any worker starts.
pub const LEDGER_DDL: &str = include_str!("ledger.sql");

/// One unit of chaos work: sleeps `work_ms` (blocking its thread with `std::thread::sleep` when
/// `blocking`, as careless handler code does), and fails (retryably) while its attempt number is
/// at most `fail_first`. Its fate is therefore fixed by the payload: completed at the first
/// attempt above `fail_first` that is not killed, or discarded when `fail_first` reaches the
/// job's attempts. A successful attempt writes its effect (a row of `chaos.effects`) and
/// completes the job in one transaction (`complete_in`), so the effect exists once per
/// completed job or the audit finds it twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChaosWork {
    /// The job's number in its batch.
    pub n: u32,
    /// Attempts 1 to `fail_first` fail retryably.
    pub fail_first: i32,
    /// Milliseconds of "work" (a sleep) of a successful attempt; a failing one gives up
    /// after at most [`FAIL_AFTER`].
    pub work_ms: u64,
    /// The work blocks the runtime's thread instead of awaiting.
    #[serde(default)]
    pub blocking: bool,
}

/// The longest a failing attempt works before it fails.
pub const FAIL_AFTER: Duration = Duration::from_millis(50);

impl ChaosWork {
    /// Whether attempt `attempt` of this job fails by design.
    pub fn fails_at(&self, attempt: i32) -> bool {
        attempt <= self.fail_first
    }

    /// How long attempt `attempt` works.
    pub fn work(&self, attempt: i32) -> Duration {
        let work = Duration::from_millis(self.work_ms);
        if self.fails_at(attempt) {
            work.min(FAIL_AFTER)
        } else {
            work
        }
    }
}

/// Where executions are recorded: the ledger's pool and this worker's id.
#[derive(Debug, Clone)]
pub struct Ledger {
    /// The pool of the database holding `chaos.executions`.
    pub pool: PgPool,
    /// Recorded as `worker` with every execution.
    pub worker: String,
}

/// Records the handler's start, unless the execution already lost its lease; `lease_live`
/// says whether the row was still held under this token with an unexpired lease.
const START: &str = "\
INSERT INTO chaos.executions (job_id, attempt, worker, lock_token, lease_live, started_at)
SELECT $1, $2, $3, $4,
       EXISTS (SELECT 1 FROM job.jobs j
               WHERE j.id = $1 AND j.lock_token = $4 AND j.state = 'running'
                 AND j.locked_until > clock_timestamp()),
       clock_timestamp()";

/// Executions are found by their lease token, which is unique to each: an abort can be
/// recorded even when the handler was dropped before its start was acknowledged.
const FINISH: &str = "UPDATE chaos.executions SET finished_at = clock_timestamp(), outcome = $2 \
                      WHERE lock_token = $1";

const ABORTED: &str = "UPDATE chaos.executions SET aborted_at = $2 WHERE lock_token = $1";

/// The effect of a successful attempt, written in the transaction that completes the job.
const EFFECT: &str =
    "INSERT INTO chaos.effects (job_id, attempt, worker, lock_token) VALUES ($1, $2, $3, $4)";

/// The line a worker prints when a handler is dropped unfinished, before the ledger write
/// (which a kill may prevent): `<RFC 3339 time> ledger: aborted execution <lease token> ...`.
pub const ABORTED_LINE: &str = " ledger: aborted execution ";

/// Writes `aborted_at` when the handler is dropped before its last ledger write completed,
/// and says so on stdout at once. It exists from the handler's first statement, so a handler
/// dropped while its start is being recorded is still known to have ended.
struct Unfinished {
    pool: PgPool,
    execution: uuid::Uuid,
    job: i64,
    attempt: i32,
    done: bool,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let at = Utc::now();
        println!(
            "{}{ABORTED_LINE}{} (job {}, attempt {})",
            at.to_rfc3339_opts(SecondsFormat::Micros, true),
            self.execution,
            self.job,
            self.attempt
        );
        let (pool, execution) = (self.pool.clone(), self.execution);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            // Bounded: on a connection that went silent (tests/silence.rs) it would never
            // answer, and the pool's close at shutdown would wait for it for ever. The line
            // printed above is what the audit reads; this row is a convenience.
            runtime.spawn(async move {
                let write = sqlx::query(ABORTED).bind(execution).bind(at).execute(&pool);
                let _ = tokio::time::timeout(Duration::from_secs(5), write).await;
            });
        }
    }
}

impl Job for ChaosWork {
    const KIND: &'static str = "chaos.work";
    const OPTIONS: JobOptions = JobOptions {
        queue: QUEUE,
        max_attempts: MAX_ATTEMPTS,
        timeout: Duration::from_secs(10),
        lease: LEASE,
        backoff: Backoff::new(Duration::from_millis(10), Duration::from_millis(100)),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let ledger = ctx.state::<Ledger>()?;
        let execution = ctx.lease().token;
        let mut unfinished = Unfinished {
            pool: ledger.pool.clone(),
            execution,
            job: ctx.id(),
            attempt: ctx.attempt(),
            done: false,
        };
        sqlx::query(START)
            .bind(ctx.id())
            .bind(ctx.attempt())
            .bind(&ledger.worker)
            .bind(execution)
            .execute(&ledger.pool)
            .await
            .map_err(|e| JobError::retryable(format!("ledger: recording the start: {e}")))?;
        let fails = self.fails_at(ctx.attempt());
        if self.blocking {
            std::thread::sleep(self.work(ctx.attempt()));
        } else {
            tokio::time::sleep(self.work(ctx.attempt())).await;
        }
        sqlx::query(FINISH)
            .bind(execution)
            .bind(if fails { "error" } else { "ok" })
            .execute(&ledger.pool)
            .await
            .map_err(|e| JobError::retryable(format!("ledger: recording the end: {e}")))?;
        unfinished.done = true;
        if fails {
            return Err(JobError::retryable(format!(
                "planned failure of attempt {} (fails up to attempt {})",
                ctx.attempt(),
                self.fail_first
            )));
        }
        // The effect and the completion commit together, guarded by the lease: a worker that
        // lost its lease (paused past it, say) commits neither.
        let mut tx = ledger
            .pool
            .begin()
            .await
            .map_err(|e| JobError::retryable(format!("effect: begin: {e}")))?;
        sqlx::query(EFFECT)
            .bind(ctx.id())
            .bind(ctx.attempt())
            .bind(&ledger.worker)
            .bind(ctx.lease().token)
            .execute(&mut *tx)
            .await
            .map_err(|e| JobError::retryable(format!("effect: insert: {e}")))?;
        job_postgres::complete_in(&mut tx, &ctx).await?;
        tx.commit()
            .await
            .map_err(|e| JobError::retryable(format!("effect: commit: {e}")))?;
        Ok(())
    }
}

/// The rate limit of [`ChaosRated`]: at most 5 attempts start in any 500 ms, per rate key.
pub const RATED_LIMIT: RateLimit = RateLimit::new(5, Duration::from_millis(500));

/// Rate-limited chaos work (`tests/rate_limits.rs`): at most [`RATED_LIMIT`] attempts start
/// in any window, for each rate key (`tenant:<key>`, from the payload; jobs without a key
/// share one window). Its handler is its `work`'s ([`ChaosWork`]): recorded in the same
/// ledger, failing as planned, its effect committed with its completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChaosRated {
    /// Its rate key's number, if it has one: see [`ChaosRated::rate_key_of`].
    pub key: Option<u32>,
    /// What an attempt does.
    pub work: ChaosWork,
}

impl ChaosRated {
    /// The rate key of key number `key`.
    pub fn rate_key_of(key: u32) -> String {
        format!("tenant:{key}")
    }
}

impl Job for ChaosRated {
    const KIND: &'static str = "chaos.rated";
    const OPTIONS: JobOptions = JobOptions {
        rate: Some(RATED_LIMIT),
        ..ChaosWork::OPTIONS
    };

    fn rate_key(&self) -> Option<String> {
        self.key.map(ChaosRated::rate_key_of)
    }

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        self.work.perform(ctx).await
    }
}

/// The chaos worker: [`ChaosWork`] on [`QUEUE`] with `concurrency` slots and its `prefetch`, polling every [`POLL_INTERVAL`], rescuing every [`RESCUE_EVERY`], its
/// backoff jitter seeded with `seed`. With `rated` it runs [`ChaosRated`] too; only the
/// rate-limit test asks for it, because a worker that runs a rate-limited kind claims every
/// kind in a transaction under that kind's advisory lock (claims of all the workers are then
/// serialized, and a kill between a claim and its commit takes the claim back), and the other
/// chaos tests are about the plain claim. `store_timeout`, when given, replaces the library's
/// `WorkerConfig::store_timeout`.
pub fn worker(
    store: PgStore,
    id: &str,
    concurrency: usize,
    prefetch: Prefetch,
    seed: u64,
    rated: bool,
    store_timeout: Option<Duration>,
) -> Result<Worker<PgStore>, BuildError> {
    let mut config = WorkerConfig::default();
    if let Some(timeout) = store_timeout {
        config.store_timeout = timeout;
    }
    config.prefetch = prefetch;
    config.id = id.to_owned();
    config.poll_interval = POLL_INTERVAL;
    config.drain_timeout = Duration::from_secs(5);
    config.rescuer.interval = RESCUE_EVERY;
    config.rng_seed = Some(seed);
    let ledger = Ledger {
        pool: store.pool().clone(),
        worker: id.to_owned(),
    };
    let builder = Worker::builder(store).register::<ChaosWork>();
    let builder = if rated {
        builder.register::<ChaosRated>()
    } else {
        builder
    };
    builder
        .queue(QUEUE, concurrency)
        .state(ledger)
        .config(config)
        .build()
}
