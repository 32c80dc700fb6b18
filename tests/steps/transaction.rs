//! Completing a job in the handler's own transaction: its rows and the completion commit
//! together or not at all, guarded by the lease.

use std::time::Duration;

use job::{Job, JobContext, JobError, JobId, JobOptions, JobState};
use serde::{Deserialize, Serialize};
use sqlx::PgPool;

use crate::common::*;
use crate::support::*;

/// What [`Ship`] does after writing its row and completing the job in its transaction.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub enum Then {
    /// Commits, then keeps running past a few heartbeats.
    CommitAndLinger,
    /// Panics on attempt 1 before committing (the transaction is dropped); commits after.
    PanicBeforeCommitOnce,
    /// Has its lease taken before it completes the job.
    LoseTheLease,
}

/// Writes a shipment row and completes itself in the same transaction.
#[derive(Debug, Serialize, Deserialize)]
pub struct Ship {
    pub then: Then,
}

impl Job for Ship {
    const KIND: &'static str = "steps.ship";
    const OPTIONS: JobOptions = JobOptions {
        // Long enough that a loaded machine never lets it expire by accident; heartbeats
        // still come every 100 ms (see `ship`).
        lease: Duration::from_secs(1),
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        let pool = ctx.state::<PgPool>()?;
        effects.executed(ctx.id());
        let mut tx = pool.begin().await?;
        sqlx::query("INSERT INTO shipments (job_id, attempt) VALUES ($1, $2)")
            .bind(ctx.id())
            .bind(ctx.attempt())
            .execute(&mut *tx)
            .await?;
        if let Then::LoseTheLease = self.then {
            // Past the lease keeper's first heartbeat, which comes as it starts (see the test).
            tokio::time::sleep(Duration::from_secs(1)).await;
            steal_lease(pool, ctx.id()).await;
        }
        let completed = job_postgres::complete_in(&mut tx, &ctx).await;
        effects.saw(ctx.id(), format!("{completed:?}"));
        completed?;
        match self.then {
            Then::PanicBeforeCommitOnce if ctx.attempt() == 1 => {
                panic!("killed between the write and the commit")
            }
            Then::CommitAndLinger => {
                tx.commit().await?;
                // Past a few heartbeats (every 100 ms), which find the job no longer running.
                tokio::time::sleep(Duration::from_millis(350)).await;
            }
            _ => tx.commit().await?,
        }
        Ok(())
    }
}

async fn shipments(pool: &PgPool, id: JobId) -> Vec<i32> {
    sqlx::query_scalar("SELECT attempt FROM shipments WHERE job_id = $1")
        .bind(id)
        .fetch_all(pool)
        .await
        .unwrap()
}

async fn setup() -> (Harness, Effects) {
    let h = Harness::new().await;
    sqlx::query("CREATE TABLE shipments (job_id bigint PRIMARY KEY, attempt integer NOT NULL)")
        .execute(h.store.pool())
        .await
        .unwrap();
    (h, Effects::default())
}

/// A fresh database, one `Ship` job that ends as `then`, and a worker running it, renewing
/// its lease every 100 ms.
async fn ship(then: Then) -> (Harness, Effects, JobId, job::WorkerHandle) {
    ship_with(then, |c| {
        c.heartbeat_interval = Some(Duration::from_millis(100));
    })
    .await
}

/// [`ship`] with the worker's configuration set by `configure`.
async fn ship_with(
    then: Then,
    configure: impl FnOnce(&mut job::WorkerConfig),
) -> (Harness, Effects, JobId, job::WorkerHandle) {
    let (h, effects) = setup().await;
    let id = enqueue(&h.store, Ship { then }).await;
    let worker = steps_worker(&h.store, &effects)
        .configure(configure)
        .register::<Ship>()
        .build()
        .unwrap()
        .start();
    (h, effects, id, worker)
}

#[tokio::test]
async fn a_job_completed_in_the_handlers_transaction_commits_with_its_rows_and_no_lease_is_lost() {
    let (h, effects, id, worker) = ship(Then::CommitAndLinger).await;
    let row = h.reaches(id, JobState::Completed).await;
    eventually("the execution to end", || async {
        (worker.in_flight() == 0).then_some(())
    })
    .await;
    let stats = worker.shutdown().await.stats;
    assert_eq!(shipments(h.store.pool(), id).await, [1]);
    assert_eq!((row.attempt, row.lock_token), (1, None));
    assert!(row.finalized_at.is_some() && row.errors.is_empty());
    assert_eq!(
        stats.lease_lost, 0,
        "finalized by the handler is not a lost lease"
    );
    assert_eq!(stats.completed, 1);
    assert_eq!(effects.executions(id), 1);
}

#[tokio::test]
async fn a_crash_between_the_handlers_write_and_its_commit_leaves_neither_the_row_nor_the_completion(
) {
    let (h, _effects, id, worker) = ship(Then::PanicBeforeCommitOnce).await;
    let row = h.reaches(id, JobState::Completed).await;
    let stats = worker.shutdown().await.stats;
    // Attempt 1's shipment and completion rolled back together, so the worker's own finalize
    // of the panic applied (a retry); attempt 2 committed both.
    assert_eq!(shipments(h.store.pool(), id).await, [2]);
    assert_eq!(row.attempt, 2);
    assert_eq!(row.errors.len(), 1);
    assert_eq!(row.errors[0].class, "panic");
    assert_eq!(row.errors[0].attempt, 1);
    assert_eq!((stats.retried, stats.lease_lost), (1, 0));
}

#[tokio::test]
async fn a_stale_lease_commits_nothing_of_the_handlers_transaction() {
    // A heartbeat between the steal and `complete_in`'s answer would find the lease gone and
    // stop the handler before it could say what `complete_in` answered (a CI run did that,
    // and the test waited in vain). The keeper's first heartbeat comes as it starts, the next
    // 10 s later, and the handler steals its lease a second after it starts: no heartbeat
    // falls between. A heartbeat's fence of a handler whose lease was taken is tested in
    // `tests/worker/leases.rs` (`a_worker_that_loses_its_lease_stops_and_writes_nothing`).
    let (h, effects, id, worker) = ship_with(Then::LoseTheLease, |c| {
        c.lease = Some(Duration::from_secs(30));
        c.heartbeat_interval = Some(Duration::from_secs(10));
    })
    .await;
    let seen = eventually("complete_in to answer", || async { effects.seen(id).pop() }).await;
    assert!(seen.contains("LeaseLost"), "{seen}");
    eventually("the worker to drop the stale outcome", || async {
        (worker.stats().lease_lost == 1).then_some(())
    })
    .await;
    // Nothing more happens under the stale lease (the thief's, an hour long): shut down.
    worker.shutdown().await;
    assert!(
        shipments(h.store.pool(), id).await.is_empty(),
        "the handler's row rolled back"
    );
    let row = h.row(id).await;
    assert_eq!(
        row.state,
        JobState::Running,
        "not completed by the stale holder"
    );
    assert!(
        row.errors.is_empty(),
        "and its failure was not recorded either"
    );
}

/// Completes itself in its transaction, then holds the transaction open until the lease of
/// the running [`RunAlongside`] job has been renewed (seen at twelve values) and 3.5 s have
/// passed (longer than that job's lease), or 30 s have passed, then commits.
#[derive(Debug, Serialize, Deserialize)]
pub struct HoldOpen {}

impl Job for HoldOpen {
    const KIND: &'static str = "steps.hold_open";
    const OPTIONS: JobOptions = JobOptions {
        // Its own row is held, so its lease is not renewed while it holds it: long enough.
        lease: Duration::from_secs(30),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        let pool = ctx.state::<PgPool>()?;
        let mut tx = pool.begin().await?;
        job_postgres::complete_in(&mut tx, &ctx).await?;
        let mut leases = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        // Longer than the other job's lease of 3 s, whatever the heartbeat period.
        let held_for = tokio::time::Instant::now() + Duration::from_millis(3500);
        while (leases.len() < 12 || tokio::time::Instant::now() < held_for)
            && tokio::time::Instant::now() < deadline
        {
            let until: Option<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
                "SELECT locked_until FROM job.jobs \
                 WHERE kind = 'steps.run_alongside' AND state = 'running'",
            )
            .fetch_optional(pool)
            .await?
            .flatten();
            if until.is_some() && leases.last() != Some(&until) {
                leases.push(until);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let seen = leases.len();
        effects.saw(
            ctx.id(),
            if seen >= 12 {
                "renewed throughout".to_owned()
            } else {
                format!("{seen} leases seen")
            },
        );
        tx.commit().await?;
        Ok(())
    }
}

/// Runs until no [`HoldOpen`] job waits or runs.
#[derive(Debug, Serialize, Deserialize)]
pub struct RunAlongside {}

impl Job for RunAlongside {
    const KIND: &'static str = "steps.run_alongside";
    // Three seconds, as `StepLoop`'s: only a heartbeat held up by the other row, not a test
    // machine starved of CPU, may let it run short (with 1 s, a loaded CI run fenced it once:
    // the fence comes when a third of the lease is left, and a heartbeat every 100 ms is
    // allowed 150 ms before what it renewed is discarded).
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_secs(3),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        let pool = ctx.state::<PgPool>()?;
        effects.executed(ctx.id());
        loop {
            let holding: bool = sqlx::query_scalar(
                "SELECT EXISTS (SELECT 1 FROM job.jobs WHERE kind = 'steps.hold_open' \
                 AND state IN ('available', 'running'))",
            )
            .fetch_one(pool)
            .await?;
            if !holding {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A handler that holds its `complete_in` transaction open holds its own job's row locked; the
/// worker's heartbeat goes on renewing the other jobs' leases meanwhile, instead of waiting for
/// that row (which would stop every execution of the worker once their leases ran short).
#[tokio::test]
async fn a_handler_holding_its_completing_transaction_open_does_not_hold_up_other_leases() {
    let (h, effects) = setup().await;
    // The held row first (a heartbeat waiting for it renews nothing), then last (a heartbeat
    // waiting for it holds the other row locked as well); heartbeats every 100 ms, then every
    // 30 ms, shorter than the wait for a held row (job::HEARTBEAT_BUSY_WAIT), which must not
    // cost the renewals the heartbeat made.
    for (held_first, every) in [(true, 100), (false, 100), (true, 30)] {
        let (hold, alongside) = if held_first {
            let hold = enqueue(&h.store, HoldOpen {}).await;
            (hold, enqueue(&h.store, RunAlongside {}).await)
        } else {
            let alongside = enqueue(&h.store, RunAlongside {}).await;
            (enqueue(&h.store, HoldOpen {}).await, alongside)
        };
        let worker = steps_worker(&h.store, &effects)
            .configure(|c| c.heartbeat_interval = Some(Duration::from_millis(every)))
            .register::<HoldOpen>()
            .register::<RunAlongside>()
            .build()
            .unwrap()
            .start();
        h.reaches(hold, JobState::Completed).await;
        h.reaches(alongside, JobState::Completed).await;
        let stats = worker.shutdown().await.stats;
        assert_eq!(
            effects.seen(hold),
            ["renewed throughout"],
            "held first: {held_first}, every {every} ms: the other job's lease was renewed"
        );
        assert_eq!(
            (stats.fenced, stats.lease_lost),
            (0, 0),
            "held first: {held_first}, every {every} ms"
        );
        assert_eq!(
            effects.executions(alongside),
            1,
            "held first: {held_first}, every {every} ms"
        );
    }
}

/// Records durable steps back to back for `secs` seconds (or until it has recorded as many as
/// a job may, `MAX_STEPS`), then completes.
#[derive(Debug, Serialize, Deserialize)]
pub struct StepLoop {
    pub secs: u64,
}

impl Job for StepLoop {
    const KIND: &'static str = "steps.step_loop";
    // Three seconds, so that only a heartbeat that gives up on the row, not a test machine
    // starved of CPU for a second, lets the lease run out (a 1 s lease was fenced under load).
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_secs(3),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        effects.executed(ctx.id());
        let end = tokio::time::Instant::now() + Duration::from_secs(self.secs);
        let mut i = 0u64;
        while tokio::time::Instant::now() < end && i < job::MAX_STEPS as u64 {
            ctx.step(&format!("s{i}"), || async { Ok(i) }).await?;
            i += 1;
        }
        Ok(())
    }
}

/// Recording a step holds the job's row locked for a moment (`FOR SHARE` until its commit,
/// and the foreign key's `FOR KEY SHARE`); a handler that records steps back to back holds it
/// most of the time. The heartbeat waits for such a lock a moment instead of giving up on the
/// row, so the lease is renewed and the execution is never fenced.
#[tokio::test]
async fn a_handler_recording_steps_back_to_back_keeps_its_lease() {
    let (h, effects) = setup().await;
    // Well past two leases of back-to-back steps.
    let id = enqueue(&h.store, StepLoop { secs: 7 }).await;
    let worker = steps_worker(&h.store, &effects)
        .register::<StepLoop>()
        .build()
        .unwrap()
        .start();
    let row = h.reaches(id, JobState::Completed).await;
    let stats = worker.shutdown().await.stats;
    assert_eq!((stats.fenced, stats.lease_lost), (0, 0), "{stats:?}");
    assert_eq!((row.attempt, effects.executions(id)), (1, 1));
}

/// Reports progress, then holds its own row `FOR SHARE` for 300 ms (past a few heartbeats of
/// 100 ms, within its lease), then waits until the report is stored.
#[derive(Debug, Serialize, Deserialize)]
pub struct ReportWhileHeld {}

impl Job for ReportWhileHeld {
    const KIND: &'static str = "steps.report_while_held";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_secs(3),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let pool = ctx.state::<PgPool>()?;
        ctx.progress_value(&serde_json::json!({"done": 7}));
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT 1 FROM job.jobs WHERE id = $1 FOR SHARE")
            .bind(ctx.id())
            .execute(&mut *tx)
            .await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        tx.commit().await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while tokio::time::Instant::now() < deadline {
            let stored: Option<serde_json::Value> =
                sqlx::query_scalar("SELECT progress FROM job.jobs WHERE id = $1")
                    .bind(ctx.id())
                    .fetch_one(pool)
                    .await?;
            if stored.is_some() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(JobError::terminal("the progress report was never stored"))
    }
}

/// A progress report whose row another transaction held when the lease keeper wrote it is
/// written with a later heartbeat, not dropped.
#[tokio::test]
async fn a_progress_report_not_written_because_its_row_was_held_is_written_later() {
    let (h, effects) = setup().await;
    let id = enqueue(&h.store, ReportWhileHeld {}).await;
    let worker = steps_worker(&h.store, &effects)
        .configure(|c| c.heartbeat_interval = Some(Duration::from_millis(100)))
        .register::<ReportWhileHeld>()
        .build()
        .unwrap()
        .start();
    let row = h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
    assert!(row.errors.is_empty(), "{:?}", row.errors);
    assert_eq!(row.attempt, 1);
}

/// Completes itself in its own transaction, commits, then does the work that follows a commit
/// (announcing the shipment, say): 1 s, over several heartbeats.
#[derive(Debug, Serialize, Deserialize)]
pub struct CommitThenPublish {}

impl Job for CommitThenPublish {
    const KIND: &'static str = "steps.commit_then_publish";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_secs(1),
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        let pool = ctx.state::<PgPool>()?;
        let mut tx = pool.begin().await?;
        job_postgres::complete_in(&mut tx, &ctx).await?;
        tx.commit().await?;
        effects.happen(ctx.id(), "committed");
        tokio::time::sleep(Duration::from_secs(1)).await;
        effects.happen(ctx.id(), "published");
        Ok(())
    }
}

/// The handler's code after its own transaction completed the job runs to its end: the next
/// heartbeat finds the lease gone, reads the row finished, and leaves the code alone. It used
/// to stop it, dropping it at its next `.await`, silently: what follows a commit never ran.
#[tokio::test]
async fn code_after_a_complete_in_commit_runs_to_its_end() {
    let (h, effects) = setup().await;
    let id = enqueue(&h.store, CommitThenPublish {}).await;
    // The heartbeat that finds the lease gone reads the row within its period: 250 ms, more
    // than a loaded run may take to answer (at 50 ms, a late answer would stop the code).
    let worker = steps_worker(&h.store, &effects)
        .configure(|c| c.heartbeat_interval = Some(Duration::from_millis(250)))
        .register::<CommitThenPublish>()
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Completed).await;
    eventually("the execution to end", || async {
        (worker.in_flight() == 0).then_some(())
    })
    .await;
    let stats = worker.shutdown().await.stats;
    assert_eq!(effects.count(id, "published"), 1);
    assert_eq!((stats.completed, stats.lease_lost), (1, 0), "{stats:?}");
}

/// Completes itself in a REPEATABLE READ transaction that outlasts a heartbeat.
#[derive(Debug, Serialize, Deserialize)]
pub struct RepeatableComplete {}

impl Job for RepeatableComplete {
    const KIND: &'static str = "steps.repeatable_complete";
    const OPTIONS: JobOptions = JobOptions {
        lease: Duration::from_secs(1),
        max_attempts: 1,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let effects = ctx.state::<Effects>()?;
        let pool = ctx.state::<PgPool>()?;
        let mut tx = pool.begin().await?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            .execute(&mut *tx)
            .await?;
        sqlx::query("SELECT 1").execute(&mut *tx).await?;
        // A heartbeat (every 50 ms) renews the lease on the job's row meanwhile: a whole second,
        // so that one does even on a loaded machine.
        tokio::time::sleep(Duration::from_secs(1)).await;
        match job_postgres::complete_in(&mut tx, &ctx).await {
            Ok(()) => effects.saw(ctx.id(), "completed".into()),
            Err(e) => effects.saw(ctx.id(), e.to_string()),
        }
        Ok(())
    }
}

/// `complete_in` under REPEATABLE READ conflicts with the lease the worker renewed on the job's
/// row after the transaction's snapshot (40001), and its error says what to do.
#[tokio::test]
async fn complete_in_under_repeatable_read_says_it_needs_read_committed() {
    let (h, effects) = setup().await;
    let id = enqueue(&h.store, RepeatableComplete {}).await;
    let worker = steps_worker(&h.store, &effects)
        .configure(|c| c.heartbeat_interval = Some(Duration::from_millis(50)))
        .register::<RepeatableComplete>()
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
    let seen = effects.seen(id);
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].contains("could not serialize access") && seen[0].contains("READ COMMITTED"),
        "{seen:?}"
    );
}
