//! Progress: stored with the job through the lease keeper, one statement per heartbeat
//! whatever the rate of reports, readable through `Admin`, kept once the job finishes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use job::prelude::*;
use job::{BoxFuture, Call, Layered, Returned, StoreError, StoreLayer};
use job_testkit::prelude::*;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::support::{finished_row, recorder, sample};

/// Counts the store's calls by method: (calls, items sent).
#[derive(Clone, Default)]
struct Calls(Arc<Mutex<HashMap<&'static str, (usize, usize)>>>);

impl Calls {
    fn of(&self, name: &str) -> (usize, usize) {
        self.0
            .lock()
            .unwrap()
            .get(name)
            .copied()
            .unwrap_or_default()
    }
}

impl StoreLayer for Calls {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let mut calls = self.0.lock().unwrap();
        let entry = calls.entry(call.name).or_default();
        entry.0 += 1;
        entry.1 += call.sent;
        run
    }
}

const REPORTS: u32 = 100_000;

/// What the handler measured, and the gate it waits at.
#[derive(Clone)]
struct Bench {
    gate: Arc<Semaphore>,
    per_report: Arc<Mutex<Option<Duration>>>,
}

#[job(kind = "tm.progress", queue = "tm-progress", owner = "search")]
async fn tm_progress(ctx: JobContext) -> Result<(), JobError> {
    let bench = ctx.state::<Bench>()?.clone();
    let started = Instant::now();
    for i in 1..=REPORTS {
        ctx.progress(f64::from(i) / f64::from(REPORTS), "indexing");
    }
    *bench.per_report.lock().unwrap() = Some(started.elapsed() / REPORTS);
    ctx.progress(0.5, "half way");
    let _pass = bench
        .gate
        .acquire()
        .await
        .map_err(|e| JobError::retryable(e.to_string()))?;
    Ok(())
}

#[tokio::test]
async fn progress_is_written_with_the_heartbeat_and_read_through_admin() {
    recorder();
    let db = TestDb::new().await;
    let store = db.store();
    let calls = Calls::default();
    let bench = Bench {
        gate: Arc::new(Semaphore::new(0)),
        per_report: Arc::default(),
    };
    let id = TmProgress {}.enqueue(&db.pool()).await.unwrap();
    let worker = Worker::builder(Layered::new(store.clone(), calls.clone()))
        .register::<TmProgress>()
        .state(bench.clone())
        .queue("tm-progress", 1)
        .for_tests()
        // 100,001 reports in a debug build on a loaded machine can outlast the test lease of
        // 300 ms; a lost lease would run the job twice and double every count below.
        .configure(|c| c.lease = Some(Duration::from_secs(3)))
        .build()
        .unwrap()
        .start();

    let half = json!({ "fraction": 0.5, "message": "half way" });
    let deadline = Instant::now() + Duration::from_secs(20);
    let row = loop {
        let row = store.get(id).await.unwrap().unwrap();
        if row.progress.as_ref() == Some(&half) {
            break row;
        }
        assert!(Instant::now() < deadline, "progress never stored: {row:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(row.state, JobState::Running);
    assert!(row.progress_at.is_some());
    // Admin's listing shows it too, with the kind's owner.
    let listed = store
        .list(&JobFilter {
            kind: Some("tm.progress".into()),
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(listed[0].progress.as_ref(), Some(&half));
    assert_eq!(listed[0].owner.as_deref(), Some("search"));

    // 100,001 reports, and no more writes than heartbeats: they are written with the
    // lease keeper's beat, one statement for the worker's jobs, not one per report.
    let (saves, saved) = calls.of("save_progress");
    let (beats, _) = calls.of("heartbeat");
    assert!(
        saves >= 1 && saves <= beats,
        "{saves} saves for {beats} heartbeats"
    );
    assert_eq!(saved, saves, "one job, one item per statement");
    let reports = sample(
        "job_progress_reports_total",
        &[
            ("queue", "tm-progress"),
            ("kind", "tm.progress"),
            ("owner", "search"),
        ],
    );
    assert_eq!(reports, Some(f64::from(REPORTS) + 1.0));
    let per_report = bench.per_report.lock().unwrap().expect("measured");
    eprintln!("ctx.progress: {per_report:?} per report ({REPORTS} reports, debug build)");

    bench.gate.add_permits(1);
    let done = finished_row(&store, id).await;
    assert_eq!(done.state, JobState::Completed);
    assert_eq!(done.progress, Some(half), "kept once the job finished");
    worker.shutdown().await;
    db.close().await;
}

#[tokio::test]
async fn progress_is_recorded_only_under_the_jobs_lease() {
    use job::{ClaimKind, ClaimRequest, Finalize, Lease, Outcome};
    let db = TestDb::new().await;
    let store = db.store();
    let id = TmProgress {}.enqueue(&db.pool()).await.unwrap();
    let request = ClaimRequest {
        queue: "tm-progress".into(),
        kinds: vec![ClaimKind {
            kind: "tm.progress".into(),
            max_version: 1,
            lease: Duration::from_secs(30),
            concurrency: None,
            rate: None,
        }],
        limit: 1,
        worker_id: "test".into(),
    };
    let lease = store.claim(&request).await.unwrap()[0].lease;
    assert_eq!(lease.id, id);
    let report = |lease: Lease, fraction: f64| (lease, json!({ "fraction": fraction }).to_string());
    assert_eq!(
        store.save_progress(&[report(lease, 0.25)]).await.unwrap(),
        1
    );
    let stale = Lease {
        id,
        token: uuid::Uuid::new_v4(),
    };
    assert_eq!(
        store.save_progress(&[report(stale, 0.75)]).await.unwrap(),
        0
    );
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(row.progress, Some(json!({ "fraction": 0.25 })));
    store
        .finalize(&[Finalize {
            result: None,
            lease,
            outcome: Outcome::Complete,
        }])
        .await
        .unwrap();
    assert_eq!(
        store.save_progress(&[report(lease, 1.0)]).await.unwrap(),
        0,
        "a finished job's lease is gone"
    );
    let row = store.get(id).await.unwrap().unwrap();
    assert_eq!(row.progress, Some(json!({ "fraction": 0.25 })));
    db.close().await;
}

#[job(kind = "tm.quick_progress", queue = "tm-quick")]
async fn tm_quick_progress(ctx: JobContext) -> Result<(), JobError> {
    ctx.progress(0.5, "half way");
    ctx.progress(1.0, "done");
    Ok(())
}

#[tokio::test]
async fn the_last_report_before_the_job_ends_is_stored_with_it() {
    // The keeper writes progress with a heartbeat: a job that reports and ends before the next
    // one (here, within a lease of 30 s, before the first) had its last report dropped with
    // its execution. It is written just before the outcome.
    let db = TestDb::new().await;
    let store = db.store();
    let id = TmQuickProgress {}.enqueue(&db.pool()).await.unwrap();
    let worker = Worker::builder(store.clone())
        .register::<TmQuickProgress>()
        .queue("tm-quick", 1)
        .configure(|c| c.lease = Some(Duration::from_secs(30)))
        .poll_interval(Duration::from_millis(20))
        .build()
        .unwrap()
        .start();
    let done = finished_row(&store, id).await;
    worker.shutdown().await;
    assert_eq!(done.state, JobState::Completed);
    assert_eq!(
        done.progress,
        Some(json!({ "fraction": 1.0, "message": "done" })),
        "the last report, kept with the outcome"
    );
    db.close().await;
}

/// Reports progress on every row, as the README invites, with a value over the limit.
#[job(kind = "tm.rows", queue = "tm-rows")]
async fn tm_rows(ctx: JobContext, rows: u32) -> Result<(), JobError> {
    let detail = "x".repeat(job::MAX_PROGRESS + 1);
    for row in 0..rows {
        ctx.progress_value(&json!({ "row": row, "detail": detail }));
    }
    Ok(())
}

/// Counts the events of each level.
#[derive(Clone, Default)]
struct Levels(Arc<Mutex<HashMap<tracing::Level, usize>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Levels {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        *self
            .0
            .lock()
            .unwrap()
            .entry(*event.metadata().level())
            .or_default() += 1;
    }
}

#[test]
fn a_progress_value_not_stored_warns_once_an_attempt() {
    // Every report over the limit logged a WARN: a handler reporting each of 10,000 rows
    // logged 10,000 of them.
    use tracing_subscriber::layer::SubscriberExt;
    let levels = Levels::default();
    let subscriber = tracing_subscriber::registry().with(levels.clone());
    tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                assert_eq!(perform(TmRows { rows: 500 }).await, job::Outcome::Complete);
            });
    });
    let levels = levels.0.lock().unwrap();
    assert_eq!(levels.get(&tracing::Level::WARN), Some(&1), "{levels:?}");
    assert!(
        levels.get(&tracing::Level::DEBUG) >= Some(&499),
        "the others at DEBUG: {levels:?}"
    );
}

#[job(kind = "tm.hopeless", queue = "tm-hopeless")]
async fn tm_hopeless(_ctx: JobContext) -> Result<(), JobError> {
    Err(JobError::terminal("the card was declined\nforged line"))
}

/// What a `fmt` subscriber wrote, shared with the test.
#[derive(Clone, Default)]
struct Written(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Written {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_dead_letter_is_logged_at_warn_with_what_finds_it() {
    // A handler's failure was logged at DEBUG only, dead letter or not: at 3 a.m. the logs
    // said nothing of the jobs that now wait for an operator.
    let written = Written::default();
    let sink = written.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    let id = tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let db = TestDb::new().await;
                let id = crate::support::dead_letter(&db, TmHopeless {}, "tm-hopeless").await;
                db.close().await;
                id
            })
    });
    let text = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains("dead letter"))
        .unwrap_or_else(|| panic!("no dead letter logged: {text}"));
    assert!(line.contains(" WARN "), "{line}");
    for field in [
        format!("id={id}"),
        "kind=tm.hopeless".to_owned(),
        "queue=tm-hopeless".to_owned(),
        "class=\"terminal\"".to_owned(),
        // The message escaped: a newline in it cannot forge a log line.
        "the card was declined\\nforged line".to_owned(),
    ] {
        assert!(line.contains(&field), "{field} in {line}");
    }
}
