//! Prefetch: claimed jobs held beyond the running ones keep their leases while they wait for
//! a slot, and go back at once when the worker shuts down.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{
    BoxFuture, BuildError, Call, JobId, JobState, Layered, Prefetch, Returned, Store, StoreError,
    StoreLayer, WorkerHandle,
};

use crate::common::*;

/// The one job of `ids` that has started (the ledger saw it), once exactly one has.
async fn the_started_one(h: &Harness, ids: &[JobId]) -> JobId {
    eventually("one job to start", || async {
        let started: Vec<JobId> = ids
            .iter()
            .copied()
            .filter(|id| h.ledger.runs(*id) > 0)
            .collect();
        (started.len() == 1).then(|| started[0])
    })
    .await
}

/// `n` parked jobs on a worker of one slot that prefetches `n - 1` and gives them back after
/// `ttl`, once all are claimed: the worker, the jobs, the gate that lets them finish, and the
/// one that started.
async fn all_claimed(
    h: &Harness,
    n: u32,
    ttl: Duration,
) -> (WorkerHandle, Vec<JobId>, Gate, JobId) {
    let mut ids = Vec::new();
    for n in 0..n {
        ids.push(enqueue(&h.store, Parked { n }).await);
    }
    let mut config = job::WorkerConfig::default();
    config.prefetch = Prefetch::Fixed(ids.len() - 1);
    config.prefetch_ttl = ttl;
    config.poll_interval = Duration::from_millis(20);
    config.drain_timeout = Duration::from_secs(60);
    // `Parked`'s 900 ms lease gives a heartbeat 300 ms: a loaded run can miss that, fence a
    // waiting job, and run it again. 3 s leaves a second.
    config.lease = Some(LEASE);
    let gate = Gate::default();
    let worker = job::Worker::builder(h.store.clone())
        .register::<Parked>()
        .queue("default", 1)
        .config(config)
        .state(h.ledger.clone())
        .state(gate.clone())
        .build()
        .unwrap()
        .start();
    for id in &ids {
        h.reaches(*id, JobState::Running).await;
    }
    let running = the_started_one(h, &ids).await;
    (worker, ids, gate, running)
}

/// A second worker of `concurrency` slots whose [`Parked`] jobs finish at once.
fn open_worker(h: &Harness, concurrency: usize) -> WorkerHandle {
    let open = Gate::default();
    open.open();
    job::Worker::builder(h.store.clone())
        .register::<Parked>()
        .queue("default", concurrency)
        .poll_interval(Duration::from_millis(20))
        .state(h.ledger.clone())
        .state(open)
        .build()
        .unwrap()
        .start()
}

/// The lease of the jobs `all_claimed` claims.
const LEASE: Duration = Duration::from_secs(3);

/// Longer than any of these tests waits: the prefetched jobs are never given back.
const NO_TTL: Duration = Duration::from_secs(600);

#[tokio::test]
async fn prefetched_jobs_wait_for_a_slot_and_go_back_at_once_on_shutdown() {
    let h = Harness::new().await;
    let (worker, ids, gate, running) = all_claimed(&h, 4, NO_TTL).await;
    assert_eq!(
        worker.in_flight(),
        4,
        "one running and three prefetched leases held"
    );
    assert_eq!(
        h.ledger.total(),
        1,
        "concurrency 1: the prefetched jobs wait"
    );

    let draining = tokio::spawn(worker.shutdown());
    // The drain waits for the running job (the gate is shut) but gives the prefetched ones
    // back before that, so that another worker can take them now.
    for id in ids.iter().filter(|id| **id != running) {
        let row = h.reaches(*id, JobState::Available).await;
        assert_eq!(
            row.attempt, 0,
            "a prefetched job that never started used no attempt"
        );
        assert_eq!(row.lock_token, None);
    }
    assert_eq!(h.row(running).await.state, JobState::Running);
    gate.open();
    let report = draining.await.unwrap();
    assert!(report.finished_in_time);
    assert_eq!(report.released, 3);
    let row = h.row(running).await;
    assert_eq!(row.state, JobState::Completed);
    assert_eq!(row.attempt, 1);
    assert_eq!(h.ledger.total(), 1, "no prefetched job ran");
}

#[tokio::test]
async fn a_prefetched_job_keeps_its_lease_while_it_waits() {
    let h = Harness::new().await;
    let (worker, ids, gate, running) = all_claimed(&h, 2, NO_TTL).await;
    let waiting = ids.iter().copied().find(|id| *id != running).unwrap();
    let first = h.row(waiting).await;
    let first_until = first.locked_until.unwrap();
    // Wait (without a deadline on speed) until the waiting job's lease has outlived its first
    // expiry: only the heartbeat can have moved it.
    let lease = chrono::Duration::from_std(LEASE).unwrap();
    let renewed = eventually(
        "the waiting job's lease to be renewed past its first term",
        || {
            let h = &h;
            async move {
                let r = h.row(waiting).await;
                (r.locked_until.is_some_and(|u| u > first_until + lease)).then_some(r)
            }
        },
    )
    .await;
    assert_eq!(renewed.state, JobState::Running);
    assert_eq!(
        renewed.lock_token, first.lock_token,
        "the same lease, never rescued"
    );
    assert_eq!(renewed.attempt, 1);
    assert_eq!(h.ledger.runs(waiting), 0, "still waiting for the slot");

    gate.open();
    for id in &ids {
        let row = h.reaches(*id, JobState::Completed).await;
        assert_eq!(row.attempt, 1, "each ran once, on its first lease");
        assert_eq!(h.ledger.runs(*id), 1);
    }
    let stats = worker.stats();
    assert_eq!(stats.lease_lost, 0);
    worker.shutdown().await;
}

#[tokio::test]
async fn prefetch_and_concurrency_have_bounds() {
    let h = Harness::new().await;
    let too_much = h.worker().prefetch(100_001).build();
    assert!(
        matches!(
            too_much,
            Err(BuildError::InvalidOption {
                option: "prefetch",
                ..
            })
        ),
        "{:?}",
        too_much.err()
    );
    let too_many = job::Worker::builder(h.store.clone())
        .register::<Noop>()
        .queue("default", 100_001)
        .build();
    assert!(
        matches!(
            too_many,
            Err(BuildError::InvalidOption {
                option: "queue",
                ..
            })
        ),
        "{:?}",
        too_many.err()
    );
}

#[tokio::test]
async fn prefetched_jobs_that_wait_out_their_ttl_go_back_for_other_workers() {
    let h = Harness::new().await;
    let (first, ids, gate, running) = all_claimed(&h, 3, Duration::from_millis(100)).await;
    let others: Vec<JobId> = ids.iter().copied().filter(|id| *id != running).collect();
    // The slot stays taken (the gate is shut): the prefetched jobs are given back.
    for id in &others {
        let row = h.reaches(*id, JobState::Available).await;
        assert_eq!(row.attempt, 0, "a job given back never started");
    }
    eventually("the first worker to hold only its running job", || async {
        (first.in_flight() == 1).then_some(())
    })
    .await;

    let second = open_worker(&h, 5);
    for id in &others {
        let row = h.reaches(*id, JobState::Completed).await;
        assert_eq!(row.attempt, 1);
        assert_eq!(h.ledger.runs(*id), 1);
    }
    gate.open();
    h.reaches(running, JobState::Completed).await;
    let stats = first.stats();
    assert_eq!(
        stats.claimed, 3,
        "while its slot was taken, the first worker claimed nothing more"
    );
    assert_eq!(stats.released, 2);
    assert_eq!(second.stats().claimed, 2);
    first.shutdown().await;
    second.shutdown().await;
}

/// Fails the first release it sees: after it ran (it committed, then its answer was lost, as
/// when the connection drops before the answer comes back), or before it ran (nothing
/// committed). Says when it has.
#[derive(Clone, Default)]
struct FirstReleaseFails {
    after_it_ran: bool,
    failed: Arc<AtomicBool>,
}

impl FirstReleaseFails {
    fn after_it_ran() -> Self {
        FirstReleaseFails {
            after_it_ran: true,
            ..Self::default()
        }
    }
}

impl StoreLayer for FirstReleaseFails {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let fail = call.name == "release" && !self.failed.swap(true, Ordering::SeqCst);
        Box::pin(async move {
            if !fail {
                return run.await;
            }
            if self.after_it_ran {
                run.await?;
                return Err(StoreError::new("injected: the release's answer was lost"));
            }
            drop(run);
            Err(StoreError::new(
                "injected: the release failed before it ran",
            ))
        })
    }
}

#[tokio::test]
async fn a_job_whose_give_back_may_have_committed_never_starts_here() {
    // A prefetched job waits out its ttl and is given back; the release commits but its
    // answer is lost, so the worker cannot know it did, and another worker may take the job
    // at once. Started here when the slot frees, it would run twice at once.
    let h = Harness::new().await;
    let mut ids = Vec::new();
    for n in 0..2 {
        ids.push(enqueue(&h.store, Parked { n }).await);
    }
    let mut config = job::WorkerConfig::default();
    config.prefetch = Prefetch::Fixed(1);
    config.prefetch_ttl = Duration::from_millis(100);
    config.poll_interval = Duration::from_millis(20);
    let gate = Gate::default();
    let first = job::Worker::builder(Layered::new(
        h.store.clone(),
        FirstReleaseFails::after_it_ran(),
    ))
    .register::<Parked>()
    .queue("default", 1)
    .config(config)
    .state(h.ledger.clone())
    .state(gate.clone())
    .build()
    .unwrap()
    .start();
    let running = the_started_one(&h, &ids).await;
    let given_back = ids.iter().copied().find(|id| *id != running).unwrap();
    let row = h.reaches(given_back, JobState::Available).await;
    assert_eq!(row.attempt, 0);
    // The slot frees: the job given back must not start here.
    gate.open();
    h.reaches(running, JobState::Completed).await;
    let second = open_worker(&h, 1);
    let row = h.reaches(given_back, JobState::Completed).await;
    assert_eq!(row.attempt, 1);
    assert_eq!(
        h.ledger.runs(given_back),
        1,
        "it ran once, on the second worker"
    );
    first.shutdown().await;
    second.shutdown().await;
}

/// A worker on the default prefetch, `concurrency` slots on `default`.
fn auto_worker(h: &Harness, concurrency: usize) -> WorkerHandle {
    job::Worker::builder(h.store.clone())
        .register::<Noop>()
        .register::<Sleepy>()
        .queue("default", concurrency)
        .poll_interval(Duration::from_millis(50))
        .state(h.ledger.clone())
        .build()
        .unwrap()
        .start()
}

#[tokio::test]
async fn by_default_workers_sharing_slow_jobs_hold_none_waiting() {
    // Jobs far longer than a claim round trip, on four workers of two slots: the measured
    // prefetch stays at zero, so each worker claims only its free slots and no job waits in
    // one worker's buffer while another worker has a free slot.
    let h = Harness::new().await;
    let mut ids = Vec::new();
    for _ in 0..24 {
        ids.push(enqueue(&h.store, Sleepy { ms: 400 }).await);
    }
    let workers: Vec<WorkerHandle> = (0..4).map(|_| auto_worker(&h, 2)).collect();
    for id in &ids {
        let row = h.reaches(*id, JobState::Completed).await;
        assert_eq!(row.attempt, 1);
        assert_eq!(h.ledger.runs(*id), 1);
    }
    let mut claimed = Vec::new();
    for worker in workers {
        let stats = worker.stats();
        assert_eq!(
            stats.waited, 0,
            "a worker held a job waiting for its own slot: {stats:?}"
        );
        claimed.push(stats.claimed);
        worker.shutdown().await;
    }
    assert_eq!(claimed.iter().sum::<u64>(), 24, "{claimed:?}");
}

#[tokio::test]
async fn by_default_a_queue_of_short_jobs_prefetches() {
    // The other half of the measured prefetch: jobs much shorter than a claim round trip are
    // claimed ahead of the free slots (they wait for one), which is what makes the default
    // fast; a test that only ever saw zero would not tell the two apart.
    let h = Harness::new().await;
    let jobs: Vec<Noop> = (0..3_000).map(|n| Noop { n }).collect();
    let news: Vec<_> = jobs
        .iter()
        .map(|j| {
            job_core::NewJob::build(j, Default::default(), job_core::DEFAULT_PAYLOAD_LIMIT).unwrap()
        })
        .collect();
    h.store.enqueue_many(news).await.unwrap();
    let worker = auto_worker(&h, 2);
    eventually("every job to complete", || async {
        (count_in(&h.store, JobState::Completed).await == 3_000).then_some(())
    })
    .await;
    let stats = worker.stats();
    assert_eq!(stats.completed, 3_000);
    assert!(stats.waited > 0, "nothing was prefetched: {stats:?}");
    worker.shutdown().await;
}

#[tokio::test]
async fn after_a_give_back_a_worker_claims_only_for_the_slots_nothing_holds() {
    // One slot, two prefetched: the first claim takes three jobs far longer than the ttl, and
    // the two waiting are given back. From then on the worker claims one job for its one slot
    // each time it frees: a second claim sent while the first was in flight (the slot still
    // free) would bring back a job to wait out its ttl and be given back, again and again.
    let h = Harness::new().await;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(enqueue(&h.store, Sleepy { ms: 300 }).await);
    }
    let mut config = job::WorkerConfig::default();
    config.prefetch = Prefetch::Fixed(2);
    config.prefetch_ttl = Duration::from_millis(30);
    config.poll_interval = Duration::from_millis(20);
    let worker = job::Worker::builder(h.store.clone())
        .register::<Sleepy>()
        .queue("default", 1)
        .config(config)
        .state(h.ledger.clone())
        .build()
        .unwrap()
        .start();
    for id in &ids {
        h.reaches(*id, JobState::Completed).await;
        assert_eq!(h.ledger.runs(*id), 1);
    }
    let stats = worker.shutdown().await.stats;
    assert_eq!(
        (stats.released, stats.claimed),
        (2, 7),
        "only the first claim's prefetched jobs went back; the five jobs were claimed once \
         each after that: {stats:?}"
    );
}

#[tokio::test]
async fn a_failed_give_back_is_retried_while_later_ones_succeed() {
    // Two prefetched jobs wait out their ttl and their give-back fails; two more are claimed,
    // wait out theirs and go back. The first two must still go back on the next retry: kept
    // (their leases renewed), they would never run anywhere, and their permits would keep the
    // one slot's queue from claiming anything once it frees.
    let h = Harness::new().await;
    let mut first = Vec::new();
    for n in 0..3 {
        first.push(enqueue(&h.store, Parked { n }).await);
    }
    let layer = FirstReleaseFails::default();
    let mut config = job::WorkerConfig::default();
    config.prefetch = Prefetch::Fixed(4);
    config.prefetch_ttl = Duration::from_millis(300);
    config.poll_interval = Duration::from_millis(20);
    let gate = Gate::default();
    let worker = job::Worker::builder(Layered::new(h.store.clone(), layer.clone()))
        .register::<Parked>()
        .queue("default", 1)
        .config(config)
        .state(h.ledger.clone())
        .state(gate.clone())
        .build()
        .unwrap()
        .start();
    let running = the_started_one(&h, &first).await;
    let failed: Vec<JobId> = first.iter().copied().filter(|id| *id != running).collect();
    eventually("the first give-back to fail", || async {
        layer.failed.load(Ordering::SeqCst).then_some(())
    })
    .await;
    let later = [
        enqueue(&h.store, Parked { n: 10 }).await,
        enqueue(&h.store, Parked { n: 11 }).await,
    ];
    for id in later.iter().chain(&failed) {
        let row = h.reaches(*id, JobState::Available).await;
        assert_eq!(row.attempt, 0, "job {id} was given back, never started");
    }
    gate.open();
    let fresh = enqueue(&h.store, Parked { n: 20 }).await;
    for id in first.iter().chain(&later).chain([&fresh]) {
        h.reaches(*id, JobState::Completed).await;
        assert_eq!(h.ledger.runs(*id), 1);
    }
    worker.shutdown().await;
}

/// Counts the claims in flight through the store, and the claims sent while another was in
/// flight after the last answer came back short (fewer jobs than asked).
#[derive(Clone, Default)]
struct ClaimsInFlight {
    seen: Arc<std::sync::Mutex<InFlight>>,
}

#[derive(Debug, Default)]
struct InFlight {
    now: usize,
    last_short: bool,
    sent: usize,
    short: usize,
    overlapping_after_short: usize,
}

impl StoreLayer for ClaimsInFlight {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        if call.name != "claim" {
            return run;
        }
        Box::pin(async move {
            {
                let mut seen = self.seen.lock().unwrap();
                if seen.now > 0 && seen.last_short {
                    seen.overlapping_after_short += 1;
                }
                seen.now += 1;
                seen.sent += 1;
            }
            let answer = run.await;
            let mut seen = self.seen.lock().unwrap();
            seen.now -= 1;
            if let Ok(jobs) = &answer {
                seen.last_short = jobs.rows() < call.sent;
                seen.short += usize::from(seen.last_short);
            }
            answer
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_keeps_up_is_claimed_one_statement_at_a_time() {
    // Jobs enqueued one by one to a worker that takes up to 200 a claim: every claim comes
    // back short. A second claim sent while one is in flight then only splits what was
    // enqueued during the first one's round trip between two statements (in a soak it doubled
    // the claims and cost an eighth more of the server's CPU per job), so once a claim came
    // back short the worker keeps one in flight until one comes back full.
    let h = Harness::new().await;
    let layer = ClaimsInFlight::default();
    let mut config = job::WorkerConfig::default();
    config.prefetch = Prefetch::Fixed(400);
    config.poll_interval = Duration::from_millis(50);
    let worker = job::Worker::builder(Layered::new(h.store.clone(), layer.clone()))
        .register::<Noop>()
        .queue("default", 10)
        .config(config)
        .state(h.ledger.clone())
        .build()
        .unwrap()
        .start();
    let mut ids = Vec::new();
    for n in 0..150 {
        ids.push(enqueue(&h.store, Noop { n }).await);
        if n % 3 == 0 {
            // A trickle: some jobs arrive while a claim is in flight, some between claims.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    for id in &ids {
        h.reaches(*id, JobState::Completed).await;
        assert_eq!(h.ledger.runs(*id), 1);
    }
    worker.shutdown().await;
    let seen = layer.seen.lock().unwrap();
    assert!(
        seen.short > 10,
        "the claims should have come back short: {seen:?}"
    );
    assert_eq!(
        seen.overlapping_after_short, 0,
        "a claim was sent while another was in flight after a short one: {seen:?}"
    );
}
