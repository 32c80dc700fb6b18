//! The reporter: the database-derived gauges, exact, from one worker at a time, handed over
//! when the holder stops reporting; gauges of what is gone go back to zero.

use std::time::Duration;

use chrono::Utc;
use job::prelude::*;
use job::{Admin, Pause, Reporter, ReporterConfig};
use job_testkit::prelude::*;

use crate::support::{dead_letter, finished_row, recorder, sample};

#[job(kind = "tr.idle", queue = "rq")]
async fn tr_idle(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(kind = "tr.dead", queue = "rq-dead", owner = "billing")]
async fn tr_dead(_ctx: JobContext) -> Result<(), JobError> {
    Err(JobError::terminal("never works"))
}

/// A reporter passing every second: it holds the role for 3 s, more than a loaded run takes
/// between two of the test's passes (at 100 ms, the 300 ms hold could lapse between them).
fn reporter(store: &PgStore, holder: &str) -> Reporter<PgStore> {
    let config = ReporterConfig {
        interval: Duration::from_secs(1),
        ..ReporterConfig::default()
    };
    Reporter::new(
        store.clone(),
        config,
        holder,
        vec![("tr.dead".into(), "billing".into())],
    )
}

#[tokio::test]
async fn one_worker_reports_exact_gauges_and_hands_the_role_over() {
    recorder();
    let db = TestDb::new().await;
    let store = db.store();
    let pool = db.pool();
    // Waiting in `rq` (no worker runs it): 3 due, one of them due for an hour, 2 scheduled.
    TrIdle {}.enqueue(&pool).await.unwrap();
    Enqueue::new(TrIdle {})
        .priority(5)
        .enqueue(&pool)
        .await
        .unwrap();
    let hour_ago = Utc::now() - chrono::Duration::hours(1);
    Enqueue::new(TrIdle {})
        .run_at(hour_ago)
        .enqueue(&pool)
        .await
        .unwrap();
    for _ in 0..2 {
        Enqueue::new(TrIdle {})
            .schedule_in(Duration::from_secs(3600))
            .enqueue(&pool)
            .await
            .unwrap();
    }
    // Two dead letters in `rq-dead`.
    let dead = [
        TrDead {}.enqueue(&pool).await.unwrap(),
        TrDead {}.enqueue(&pool).await.unwrap(),
    ];
    let worker = Worker::builder(store.clone())
        .register::<TrDead>()
        .queue("rq-dead", 2)
        .configure(|c| c.reporter.enabled = false)
        .for_tests()
        .build()
        .unwrap()
        .start();
    for id in dead {
        assert_eq!(finished_row(&store, id).await.state, JobState::Discarded);
    }
    worker.shutdown().await;

    let mut a = reporter(&store, "worker-a");
    let mut b = reporter(&store, "worker-b");
    let report = a
        .run_once()
        .await
        .unwrap()
        .expect("the first asker takes the role");
    let count = |queue: &str, state: JobState| {
        report
            .jobs
            .iter()
            .find(|c| c.queue == queue && c.state == state)
            .map(|c| c.count)
    };
    assert_eq!(count("rq", JobState::Available), Some(3));
    assert_eq!(count("rq", JobState::Scheduled), Some(2));
    assert_eq!(count("rq-dead", JobState::Discarded), Some(2));
    assert_eq!(report.jobs.len(), 3, "{:?}", report.jobs);
    assert_eq!(report.oldest_due.len(), 1, "{:?}", report.oldest_due);
    let (queue, age) = &report.oldest_due[0];
    assert_eq!(queue, "rq");
    assert!(
        (3590..3700).contains(&age.as_secs()),
        "the job due an hour ago: {age:?}"
    );
    assert_eq!(report.dead_letters.len(), 1);
    let d = &report.dead_letters[0];
    assert_eq!(
        (
            d.queue.as_str(),
            d.kind.as_str(),
            d.owner.as_deref(),
            d.count
        ),
        ("rq-dead", "tr.dead", Some("billing"), 2)
    );

    // The gauges, as an exporter shows them.
    let jobs = |queue, state| sample("job_jobs", &[("queue", queue), ("state", state)]);
    assert_eq!(jobs("rq", "available"), Some(3.0));
    assert_eq!(jobs("rq", "scheduled"), Some(2.0));
    assert_eq!(jobs("rq-dead", "discarded"), Some(2.0));
    let dead_letters = || {
        sample(
            "job_dead_letters",
            &[
                ("queue", "rq-dead"),
                ("kind", "tr.dead"),
                ("owner", "billing"),
            ],
        )
    };
    assert_eq!(dead_letters(), Some(2.0));
    let oldest = sample("job_oldest_due_age_seconds", &[("queue", "rq")]).unwrap();
    assert!((3590.0..3700.0).contains(&oldest), "{oldest}");

    // One at a time: the other asks and is refused while the holder keeps reporting.
    assert_eq!(b.run_once().await.unwrap(), None);
    assert!(a.run_once().await.unwrap().is_some());
    assert_eq!(b.run_once().await.unwrap(), None);

    // A pass that only keeps the role (the holder's passes between two slow readings) reads
    // nothing: an empty report for the holder, which keeps the role, and nothing for another.
    let keep = |holder: &str| job::ReportRequest {
        holder: holder.into(),
        hold_for: Duration::from_secs(3),
        owners: Vec::new(),
        read: false,
    };
    assert_eq!(
        store.report(&keep("worker-a")).await.unwrap(),
        Some(job::Report::default())
    );
    assert_eq!(store.report(&keep("worker-b")).await.unwrap(), None);
    assert_eq!(
        jobs("rq", "available"),
        Some(3.0),
        "the gauges keep their values"
    );

    // Purged dead letters go back to zero at the holder's next pass.
    store.purge(&JobFilter::dead_letters()).await.unwrap();
    a.run_once().await.unwrap().expect("still the holder");
    assert_eq!(dead_letters(), Some(0.0));
    assert_eq!(jobs("rq-dead", "discarded"), Some(0.0));

    // A holder that stops reporting loses the role when its time runs out (3 intervals).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if b.run_once().await.unwrap().is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the role never moved"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(a.run_once().await.unwrap(), None, "b holds the role now");

    // A holder that gives the role up (as a stopping worker does) hands it over at once, not
    // after three intervals (here 3 minutes).
    let slow = |holder: &str| {
        let config = ReporterConfig {
            interval: Duration::from_secs(60),
            ..ReporterConfig::default()
        };
        Reporter::new(store.clone(), config, holder, Vec::new())
    };
    let (mut c, mut d) = (slow("worker-c"), slow("worker-d"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while c.run_once().await.unwrap().is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "b's role never lapsed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        d.run_once().await.unwrap(),
        None,
        "c holds the role for 3 minutes"
    );
    d.release().await.unwrap();
    assert_eq!(
        b.run_once().await.unwrap(),
        None,
        "one that does not hold it gives nothing up"
    );
    c.release().await.unwrap();
    d.run_once()
        .await
        .unwrap()
        .expect("d takes the role c gave up");
    assert_eq!(c.run_once().await.unwrap(), None, "d holds the role now");
    db.close().await;
}

#[job(
    kind = "tr.broken",
    queue = "rq-broken",
    retry = 100,
    backoff(base = "10ms", cap = "10ms"),
    breaker(failure_percent = 100, min_attempts = 3)
)]
async fn tr_broken(_ctx: JobContext) -> Result<(), JobError> {
    Err(JobError::retryable("the partner is down"))
}

#[tokio::test]
async fn a_tripped_breaker_is_counted_and_its_pause_reported_until_resumed() {
    recorder();
    let db = TestDb::new().await;
    let store = db.store();
    for _ in 0..5 {
        TrBroken {}.enqueue(&db.pool()).await.unwrap();
    }
    let worker = Worker::builder(store.clone())
        .register::<TrBroken>()
        .queue("rq-broken", 2)
        .configure(|c| c.reporter.enabled = false)
        .for_tests()
        .build()
        .unwrap()
        .start();
    let trips = || sample("job_breaker_trips_total", &[("kind", "tr.broken")]);
    crate::support::until("the breaker to trip", || trips() == Some(1.0)).await;
    worker.shutdown().await;
    assert_eq!(
        trips(),
        Some(1.0),
        "one trip, however many attempts failed after it"
    );

    let paused = || {
        sample(
            "job_paused",
            &[
                ("scope", "kind"),
                ("name", "tr.broken"),
                ("paused_by", "breaker"),
            ],
        )
    };
    let mut r = reporter(&store, "worker-breaker");
    let report = r.run_once().await.unwrap().expect("the only reporter");
    let entry = report
        .paused
        .iter()
        .find(|p| p.what == Pause::Kind("tr.broken".into()))
        .expect("the breaker's pause is reported");
    assert_eq!(entry.paused_by, job::PausedBy::Breaker);
    assert!(entry
        .reason
        .as_deref()
        .is_some_and(|r| r.contains("attempts failed (100%)")));
    assert_eq!(paused(), Some(1.0));
    assert!(store
        .resume(&Pause::Kind("tr.broken".into()))
        .await
        .unwrap());
    r.run_once().await.unwrap().expect("still the reporter");
    assert_eq!(paused(), Some(0.0));
    db.close().await;
}

#[tokio::test]
async fn a_worker_that_does_not_report_still_records_its_kinds_owners() {
    // Owners come from the workers that run the kinds: one that opts out of reporting (the
    // gauges read by an ops worker elsewhere) must still say who owns its kinds, or their
    // dead letters are labelled `owner="none"` and their rows have no owner.
    let db = TestDb::new().await;
    let store = db.store();
    let worker = Worker::builder(store.clone())
        .register::<TrDead>()
        .queue("rq-dead", 1)
        .configure(|c| c.reporter.enabled = false)
        .for_tests()
        .build()
        .unwrap()
        .start();
    let owner = || async {
        sqlx::query_scalar::<_, String>("SELECT owner FROM job.kind_owners WHERE kind = 'tr.dead'")
            .fetch_optional(&db.pool())
            .await
            .unwrap()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while owner().await.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the owner was never recorded"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    worker.shutdown().await;
    assert_eq!(owner().await.as_deref(), Some("billing"));
    let holder: Option<String> = sqlx::query_scalar(
        "SELECT holder FROM job.leaders WHERE role = 'reporter' AND until > now()",
    )
    .fetch_optional(&db.pool())
    .await
    .unwrap();
    assert_eq!(holder, None, "it took no reporter's role");
    db.close().await;
}

#[job(kind = "tr.gone", queue = "rq-gone")]
async fn tr_gone(_ctx: JobContext) -> Result<(), JobError> {
    Err(JobError::terminal("never works"))
}

#[job(kind = "tr.gone_keep", queue = "rq-gone-keep")]
async fn tr_gone_keep(_ctx: JobContext) -> Result<(), JobError> {
    Err(JobError::terminal("never works"))
}

fn dead_letters(queue: &str, kind: &str) -> Option<f64> {
    sample(
        "job_dead_letters",
        &[("queue", queue), ("kind", kind), ("owner", "none")],
    )
}

fn gone_dead_letters() -> Option<f64> {
    dead_letters("rq-gone", "tr.gone")
}

fn kept_dead_letters() -> Option<f64> {
    dead_letters("rq-gone-keep", "tr.gone_keep")
}

#[tokio::test]
async fn a_reporter_that_lost_the_role_leaves_the_new_holders_gauges_alone() {
    // Two workers of one process: the one whose role lapsed without its noticing (a late pass)
    // set what it had reported back to zero at its next pass, over what the new holder had
    // just reported: a dead letter the database holds read 0 under a leader of 1.
    recorder();
    let db = TestDb::new().await;
    let (store, pool) = (db.store(), db.pool());
    dead_letter(&db, TrGone {}, "rq-gone").await;
    let config = ReporterConfig {
        interval: Duration::from_secs(1),
        ..ReporterConfig::default()
    };
    let mut a = Reporter::new(store.clone(), config, "tr-a", Vec::new());
    let mut b = Reporter::new(store.clone(), config, "tr-b", Vec::new());
    a.run_once().await.unwrap().expect("a takes the role");
    assert_eq!(gone_dead_letters(), Some(1.0));
    sqlx::query(
        "UPDATE job.leaders SET until = now() - interval '1 second' WHERE role = 'reporter'",
    )
    .execute(&pool)
    .await
    .unwrap();
    b.run_once()
        .await
        .unwrap()
        .expect("b takes the lapsed role");
    assert_eq!(a.run_once().await.unwrap(), None, "b holds the role");
    assert_eq!(
        gone_dead_letters(),
        Some(1.0),
        "what b reported stays while b holds the role"
    );
    // Purged, then b gives the role up: what b set goes back to zero.
    store.purge(&job::JobFilter::dead_letters()).await.unwrap();
    b.release().await.unwrap();
    assert_eq!(gone_dead_letters(), Some(0.0));
    db.close().await;
}

/// Fails the next `report` call when armed.
#[derive(Clone, Default)]
struct FailNextReport(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl job::StoreLayer for FailNextReport {
    fn call<'a, T: job::Returned + Send + 'a>(
        &'a self,
        call: job::Call,
        run: job::BoxFuture<'a, Result<T, job::StoreError>>,
    ) -> job::BoxFuture<'a, Result<T, job::StoreError>> {
        let fail = call.name == "report" && self.0.swap(false, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            if fail {
                return Err(job::StoreError::new("connection reset (injected)"));
            }
            run.await
        })
    }
}

#[tokio::test]
async fn a_holder_whose_keep_role_pass_failed_reads_again_as_soon_as_it_holds_the_role() {
    // Between two readings (minutes apart on a large table) a holder's passes only keep the
    // role. One of them failing set the gauges to zero; the next kept the role again, and the
    // leader gauge said 1 over gauges at zero until the next reading: alerts resolved, then
    // paged again.
    recorder();
    let db = TestDb::new().await;
    dead_letter(&db, TrGoneKeep {}, "rq-gone-keep").await;
    let layer = FailNextReport::default();
    let store = job::Layered::new(db.store(), layer.clone());
    let config = ReporterConfig {
        // The next reading a minute away: every pass of this test but the first keeps the
        // role only, unless the reporter reads at once.
        interval: Duration::from_secs(60),
        ..ReporterConfig::default()
    };
    let mut reporter = Reporter::new(store, config, "tr-keep", Vec::new());
    reporter.worker_pass().await.unwrap();
    assert_eq!(kept_dead_letters(), Some(1.0), "the first pass reads");
    layer.0.store(true, std::sync::atomic::Ordering::SeqCst);
    reporter
        .worker_pass()
        .await
        .expect_err("the injected failure");
    assert_eq!(kept_dead_letters(), Some(0.0), "not read by anybody now");
    reporter.worker_pass().await.unwrap();
    assert_eq!(
        kept_dead_letters(),
        Some(1.0),
        "holding the role again, it reads at once"
    );
    reporter.release().await.unwrap();
    db.close().await;
}
