//! The worker's metrics of a scripted run with every outcome: exact counters, labels and
//! observation counts, and the saturation gauges of a queue.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::prelude::*;
use job::NewJob;
use job_testkit::prelude::*;
use tokio::sync::Semaphore;

use crate::support::{finished_row, recorder, sample, samples_with, until};

#[job(kind = "tm.ok", queue = "tm", owner = "billing")]
async fn tm_ok(_ctx: JobContext, n: i64) -> Result<(), JobError> {
    let _ = n;
    Ok(())
}

#[job(
    kind = "tm.flaky",
    queue = "tm",
    owner = "billing",
    retry = 1,
    backoff(base = "1ms", cap = "2ms")
)]
async fn tm_flaky(ctx: JobContext) -> Result<(), JobError> {
    if ctx.attempt() == 1 {
        return Err(JobError::retryable("the first attempt fails"));
    }
    Ok(())
}

/// Set once the snoozing job has snoozed.
#[derive(Default, Clone)]
struct Snoozed(Arc<AtomicBool>);

#[job(kind = "tm.snooze", queue = "tm")]
async fn tm_snooze(ctx: JobContext) -> Result<(), JobError> {
    if !ctx.state::<Snoozed>()?.0.swap(true, Ordering::SeqCst) {
        return Err(JobError::snooze(Duration::from_millis(1)));
    }
    Ok(())
}

#[job(kind = "tm.cancel", queue = "tm")]
async fn tm_cancel(_ctx: JobContext) -> Result<(), JobError> {
    Err(JobError::cancel("not wanted any more"))
}

#[job(kind = "tm.terminal", queue = "tm")]
async fn tm_terminal(_ctx: JobContext) -> Result<(), JobError> {
    Err(JobError::terminal("cannot ever work"))
}

#[job(kind = "tm.panic", queue = "tm", retry = 0)]
async fn tm_panic(_ctx: JobContext) -> Result<(), JobError> {
    panic!("boom")
}

const BILLING: &str = "billing";
const NONE: &str = "none";

fn job(kind: &'static str, owner: &'static str) -> [(&'static str, &'static str); 3] {
    [("queue", "tm"), ("kind", kind), ("owner", owner)]
}

fn with<'a>(base: [(&'a str, &'a str); 3], more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    base.iter().chain(more).copied().collect()
}

/// `job_finished_total` of `kind` with `outcome` and `class`.
fn finished(kind: &'static str, owner: &'static str, outcome: &str, class: &str) -> Option<f64> {
    let labels = with(job(kind, owner), &[("outcome", outcome), ("class", class)]);
    sample("job_finished_total", &labels)
}

#[tokio::test]
async fn a_scripted_run_counts_every_outcome_with_its_labels() {
    recorder();
    let db = TestDb::new().await;
    let store = db.store();
    let mut ids = vec![
        TmOk { n: 1 }.enqueue(&db.pool()).await.unwrap(),
        TmFlaky {}.enqueue(&db.pool()).await.unwrap(),
        TmSnooze {}.enqueue(&db.pool()).await.unwrap(),
        TmCancel {}.enqueue(&db.pool()).await.unwrap(),
        TmTerminal {}.enqueue(&db.pool()).await.unwrap(),
        TmPanic {}.enqueue(&db.pool()).await.unwrap(),
    ];
    // Poison: a `tm.ok` payload without its field.
    let poison = NewJob {
        queue: "tm".into(),
        ..NewJob::new("tm.ok", "{}")
    };
    ids.push(store.enqueue(poison).await.unwrap());

    let worker = Worker::builder(store.clone())
        .register::<TmOk>()
        .register::<TmFlaky>()
        .register::<TmSnooze>()
        .register::<TmCancel>()
        .register::<TmTerminal>()
        .register::<TmPanic>()
        .state(Snoozed::default())
        .queue("tm", 4)
        .for_tests()
        .build()
        .unwrap()
        .start();
    for id in &ids {
        finished_row(&store, *id).await;
    }
    let report = worker.shutdown().await;
    assert_eq!(report.stats.completed, 3, "{:?}", report.stats);

    // Enqueued from Rust: by queue and kind (the typed helper and the raw row alike).
    let enqueued = |kind| sample("job_enqueued_total", &[("queue", "tm"), ("kind", kind)]);
    assert_eq!(enqueued("tm.ok"), Some(2.0));
    assert_eq!(enqueued("tm.flaky"), Some(1.0));

    // Started: every handler that ran, once per attempt; the poison payload never started one.
    let started = |kind, owner| sample("job_started_total", &job(kind, owner));
    assert_eq!(started("tm.ok", BILLING), Some(1.0));
    assert_eq!(started("tm.flaky", BILLING), Some(2.0));
    assert_eq!(started("tm.snooze", NONE), Some(2.0));
    assert_eq!(started("tm.cancel", NONE), Some(1.0));
    assert_eq!(started("tm.terminal", NONE), Some(1.0));
    assert_eq!(started("tm.panic", NONE), Some(1.0));

    // Finished: by outcome and class, with the kind's owner.
    let expected = [
        ("tm.ok", BILLING, "completed", "none"),
        ("tm.ok", BILLING, "discarded", "poison"),
        ("tm.flaky", BILLING, "retried", "error"),
        ("tm.flaky", BILLING, "completed", "none"),
        ("tm.snooze", NONE, "snoozed", "none"),
        ("tm.snooze", NONE, "completed", "none"),
        ("tm.cancel", NONE, "cancelled", "none"),
        ("tm.terminal", NONE, "discarded", "terminal"),
        ("tm.panic", NONE, "discarded", "panic"),
    ];
    for (kind, owner, outcome, class) in expected {
        assert_eq!(
            finished(kind, owner, outcome, class),
            Some(1.0),
            "{kind} {outcome} {class}"
        );
    }
    // Nothing else finished, was lost, fenced or stuck in this queue.
    let mine = samples_with(("queue", "tm"));
    let finished_series = mine
        .iter()
        .filter(|s| s.name == "job_finished_total")
        .count();
    assert_eq!(finished_series, expected.len(), "{mine:#?}");
    for name in [
        "job_lease_lost_total",
        "job_fenced_total",
        "job_stuck_total",
    ] {
        assert!(!mine.iter().any(|s| s.name == name), "{name} in {mine:#?}");
    }

    // One duration per attempt that ran (by outcome), one queue wait per start.
    let durations = |kind, owner, outcome| {
        sample(
            "job_execution_duration_seconds_count",
            &with(job(kind, owner), &[("outcome", outcome)]),
        )
    };
    assert_eq!(durations("tm.flaky", BILLING, "retried"), Some(1.0));
    assert_eq!(durations("tm.flaky", BILLING, "completed"), Some(1.0));
    assert_eq!(durations("tm.panic", NONE, "discarded"), Some(1.0));
    assert_eq!(
        durations("tm.ok", BILLING, "discarded"),
        None,
        "the poison payload ran no handler"
    );
    let waits = |kind, owner| sample("job_queue_wait_seconds_count", &job(kind, owner));
    assert_eq!(waits("tm.flaky", BILLING), Some(2.0));
    assert_eq!(waits("tm.ok", BILLING), Some(1.0));

    // After shutdown the worker's slots are gone with it: nothing runs, waits or is free.
    assert_eq!(sample("job_in_flight", &[("queue", "tm")]), Some(0.0));
    assert_eq!(sample("job_free_slots", &[("queue", "tm")]), Some(0.0));
    assert_eq!(sample("job_prefetched", &[("queue", "tm")]), Some(0.0));
    db.close().await;
}

/// Holds its slot until the test lets it go.
#[derive(Clone)]
struct Gate(Arc<Semaphore>);

#[job(kind = "tm.gated", queue = "tm-slots")]
async fn tm_gated(ctx: JobContext) -> Result<(), JobError> {
    let gate = ctx.state::<Gate>()?.0.clone();
    let _pass = gate
        .acquire()
        .await
        .map_err(|e| JobError::retryable(e.to_string()))?;
    Ok(())
}

#[tokio::test]
async fn slot_gauges_show_a_saturated_queue_and_its_prefetched_jobs() {
    recorder();
    let db = TestDb::new().await;
    let store = db.store();
    for _ in 0..5 {
        TmGated {}.enqueue(&db.pool()).await.unwrap();
    }
    let gate = Gate(Arc::new(Semaphore::new(0)));
    let worker = Worker::builder(store.clone())
        .register::<TmGated>()
        .state(gate.clone())
        .queue("tm-slots", 2)
        .prefetch(2)
        .for_tests()
        .build()
        .unwrap()
        .start();
    let q = [("queue", "tm-slots")];
    until("both slots taken and two jobs prefetched", || {
        sample("job_in_flight", &q) == Some(2.0)
            && sample("job_free_slots", &q) == Some(0.0)
            && sample("job_prefetched", &q) == Some(2.0)
    })
    .await;
    gate.0.add_permits(5);
    wait_until_idle(&store, "tm-slots").await;
    until("every slot free again", || {
        sample("job_in_flight", &q) == Some(0.0) && sample("job_free_slots", &q) == Some(2.0)
    })
    .await;
    assert_eq!(sample("job_prefetched", &q), Some(0.0));
    worker.shutdown().await;
    db.close().await;
}

/// Two workers of one process on one queue: the queue's gauges are their sum, and a worker
/// that stops takes its slots with it (each set the gauges to its own values, the last one's
/// word, and a stopped worker's free slots stayed advertised).
#[tokio::test]
async fn the_slot_gauges_of_two_workers_on_one_queue_add_up() {
    recorder();
    let db = TestDb::new().await;
    let store = db.store();
    let start = |concurrency| {
        Worker::builder(store.clone())
            .register::<TmGated>()
            .state(Gate(Arc::new(Semaphore::new(0))))
            .queue("tm-two", concurrency)
            .for_tests()
            .build()
            .unwrap()
            .start()
    };
    let q = [("queue", "tm-two")];
    let first = start(2);
    let second = start(3);
    until("both workers' slots free", || {
        sample("job_free_slots", &q) == Some(5.0)
    })
    .await;
    assert_eq!(sample("job_in_flight", &q), Some(0.0));
    second.shutdown().await;
    assert_eq!(sample("job_free_slots", &q), Some(2.0));
    first.shutdown().await;
    assert_eq!(sample("job_free_slots", &q), Some(0.0));
    db.close().await;
}

#[job(kind = "tm.fence", queue = "tm-fence", owner = "ops")]
async fn tm_fence(ctx: JobContext) -> Result<(), JobError> {
    let gate = ctx.state::<Gate>()?.0.clone();
    let _pass = gate
        .acquire()
        .await
        .map_err(|e| JobError::retryable(e.to_string()))?;
    Ok(())
}

#[tokio::test]
async fn a_fenced_execution_counts_as_fenced_only_with_its_labels() {
    recorder();
    let db = TestDb::new().await;
    let id = TmFence {}.enqueue(&db.pool()).await.unwrap();
    let store = OutageStore::new(db.store(), Outage::default());
    let gate = Gate(Arc::new(Semaphore::new(0)));
    let worker = Worker::builder(store.clone())
        .register::<TmFence>()
        .state(gate.clone())
        .queue("tm-fence", 1)
        .for_tests()
        .build()
        .unwrap()
        .start();
    let labels = job("tm.fence", "ops");
    let labels = [("queue", "tm-fence"), labels[1], labels[2]];
    until("the handler started", || {
        sample("job_started_total", &labels) == Some(1.0)
    })
    .await;
    // Heartbeats fail for five leases: the worker stops the execution before its lease can
    // expire, and the rescuer gives the job to the next attempt afterwards.
    store.layer().fail_for(Duration::from_millis(1500));
    until("the execution fenced", || {
        sample("job_fenced_total", &labels) == Some(1.0)
    })
    .await;
    gate.0.add_permits(10);
    assert_eq!(
        finished_row(&db.store(), id).await.state,
        JobState::Completed
    );
    worker.shutdown().await;
    assert_eq!(sample("job_fenced_total", &labels), Some(1.0));
    assert_eq!(
        sample("job_lease_lost_total", &labels).unwrap_or(0.0),
        0.0,
        "the store never reported the lease lost: a fenced execution is not counted twice"
    );
    assert_eq!(sample("job_started_total", &labels), Some(2.0));
    db.close().await;
}

/// Opened by the test once the stuck execution has been counted: the blocking code waits for
/// it, so the count does not hang on how the keeper's ticks fall against a sleep.
static STUCK_RELEASE: AtomicBool = AtomicBool::new(false);

#[job(kind = "tm.stuck", queue = "tm-stuck", retry = 0, timeout = "50ms")]
async fn tm_stuck(ctx: JobContext) -> Result<(), JobError> {
    // Blocking work outlives the timeout by more than `stuck_after` (1 s for tests), until the
    // test has seen it counted (or 20 s have passed, so a failing test still ends).
    ctx.blocking(|| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !STUCK_RELEASE.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    })
    .await;
    Ok(())
}

#[tokio::test]
async fn code_running_past_its_timeout_counts_as_stuck_then_as_a_timeout() {
    recorder();
    let db = TestDb::new().await;
    let store = db.store();
    let id = TmStuck {}.enqueue(&db.pool()).await.unwrap();
    let worker = Worker::builder(store.clone())
        .register::<TmStuck>()
        .queue("tm-stuck", 1)
        .for_tests()
        .build()
        .unwrap()
        .start();
    let stuck = [
        ("queue", "tm-stuck"),
        ("kind", "tm.stuck"),
        ("owner", "none"),
    ];
    until("the execution to be counted stuck", || {
        sample("job_stuck_total", &stuck) == Some(1.0)
    })
    .await;
    STUCK_RELEASE.store(true, Ordering::SeqCst);
    let row = finished_row(&store, id).await;
    worker.shutdown().await;
    assert_eq!(row.state, JobState::Discarded);
    assert_eq!(sample("job_stuck_total", &stuck), Some(1.0), "counted once");
    let finished = with(stuck, &[("outcome", "discarded"), ("class", "timeout")]);
    assert_eq!(sample("job_finished_total", &finished), Some(1.0));
}

/// An attempt whose worker died is ended by another worker's rescuer, and counted there
/// (`job_rescued_total`): the dying worker counts nothing, and without it a crash loop showed
/// no failure at all. A deadline the pruner ends is counted too (`job_expired_total`).
#[tokio::test]
async fn rescued_and_expired_jobs_are_counted_where_they_are_written() {
    recorder();
    let db = TestDb::new().await;
    let store = db.store();
    let pool = db.pool();
    let count = |name: &str, outcome: &str| sample(name, &[("outcome", outcome)]).unwrap_or(0.0);
    let (retried, discarded) = (
        count("job_rescued_total", "retried"),
        count("job_rescued_total", "discarded"),
    );
    for max_attempts in [1, 5] {
        let id: i64 = sqlx::query_scalar(
            "SELECT job.enqueue('mr.crashed', '{}', queue => 'mr', max_attempts => $1)",
        )
        .bind(max_attempts)
        .fetch_one(&pool)
        .await
        .unwrap();
        // Claimed by a worker that then died while the attempt ran (its start recorded,
        // migration 0044): its lease ran out a minute ago.
        sqlx::query(
            "WITH t AS (SELECT gen_random_uuid() AS token) \
             UPDATE job.jobs SET state = 'running', attempt = 1, lock_token = t.token, \
             started_lease = t.token, locked_by = 'gone', \
             locked_until = now() - interval '1 minute' FROM t WHERE id = $1",
        )
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    }
    let rescued = job::Rescuer::new(store.clone(), job::RescuerConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!((rescued.retried, rescued.discarded), (1, 1));
    // Other tests of this binary may rescue too: at least ours.
    assert!(count("job_rescued_total", "retried") >= retried + 1.0);
    assert!(count("job_rescued_total", "discarded") >= discarded + 1.0);

    let expired = count("job_expired_total", "discarded");
    let id: i64 = sqlx::query_scalar(
        "SELECT job.enqueue('mr.late', '{}', queue => 'mr', deadline => now() + interval '1 hour')",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    sqlx::query("UPDATE job.jobs SET deadline = now() - interval '1 second' WHERE id = $1")
        .bind(id)
        .execute(&pool)
        .await
        .unwrap();
    let pruned = job::Pruner::new(store.clone(), job::PrunerConfig::default())
        .run_once()
        .await
        .unwrap();
    assert_eq!(pruned.expired.discarded, 1);
    assert!(count("job_expired_total", "discarded") >= expired + 1.0);
    db.close().await;
}

#[test]
fn a_worker_exposes_its_rescue_and_expiry_counters_from_zero() {
    // Created at their first increment, the counters started at that count: `increase()`
    // over a series whose first sample is already 1 sees nothing, so a single worker that kept
    // restarting (each life rescuing the last one's jobs) never fired
    // JobWorkersDyingWithWork. A worker registers them at 0 as it is built. (A recorder of
    // this thread's own: the process's is shared by every test.)
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let _guard = runtime.enter();
    // Nothing connects: building a worker reads no database.
    let pool = job::PgPool::connect_lazy("postgres://nobody@127.0.0.1:1/none").unwrap();
    metrics::with_local_recorder(&recorder, || {
        Worker::builder(PgStore::new(pool))
            .register::<TmOk>()
            .queue("tm", 1)
            .build()
            .unwrap();
    });
    let mut counters: Vec<(String, String)> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, value)| {
            matches!(value, metrics_util::debugging::DebugValue::Counter(0))
                && key.key().name().starts_with("job_")
        })
        .map(|(key, _, _, _)| {
            let outcome = key
                .key()
                .labels()
                .find(|l| l.key() == "outcome")
                .map(|l| l.value().to_owned())
                .unwrap_or_default();
            (key.key().name().to_owned(), outcome)
        })
        .collect();
    counters.sort();
    assert_eq!(
        counters,
        [
            ("job_expired_total".to_owned(), "cancelled".to_owned()),
            ("job_expired_total".to_owned(), "discarded".to_owned()),
            ("job_rescued_total".to_owned(), "discarded".to_owned()),
            ("job_rescued_total".to_owned(), "retried".to_owned()),
        ]
    );
}

#[job(kind = "tm.refused", queue = "tm-refused")]
async fn tm_refused(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[tokio::test]
async fn a_refused_enqueue_with_dependencies_is_not_counted_as_enqueued() {
    // The batch was counted when its rows were inserted, before its dependencies were refused
    // and the whole of it rolled back: job_enqueued_total counted jobs that never were.
    recorder();
    let db = TestDb::new().await;
    let pool = db.pool();
    let enqueued = || {
        sample(
            "job_enqueued_total",
            &[("queue", "tm-refused"), ("kind", "tm.refused")],
        )
        .unwrap_or(0.0)
    };
    let before = enqueued();
    Enqueue::new(TmRefused {})
        .depends_on([987_654_321])
        .enqueue(&pool)
        .await
        .expect_err("a dependency that does not exist");
    assert_eq!(enqueued(), before, "nothing was inserted");
    let on = TmRefused {}.enqueue(&pool).await.unwrap();
    Enqueue::new(TmRefused {})
        .depends_on([on])
        .enqueue(&pool)
        .await
        .unwrap();
    assert_eq!(enqueued(), before + 2.0);
    db.close().await;
}
