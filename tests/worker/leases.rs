//! The lease protocol: rescue of expired leases only, guarded finalize, lost leases and
//! self-fencing.

use std::time::Duration;

use job::{BoxFuture, Call, JobState, Layered, Returned, Store, StoreError, StoreLayer};
use job_core::{ClaimKind, ClaimRequest, ClaimedJob, Finalize, Finalized, Outcome};
use job_core::{Rescuer, RescuerConfig};

use crate::common::*;

/// Claims like a worker that then dies: nothing renews or finalizes the lease.
async fn claim_and_die(h: &Harness, kind: &str, lease: Duration) -> ClaimedJob {
    // A rescued job is retryable: it becomes available through the stager.
    h.store.stage_due(1000).await.unwrap();
    let mut jobs = h
        .store
        .claim(&ClaimRequest {
            queue: "default".into(),
            kinds: vec![ClaimKind {
                kind: kind.into(),
                max_version: 1,
                lease,
                concurrency: None,
                rate: None,
            }],
            limit: 1,
            worker_id: "doomed".into(),
        })
        .await
        .unwrap();
    assert_eq!(jobs.len(), 1, "the job should be claimable");
    jobs.remove(0)
}

async fn wait_expired(h: &Harness, id: i64) {
    eventually("the lease to expire in database time", || async {
        let expired: bool =
            sqlx::query_scalar("SELECT locked_until < now() FROM job.jobs WHERE id = $1")
                .bind(id)
                .fetch_one(h.store.pool())
                .await
                .unwrap();
        expired.then_some(())
    })
    .await;
}

#[tokio::test]
async fn an_expired_lease_is_rescued_and_run_again() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    let dead = claim_and_die(&h, "test.noop", Duration::from_millis(50)).await;
    wait_expired(&h, id).await;
    let mut config = job::WorkerConfig::default();
    config.rescuer.interval = Duration::from_millis(50);
    config.poll_interval = Duration::from_millis(50);
    let worker = h.worker().config(config).build().unwrap().start();
    let row = h.reaches(id, JobState::Completed).await;
    assert_eq!(row.attempt, 2, "the dead worker's attempt is counted");
    assert_eq!(row.errors.len(), 1);
    assert_eq!(row.errors[0].class, "lease_expired");
    assert_eq!(h.ledger.runs(id), 1);
    worker.shutdown().await;
    // The dead worker's token can no longer finalize anything.
    let late = h
        .store
        .finalize(&[Finalize {
            result: None,
            lease: dead.lease,
            outcome: Outcome::Complete,
        }])
        .await
        .unwrap();
    assert_eq!(late, [Finalized::LeaseLost]);
}

#[tokio::test]
async fn a_live_lease_is_never_rescued() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    let held = claim_and_die(&h, "test.noop", Duration::from_secs(600)).await;
    let rescued = Rescuer::new(h.store.clone(), RescuerConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!((rescued.retried, rescued.discarded), (0, 0));
    let row = h.row(id).await;
    assert_eq!(row.state, JobState::Running);
    assert_eq!(row.lock_token, Some(held.lease.token));
    assert_eq!(row.attempt, 1);
}

#[tokio::test]
async fn a_stale_token_cannot_finalize() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    let first = claim_and_die(&h, "test.noop", Duration::from_millis(50)).await;
    wait_expired(&h, id).await;
    let rescued = Rescuer::new(h.store.clone(), RescuerConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(rescued.retried, 1);
    let second = claim_and_die(&h, "test.noop", Duration::from_secs(600)).await;
    assert_ne!(first.lease.token, second.lease.token);
    let before = h.row(id).await;
    let stale = h
        .store
        .finalize(&[Finalize {
            result: None,
            lease: first.lease,
            outcome: Outcome::Complete,
        }])
        .await
        .unwrap();
    assert_eq!(stale, [Finalized::LeaseLost]);
    assert_eq!(h.row(id).await, before, "a stale finalize changes nothing");
}

#[tokio::test]
async fn a_worker_that_loses_its_lease_stops_and_writes_nothing() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, Parked { n: 1 }).await;
    // A 3 s lease: the heartbeat (every second) must find the lease lost before the fence
    // point (2 s), which `Parked`'s 900 ms left a loaded run 300 ms to do.
    let worker = h
        .worker()
        .configure(|c| c.lease = Some(Duration::from_secs(3)))
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Running).await;
    // Another worker takes the job over (as after a rescue and a new claim).
    let thief: uuid::Uuid = sqlx::query_scalar(
        "UPDATE job.jobs SET lock_token = gen_random_uuid(), locked_by = 'thief' WHERE id = $1 RETURNING lock_token",
    )
    .bind(id)
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    eventually("the worker to notice the lost lease", || async {
        (worker.stats().lease_lost >= 1).then_some(())
    })
    .await;
    // The execution is stopped with the count; its slot is freed once its task has unwound.
    eventually("the stopped execution to leave the worker", || async {
        (worker.in_flight() == 0).then_some(())
    })
    .await;
    assert_eq!(
        worker.stats().fenced,
        0,
        "stopped by the heartbeat's report at once, not by fencing later"
    );
    worker.shutdown().await;
    let row = h.row(id).await;
    assert_eq!(row.state, JobState::Running);
    assert_eq!(
        row.lock_token,
        Some(thief),
        "the new owner's lease is untouched"
    );
    assert!(row.errors.is_empty(), "the old execution wrote nothing");
}

#[tokio::test]
async fn a_worker_that_cannot_renew_fences_itself_before_the_lease_expires() {
    let h = Harness::new().await;
    let id = enqueue(&h.store, Parked { n: 1 }).await;
    let worker = h.worker().build().unwrap().start();
    h.reaches(id, JobState::Running).await;
    // Hold the row lock so every heartbeat blocks, as if the database stopped answering.
    let mut blocker = h.store.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM job.jobs WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *blocker)
        .await
        .unwrap();
    eventually("the worker to fence the execution", || async {
        (worker.stats().fenced >= 1).then_some(())
    })
    .await;
    // Fenced while the database still shows the lease as live: no one else could have had it.
    let still_live: bool =
        sqlx::query_scalar("SELECT locked_until > now() FROM job.jobs WHERE id = $1")
            .bind(id)
            .fetch_one(&mut *blocker)
            .await
            .unwrap();
    assert!(still_live, "the worker must stop before its lease expires");
    blocker.rollback().await.unwrap();
    // The fence stops the execution at once; its slot is freed once its task has unwound.
    eventually("the fenced execution to leave the worker", || async {
        (worker.in_flight() == 0).then_some(())
    })
    .await;
    let stats = worker.shutdown().await.stats;
    assert_eq!(
        (stats.fenced, stats.lease_lost),
        (1, 0),
        "a fenced execution is counted once, as fenced: the store never reported its lease lost"
    );
    // No outcome was written after fencing: once its code ended, the lease the store still
    // held was given back, the attempt not counted (and given back again by the shutdown,
    // should the worker have claimed it again meanwhile).
    let row = h.row(id).await;
    assert_eq!((row.state, row.attempt), (JobState::Available, 0));
    assert!(!row.errors.is_empty());
    assert!(
        row.errors.iter().all(|e| e.class == "released"),
        "{:?}",
        row.errors
    );
}

/// A store layer whose heartbeats panic, from the first on (a bug in a layer, say).
#[derive(Clone)]
struct PanickingHeartbeats;

impl StoreLayer for PanickingHeartbeats {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        if call.name == "heartbeat" {
            return Box::pin(async { panic!("injected: the heartbeat panicked") });
        }
        run
    }
}

#[tokio::test]
async fn a_heartbeat_that_panics_does_not_stop_fencing() {
    // The lease keeper is the only thing between a lease that runs out and a second execution
    // on another worker. A panic in it used to end its thread: no renewal, and no fencing, so
    // the execution ran on past its lease.
    let h = Harness::new().await;
    let id = enqueue(&h.store, Parked { n: 1 }).await;
    let store = Layered::new(h.store.clone(), PanickingHeartbeats);
    // A 3 s lease: fenced at 2 s, the row is read before its lease expires at 3 s even on a
    // loaded run (with `Parked`'s 900 ms, 300 ms less the watch's tick).
    let worker = worker(&store, &h.ledger)
        .configure(|c| c.lease = Some(Duration::from_secs(3)))
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Running).await;
    eventually("the worker to fence the execution", || async {
        (worker.stats().fenced >= 1).then_some(())
    })
    .await;
    // Still live, or given back by the worker once the fenced code ended: never expired.
    let still_live: bool = sqlx::query_scalar(
        "SELECT locked_until IS NULL OR locked_until > now() FROM job.jobs WHERE id = $1",
    )
    .bind(id)
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    assert!(still_live, "the worker must stop before its lease expires");
    eventually("the fenced execution to leave the worker", || async {
        (worker.in_flight() == 0).then_some(())
    })
    .await;
    worker.shutdown().await;
}

/// A store layer whose first finalize panics.
#[derive(Clone, Default)]
struct FirstFinalizePanics(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl StoreLayer for FirstFinalizePanics {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        if call.name == "finalize" && !self.0.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(async { panic!("injected: the finalize panicked") });
        }
        run
    }
}

#[tokio::test]
async fn a_finalize_that_panics_does_not_stop_the_outcomes_after_it() {
    // The completer writes every outcome of the worker. A panic in it used to end its task:
    // the outcomes waited for ever, their leases renewed by the keeper, never rescued.
    let h = Harness::new().await;
    let first = enqueue(&h.store, Noop { n: 1 }).await;
    let store = Layered::new(h.store.clone(), FirstFinalizePanics::default());
    let worker = worker(&store, &h.ledger).build().unwrap().start();
    h.reaches(first, JobState::Completed).await;
    let second = enqueue(&h.store, Noop { n: 2 }).await;
    h.reaches(second, JobState::Completed).await;
    // The row commits before the completer has the answer and counts it.
    eventually("both outcomes to be counted", || async {
        (worker.stats().completed >= 2).then_some(())
    })
    .await;
    assert_eq!(worker.stats().completed, 2);
    worker.shutdown().await;
}

/// A store layer whose first finalize, once committed, answers only after `beats` more
/// heartbeats: the completer's answer held up (a runtime blocked by a handler), while the
/// lease keeper, on its own thread, finds the lease gone.
#[derive(Clone, Default)]
struct SlowFirstFinalizeAnswer {
    heartbeats: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    delayed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl StoreLayer for SlowFirstFinalizeAnswer {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        use std::sync::atomic::Ordering::SeqCst;
        match call.name {
            "heartbeat" => Box::pin(async move {
                let answer = run.await;
                self.heartbeats.fetch_add(1, SeqCst);
                answer
            }),
            "finalize" if !self.delayed.swap(true, SeqCst) => Box::pin(async move {
                let answer = run.await;
                // Past the fencing margin: a lease not renewed for 4 periods would be fenced.
                let until = self.heartbeats.load(SeqCst) + 4;
                while self.heartbeats.load(SeqCst) < until {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                answer
            }),
            _ => run,
        }
    }
}

#[tokio::test]
async fn an_outcome_written_while_its_answer_is_held_up_is_counted_once_as_completed() {
    // The heartbeat finds the lease gone because the finalize committed; the completer has
    // not heard back yet. The keeper must leave that execution to the completer: fencing it
    // counted a job that ended well as fenced.
    let h = Harness::new().await;
    let gate = Gate::default();
    gate.open();
    let store = Layered::new(h.store.clone(), SlowFirstFinalizeAnswer::default());
    let worker = worker(&store, &h.ledger)
        .state(gate.clone())
        .build()
        .unwrap()
        .start();
    // Runs on meanwhile, so that the keeper keeps beating (every 300 ms, a third of
    // `Parked`'s lease).
    let sleepy = enqueue(&h.store, Sleepy { ms: 3000 }).await;
    h.reaches(sleepy, JobState::Running).await;
    let parked = enqueue(&h.store, Parked { n: 1 }).await;
    h.reaches(parked, JobState::Completed).await;
    h.reaches(sleepy, JobState::Completed).await;
    eventually("the completer to hear back", || async {
        (worker.stats().completed == 2).then_some(())
    })
    .await;
    let stats = worker.shutdown().await.stats;
    assert_eq!(
        (stats.completed, stats.fenced, stats.lease_lost),
        (2, 0, 0),
        "{stats:?}"
    );
}

/// A store layer whose first `n` claims panic; it keeps when each claim came.
#[derive(Clone, Default)]
struct PanickingClaims {
    calls: std::sync::Arc<std::sync::Mutex<Vec<std::time::Instant>>>,
}

impl StoreLayer for PanickingClaims {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        if call.name != "claim" {
            return run;
        }
        let mut calls = self.calls.lock().unwrap();
        calls.push(std::time::Instant::now());
        if calls.len() <= 6 {
            return Box::pin(async { panic!("injected: the claim panicked") });
        }
        run
    }
}

#[tokio::test]
async fn a_claim_that_panics_is_paused_after_like_a_failed_one_and_claiming_goes_on() {
    // A claim's task that panicked used to be claimed again at once: a claim that always
    // panics spun. Six panics in a row now cost at least pauses of 50, 100 and 150 ms (50 ms
    // more per failure, up to the poll interval), even with two claims in flight at once.
    let h = Harness::new().await;
    let layer = PanickingClaims::default();
    let store = Layered::new(h.store.clone(), layer.clone());
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    let worker = worker(&store, &h.ledger)
        .poll_interval(Duration::from_millis(200))
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Completed).await;
    worker.shutdown().await;
    let calls = layer.calls.lock().unwrap().clone();
    assert!(calls.len() >= 7, "{} claims", calls.len());
    let panicking = calls[6] - calls[0];
    assert!(
        panicking >= Duration::from_millis(250),
        "six panicking claims in {panicking:?}: no pause after them"
    );
}

/// A store layer that loses the answer of every other finalize (the first of each pair): the
/// outcomes are written, then the call fails as a broken connection would. With `heartbeats`,
/// the failure comes only after that many heartbeats (or 3 s), which find the written jobs'
/// leases gone.
#[derive(Clone, Default)]
struct LostFinalizeAnswers {
    heartbeats: usize,
    /// The first finalize is refused (nothing written): the completer writes that outcome
    /// alone, and the next answer is lost.
    refuse_first: bool,
    beats: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl StoreLayer for LostFinalizeAnswers {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        use std::sync::atomic::Ordering::SeqCst;
        match call.name {
            "heartbeat" => Box::pin(async move {
                let answer = run.await;
                self.beats.fetch_add(1, SeqCst);
                answer
            }),
            "finalize" if self.refuse_first && self.calls.load(SeqCst) == 0 => {
                self.calls.fetch_add(1, SeqCst);
                Box::pin(async { Err(StoreError::refused("injected: the finalize was refused")) })
            }
            "finalize"
                if (self.calls.fetch_add(1, SeqCst) - usize::from(self.refuse_first)) % 2 == 0 =>
            {
                Box::pin(async move {
                    let written = run.await;
                    // Or 3 s, for the last outcome, after which nothing runs that is renewed.
                    let until = self.beats.load(SeqCst) + self.heartbeats;
                    let give_up = tokio::time::Instant::now() + Duration::from_secs(3);
                    while self.beats.load(SeqCst) < until && tokio::time::Instant::now() < give_up {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    written?;
                    Err(StoreError::new("injected: the finalize's answer was lost"))
                })
            }
            _ => run,
        }
    }
}

/// Pauses its own kind, then fails: its retry is not claimed again (a retry's backoff has full
/// jitter, so it may be due at once), and its row shows the retry until the test ends.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct RetriesPaused {}

impl job::Job for RetriesPaused {
    const KIND: &'static str = "test.retries_paused";

    async fn perform(self, ctx: job::JobContext) -> Result<(), job::JobError> {
        use job::Admin;
        let store = ctx.state::<job::PgStore>()?;
        store.pause(&job::Pause::Kind(Self::KIND.into())).await?;
        Err(job::JobError::retryable("retried while paused"))
    }
}

#[tokio::test]
async fn an_outcome_whose_answer_was_lost_counts_as_applied_not_as_a_lost_lease() {
    // The finalize committed, its answer did not come back, and the completer wrote the batch
    // again: the guarded write found the leases gone (its own write had cleared them), or a
    // heartbeat in between reported them lost. Both counted jobs that ended well as lost
    // leases. The completer now reads such a job's row, and counts its outcome when the row
    // shows it.
    for heartbeats in [0, 2] {
        let h = Harness::new().await;
        let store = Layered::new(
            h.store.clone(),
            LostFinalizeAnswers {
                heartbeats,
                ..Default::default()
            },
        );
        let worker = worker(&store, &h.ledger)
            .register::<RetriesPaused>()
            .state(h.store.clone())
            .build()
            .unwrap()
            .start();
        // Keeps the keeper beating while the others finish.
        let sleepy = enqueue(&h.store, Sleepy { ms: 1500 }).await;
        // A retry not claimed again, so that its row still shows it when it is read.
        let mut ids = vec![enqueue(&h.store, RetriesPaused {}).await];
        for how in [How::Terminal, How::Cancel] {
            ids.push(enqueue(&h.store, Flaky { failures: 1, how }).await);
        }
        ids.push(enqueue(&h.store, Noop { n: 1 }).await);
        let ended = [
            JobState::Retryable,
            JobState::Discarded,
            JobState::Cancelled,
            JobState::Completed,
        ];
        for (id, state) in ids.iter().zip(ended) {
            h.reaches(*id, state).await;
        }
        h.reaches(sleepy, JobState::Completed).await;
        eventually("the completer to count every outcome", || async {
            let s = worker.stats();
            (s.completed + s.retried + s.discarded + s.cancelled + s.lease_lost >= 5).then_some(())
        })
        .await;
        let stats = worker.shutdown().await.stats;
        assert_eq!(
            (
                stats.completed,
                stats.retried,
                stats.discarded,
                stats.cancelled,
                stats.lease_lost,
                stats.fenced
            ),
            (2, 1, 1, 1, 0, 0),
            "answers lost after {heartbeats} heartbeats: {stats:?}"
        );
        for id in ids.iter().chain([&sleepy]) {
            assert_eq!(h.row(*id).await.lock_token, None, "job {id}");
        }
    }
}

#[tokio::test]
async fn an_outcome_written_alone_whose_answer_was_lost_counts_as_applied() {
    // A refused batch is written one outcome at a time; a lost answer there, and a heartbeat
    // that then reports the lease lost, counted the job as a lost lease as well.
    let h = Harness::new().await;
    let layer = LostFinalizeAnswers {
        heartbeats: 2,
        refuse_first: true,
        ..Default::default()
    };
    let worker = worker(&Layered::new(h.store.clone(), layer), &h.ledger)
        .build()
        .unwrap()
        .start();
    let sleepy = enqueue(&h.store, Sleepy { ms: 1500 }).await;
    let id = enqueue(&h.store, Noop { n: 1 }).await;
    h.reaches(id, JobState::Completed).await;
    h.reaches(sleepy, JobState::Completed).await;
    eventually("the completer to count both outcomes", || async {
        let s = worker.stats();
        (s.completed + s.lease_lost >= 2).then_some(())
    })
    .await;
    let stats = worker.shutdown().await.stats;
    assert_eq!(
        (stats.completed, stats.lease_lost, stats.fenced),
        (2, 0, 0),
        "{stats:?}"
    );
}

/// Loses the answer of the first finalize of at least [`SlowRowReads::BATCH`] outcomes (it
/// is written), holding the first finalize until the ledger shows `jobs` executions, so that
/// the next batch carries the rest; every read of a row after that hangs, counted.
#[derive(Clone)]
struct SlowRowReads {
    ledger: Ledger,
    jobs: usize,
    lost: std::sync::Arc<std::sync::Mutex<Option<usize>>>,
    finalizes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl SlowRowReads {
    const BATCH: usize = 5;
}

impl StoreLayer for SlowRowReads {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        use std::sync::atomic::Ordering::SeqCst;
        match call.name {
            "finalize" => Box::pin(async move {
                if self.finalizes.fetch_add(1, SeqCst) == 0 {
                    let give_up = tokio::time::Instant::now() + Duration::from_secs(10);
                    while self.ledger.total() < self.jobs && tokio::time::Instant::now() < give_up {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
                let written = run.await?;
                let mut lost = self.lost.lock().unwrap();
                if lost.is_none() && call.sent >= Self::BATCH {
                    *lost = Some(call.sent);
                    return Err(StoreError::new("injected: the finalize's answer was lost"));
                }
                Ok(written)
            }),
            "get" if self.lost.lock().unwrap().is_some() => Box::pin(async move {
                self.reads.fetch_add(1, SeqCst);
                tokio::time::sleep(Duration::from_secs(3600)).await;
                run.await
            }),
            _ => run,
        }
    }
}

#[tokio::test]
async fn reading_the_rows_of_a_lost_answer_is_bounded_for_the_whole_batch() {
    // After a lost answer, the rows of the outcomes whose lease is gone are read, four at a
    // time, within a bound. The bound was per read: a server that does not answer those reads
    // held the completer 2 s per four outcomes, 500 s for a batch of 1,000, while every
    // outcome after them waited. The bound is now for the whole batch: the reads not started
    // by then are not made, and those outcomes count as lost leases, as before the reads.
    let h = Harness::new().await;
    const JOBS: usize = 10;
    let mut ids = Vec::new();
    for n in 0..JOBS {
        ids.push(enqueue(&h.store, Noop { n: n as u32 }).await);
    }
    let layer = SlowRowReads {
        ledger: h.ledger.clone(),
        jobs: JOBS,
        lost: Default::default(),
        finalizes: Default::default(),
        reads: Default::default(),
    };
    let worker = worker(&Layered::new(h.store.clone(), layer.clone()), &h.ledger)
        .build()
        .unwrap()
        .start();
    for id in &ids {
        h.reaches(*id, JobState::Completed).await;
    }
    eventually("the completer to count every outcome", || async {
        let s = worker.stats();
        (s.completed + s.lease_lost >= JOBS as u64).then_some(())
    })
    .await;
    let stats = worker.shutdown().await.stats;
    let lost = layer
        .lost
        .lock()
        .unwrap()
        .expect("a batch of five or more outcomes");
    let reads = layer.reads.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        reads < lost,
        "{reads} rows read of a lost batch of {lost} outcomes whose reads never answer"
    );
    assert_eq!(
        (stats.completed + stats.lease_lost, stats.fenced),
        (JOBS as u64, 0),
        "{stats:?}"
    );
}

/// Fails for good with a message the store keeps only made storable: a NUL, and 20 KB.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct FailsWithOddText {}

impl job::Job for FailsWithOddText {
    const KIND: &'static str = "test.fails_with_odd_text";

    async fn perform(self, _: job::JobContext) -> Result<(), job::JobError> {
        Err(job::JobError::terminal(format!(
            "a NUL\0 and {}",
            "x".repeat(20_000)
        )))
    }
}

#[tokio::test]
async fn an_outcome_whose_message_was_made_storable_and_whose_answer_was_lost_counts_as_applied() {
    // The store keeps a message without NUL and at most MAX_ERROR_MESSAGE bytes; the check
    // after a lost answer compared the row with the message as the handler gave it.
    let h = Harness::new().await;
    let store = Layered::new(h.store.clone(), LostFinalizeAnswers::default());
    let worker = worker(&store, &h.ledger)
        .register::<FailsWithOddText>()
        .build()
        .unwrap()
        .start();
    let sleepy = enqueue(&h.store, Sleepy { ms: 1500 }).await;
    let id = enqueue(&h.store, FailsWithOddText {}).await;
    h.reaches(id, JobState::Discarded).await;
    h.reaches(sleepy, JobState::Completed).await;
    eventually("the completer to count both outcomes", || async {
        let s = worker.stats();
        (s.completed + s.discarded + s.lease_lost >= 2).then_some(())
    })
    .await;
    let stats = worker.shutdown().await.stats;
    assert_eq!(
        (stats.completed, stats.discarded, stats.lease_lost),
        (1, 1, 0),
        "{stats:?}"
    );
}

/// Lets [`WaitsForRelease`] jobs end, and says when one has.
#[derive(Clone)]
struct Release {
    permits: std::sync::Arc<tokio::sync::Semaphore>,
    ended: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Default for Release {
    fn default() -> Self {
        Release {
            permits: std::sync::Arc::new(tokio::sync::Semaphore::new(0)),
            ended: Default::default(),
        }
    }
}

/// Waits for a [`Release`] permit, then completes.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct WaitsForRelease {}

impl job::Job for WaitsForRelease {
    const KIND: &'static str = "test.waits_for_release";

    async fn perform(self, ctx: job::JobContext) -> Result<(), job::JobError> {
        let release = ctx.state::<Release>()?.clone();
        let _permit = release.permits.acquire().await;
        release
            .ended
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }
}

#[tokio::test]
async fn a_row_held_by_another_transaction_holds_up_no_other_outcome() {
    // An operator's UPDATE left open in psql, or an application's transaction that locked a
    // running job's row: the completer's statement waited for that row, with every outcome of
    // its batch and of the batches after it, for as long as the transaction stayed open, while
    // the worker went on claiming and their outcomes piled up in memory.
    let h = Harness::new().await;
    let release = Release::default();
    let worker = worker(&h.store, &h.ledger)
        .register::<WaitsForRelease>()
        .state(release.clone())
        .build()
        .unwrap()
        .start();
    let held = enqueue(&h.store, WaitsForRelease {}).await;
    h.reaches(held, JobState::Running).await;
    let mut tx = h.store.pool().begin().await.unwrap();
    sqlx::query("SELECT 1 FROM job.jobs WHERE id = $1 FOR UPDATE")
        .bind(held)
        .execute(&mut *tx)
        .await
        .unwrap();
    release.permits.add_permits(1);
    eventually("the held job's handler to end", || async {
        (release.ended.load(std::sync::atomic::Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    let mut others = Vec::new();
    for n in 0..3 {
        others.push(enqueue(&h.store, Noop { n }).await);
    }
    for id in &others {
        h.reaches(*id, JobState::Completed).await;
    }
    assert_eq!(
        h.row(held).await.state,
        JobState::Running,
        "its outcome waits for the row"
    );
    tx.rollback().await.unwrap();
    h.reaches(held, JobState::Completed).await;
    eventually("the completer to count every outcome", || async {
        let s = worker.stats();
        (s.completed + s.lease_lost >= 4).then_some(())
    })
    .await;
    let stats = worker.shutdown().await.stats;
    assert_eq!(
        (stats.completed, stats.lease_lost, stats.fenced),
        (4, 0, 0),
        "{stats:?}"
    );
}

/// Reports progress every few milliseconds until it is told to stop.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Reporting {}

impl job::Job for Reporting {
    const KIND: &'static str = "test.reporting";
    const OPTIONS: job::JobOptions = job::JobOptions {
        lease: Duration::from_millis(900),
        ..job::JobOptions::DEFAULT
    };

    async fn perform(self, ctx: job::JobContext) -> Result<(), job::JobError> {
        loop {
            ctx.progress(0.5, "half way");
            tokio::select! {
                _ = ctx.cancelled() => return Err(job::JobError::retryable("stopped")),
                _ = tokio::time::sleep(Duration::from_millis(10)) => {}
            }
        }
    }
}

/// A store layer whose heartbeats take `delay` (counted once answered) and whose progress
/// writes never answer.
#[derive(Clone)]
struct SlowBeatsStuckProgress {
    delay: Duration,
    beats: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl StoreLayer for SlowBeatsStuckProgress {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        match call.name {
            "heartbeat" => Box::pin(async move {
                tokio::time::sleep(self.delay).await;
                let answer = run.await;
                self.beats.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                answer
            }),
            "save_progress" => Box::pin(std::future::pending()),
            _ => run,
        }
    }
}

#[tokio::test]
async fn a_progress_write_that_does_not_answer_never_delays_the_next_heartbeat() {
    // Heartbeats every 900 ms (a third of the 2.7 s lease), each answering after 540 ms; the
    // progress write after each never answers. It used to get a whole period, so the next
    // heartbeat went out 1,440 ms after the last, renewed at 1,980 ms, past the fence point
    // (1,800 ms): the execution was fenced though every heartbeat succeeded. Now each renews
    // 1,440 ms after the last: 360 ms to spare on a loaded machine (at a third of these
    // times, there were 120 ms).
    let h = Harness::new().await;
    let id = enqueue(&h.store, Reporting {}).await;
    let layer = SlowBeatsStuckProgress {
        delay: Duration::from_millis(540),
        beats: Default::default(),
    };
    let store = Layered::new(h.store.clone(), layer.clone());
    let worker = worker(&store, &h.ledger)
        .register::<Reporting>()
        // Every kind's lease, so that the heartbeat period (a third of the shortest) is 900 ms.
        .configure(|c| c.lease = Some(Duration::from_millis(2700)))
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Running).await;
    let first = layer.beats.load(std::sync::atomic::Ordering::SeqCst);
    eventually("four more heartbeats", || async {
        (layer.beats.load(std::sync::atomic::Ordering::SeqCst) >= first + 4).then_some(())
    })
    .await;
    assert_eq!(worker.stats().fenced, 0, "every heartbeat renewed in time");
    let stats = worker.shutdown().await.stats;
    assert_eq!(stats.fenced, 0);
}

/// A store layer whose finalize takes 100 ms and fails, as a statement timeout would, with
/// more than `most` outcomes; counts those failures.
#[derive(Clone)]
struct LargeFinalizesTimeOut {
    most: usize,
    failed: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl StoreLayer for LargeFinalizesTimeOut {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        if call.name != "finalize" {
            return run;
        }
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if call.sent > self.most {
                self.failed
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return Err(StoreError::new(
                    "canceling statement due to statement timeout",
                ));
            }
            run.await
        })
    }
}

#[tokio::test]
async fn a_batch_that_fails_every_time_for_a_passing_reason_is_written_in_smaller_ones() {
    // A DBA's statement_timeout shorter than a large batch takes: every try of a batch over 4
    // outcomes fails. The completer retried such a batch unchanged for ever.
    let h = Harness::new().await;
    let mut ids = Vec::new();
    for n in 0..40 {
        ids.push(enqueue(&h.store, Noop { n }).await);
    }
    let layer = LargeFinalizesTimeOut {
        most: 4,
        failed: Default::default(),
    };
    let store = Layered::new(h.store.clone(), layer.clone());
    let worker = worker(&store, &h.ledger).build().unwrap().start();
    for id in &ids {
        h.reaches(*id, JobState::Completed).await;
    }
    let stats = worker.shutdown().await.stats;
    assert!(
        layer.failed.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "some batch was over the limit"
    );
    assert_eq!(
        (stats.completed, stats.lease_lost, stats.fenced),
        (40, 0, 0)
    );
    for id in &ids {
        assert_eq!(h.row(*id).await.attempt, 1, "job {id} ran once");
    }
}

#[tokio::test]
async fn an_outcome_that_fails_alone_for_a_passing_reason_holds_up_no_other() {
    // A row whose finalize fails every time for a reason that passes (XX001, a corrupted
    // row): the completer halved its batch down to that outcome, then retried it alone for
    // ever, and every other outcome of the worker waited. Now it is written apart.
    let h = Harness::new().await;
    let pool = h.store.pool();
    let poison = enqueue(&h.store, Noop { n: 0 }).await;
    sqlx::raw_sql(&format!(
        "CREATE TABLE public.healed (yes boolean NOT NULL);
         INSERT INTO public.healed VALUES (false);
         CREATE FUNCTION public.corrupted() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF NEW.id = {poison} AND NEW.state = 'completed'
                AND NOT (SELECT yes FROM public.healed) THEN
                 RAISE EXCEPTION 'could not read block' USING ERRCODE = 'XX001';
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER corrupted BEFORE UPDATE ON job.jobs
             FOR EACH ROW EXECUTE FUNCTION public.corrupted();"
    ))
    .execute(pool)
    .await
    .unwrap();
    let worker = h.worker().build().unwrap().start();
    h.reaches(poison, JobState::Running).await;
    let mut others = Vec::new();
    for n in 1..=30 {
        others.push(enqueue(&h.store, Noop { n }).await);
    }
    for id in &others {
        h.reaches(*id, JobState::Completed).await;
    }
    assert_eq!(
        h.row(poison).await.state,
        JobState::Running,
        "still failing"
    );
    sqlx::query("UPDATE public.healed SET yes = true")
        .execute(pool)
        .await
        .unwrap();
    h.reaches(poison, JobState::Completed).await;
    let stats = worker.shutdown().await.stats;
    assert_eq!(
        (stats.completed, stats.lease_lost, stats.fenced),
        (31, 0, 0)
    );
    assert_eq!(h.row(poison).await.attempt, 1, "written, not run again");
}

/// Heartbeats fail while the flag is set: the keeper cut off from the database for a while.
#[derive(Clone, Default)]
struct HeartbeatsFail(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl StoreLayer for HeartbeatsFail {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        if call.name == "heartbeat" && self.0.load(std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(async {
                Err(StoreError::new(std::io::Error::other(
                    "injected: database unreachable",
                )))
            });
        }
        run
    }
}

/// A job given back uncounted `MAX_REFUNDED_INTERRUPTIONS` times is not given back when an
/// outage fences it once more: its lease runs out and the rescuer counts the attempt, here its
/// last, so it is a dead letter. A job whose work takes its database down (every restart
/// fences it) was given back for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_fenced_past_the_interruption_bound_is_not_given_back() {
    use std::sync::atomic::Ordering::SeqCst;
    let h = Harness::new().await;
    let cut = HeartbeatsFail::default();
    let store = Layered::new(h.store.clone(), cut.clone());
    let gate = Gate::default();
    let only_attempt = job_core::EnqueueOptions {
        max_attempts: Some(1),
        ..Default::default()
    };
    let id = enqueue_with(&h.store, Parked { n: 1 }, only_attempt).await;
    sqlx::query("UPDATE job.jobs SET interruptions = $2 WHERE id = $1")
        .bind(id)
        .bind(i32::try_from(job::MAX_REFUNDED_INTERRUPTIONS).unwrap())
        .execute(h.store.pool())
        .await
        .unwrap();
    let worker = job::Worker::builder(store)
        .register::<Parked>()
        .queue("default", 1)
        .poll_interval(Duration::from_millis(50))
        .configure(|c| c.rescuer.interval = Duration::from_millis(50))
        .state(h.ledger.clone())
        .state(gate.clone())
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Running).await;
    cut.0.store(true, SeqCst);
    eventually("the execution to be fenced", || async {
        (worker.stats().fenced >= 1).then_some(())
    })
    .await;
    cut.0.store(false, SeqCst);
    let row = h.reaches(id, JobState::Discarded).await;
    assert_eq!(h.ledger.runs(id), 1);
    assert_eq!(
        row.errors
            .iter()
            .map(|e| e.class.as_str())
            .collect::<Vec<_>>(),
        vec!["lease_expired"],
        "not given back: no `released` entry"
    );
    assert_eq!(worker.shutdown().await.stats.released, 0);
}

/// A job waiting in the prefetch buffer through an outage of two thirds of its lease is not
/// fenced (no code of it runs): renewed once the heartbeats get through, it runs here, once,
/// on its only attempt. It used to be taken away and never given back, so its lease ran out and
/// the rescuer made a dead letter of it without its having run. The running job beside it is
/// fenced as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefetched_job_outlives_an_outage_that_fences_the_running_one() {
    use std::sync::atomic::Ordering::SeqCst;
    let h = Harness::new().await;
    let cut = HeartbeatsFail::default();
    let store = Layered::new(h.store.clone(), cut.clone());
    let gate = Gate::default();
    let running = enqueue(&h.store, Parked { n: 1 }).await;
    let only_attempt = job_core::EnqueueOptions {
        max_attempts: Some(1),
        ..Default::default()
    };
    let waiting = enqueue_with(&h.store, Noop { n: 2 }, only_attempt).await;
    let worker = job::Worker::builder(store)
        .register::<Parked>()
        .register::<Noop>()
        .queue("default", 1)
        .prefetch(1usize)
        .poll_interval(Duration::from_millis(50))
        .configure(|c| c.lease = Some(Duration::from_millis(900)))
        .state(h.ledger.clone())
        .state(gate.clone())
        .build()
        .unwrap()
        .start();
    h.reaches(running, JobState::Running).await;
    h.reaches(waiting, JobState::Running).await;
    assert_eq!(
        h.ledger.runs(waiting),
        0,
        "claimed into the prefetch buffer"
    );
    cut.0.store(true, SeqCst);
    eventually("the running job to be fenced", || async {
        (worker.stats().fenced >= 1).then_some(())
    })
    .await;
    cut.0.store(false, SeqCst);
    gate.open();
    let row = h.reaches(waiting, JobState::Completed).await;
    assert_eq!(row.attempt, 1);
    assert_eq!(h.ledger.runs(waiting), 1);
    // (Had its slot come before a renewal got through, its start was refused and it was given
    // back, its attempt not counted, and claimed again: the same end.)
    worker.shutdown().await;
}

/// Refuses every finalize of more than one outcome, as a batch holding one refused outcome is.
#[derive(Clone, Default)]
struct BatchesRefused;

impl StoreLayer for BatchesRefused {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        if call.name == "finalize" && call.sent > 1 {
            return Box::pin(async {
                Err(StoreError::refused(std::io::Error::other(
                    "injected: batch refused",
                )))
            });
        }
        run
    }
}

/// A refused batch is written one outcome at a time; one of those that then fails for a
/// passing reason, again and again (here an application's trigger raising a lock timeout
/// whenever job 999 completes), is put off and carried apart: the outcomes after it are all
/// written. It held every later outcome of the worker, for as long as its lease was held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outcome_failing_alone_for_a_passing_reason_holds_up_no_other() {
    let h = Harness::new().await;
    sqlx::raw_sql(
        "CREATE FUNCTION public.hold_999() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF NEW.state = 'completed' AND (NEW.payload->>'n') = '999' THEN
             RAISE EXCEPTION 'row held by the application' USING ERRCODE = '55P03';
           END IF;
           RETURN NEW;
         END $$;
         CREATE TRIGGER hold_999 BEFORE UPDATE ON job.jobs
           FOR EACH ROW EXECUTE FUNCTION public.hold_999();",
    )
    .execute(h.store.pool())
    .await
    .unwrap();
    let store = Layered::new(h.store.clone(), BatchesRefused);
    let held = enqueue(&h.store, Noop { n: 999 }).await;
    for n in 0..50 {
        enqueue(&h.store, Noop { n }).await;
    }
    let worker = worker(&store, &h.ledger).build().unwrap().start();
    eventually("every other outcome to be written", || async {
        (count_in(&h.store, JobState::Completed).await == 50).then_some(())
    })
    .await;
    assert_eq!(
        h.row(held).await.state,
        JobState::Running,
        "still tried apart"
    );
    worker.shutdown().await;
}

/// A running job fenced by an outage of two thirds of its lease stops (`Parked` returns once
/// told), and once its code has ended its lease is given back, the attempt not counted, if the
/// store still holds it: the job runs again at once, on its only attempt. Left to run out, the
/// lease made a dead letter (`lease_expired`) of a job on its last attempt for the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_execution_gives_its_lease_back_once_its_code_ends() {
    use std::sync::atomic::Ordering::SeqCst;
    let h = Harness::new().await;
    let cut = HeartbeatsFail::default();
    let store = Layered::new(h.store.clone(), cut.clone());
    let gate = Gate::default();
    let only_attempt = job_core::EnqueueOptions {
        max_attempts: Some(1),
        ..Default::default()
    };
    let id = enqueue_with(&h.store, Parked { n: 1 }, only_attempt).await;
    let worker = job::Worker::builder(store)
        .register::<Parked>()
        .queue("default", 1)
        .poll_interval(Duration::from_millis(50))
        .state(h.ledger.clone())
        .state(gate.clone())
        .build()
        .unwrap()
        .start();
    h.reaches(id, JobState::Running).await;
    cut.0.store(true, SeqCst);
    eventually("the execution to be fenced and given back", || async {
        (worker.stats().released >= 1).then_some(())
    })
    .await;
    cut.0.store(false, SeqCst);
    gate.open();
    let row = h.reaches(id, JobState::Completed).await;
    assert_eq!(row.attempt, 1, "the fenced attempt was not counted");
    assert_eq!(h.ledger.runs(id), 2);
    assert_eq!(
        row.errors.last().map(|e| e.class.as_str()),
        Some("released")
    );
    worker.shutdown().await;
}
