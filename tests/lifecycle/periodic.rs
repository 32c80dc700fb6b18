//! Periodic jobs: many schedulers, one job per period, decided by the unique index.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{
    BuildError, Job, JobContext, JobError, JobState, Periodic, Scheduled, Scheduler,
    SchedulerConfig,
};
use serde::{Deserialize, Serialize};

use crate::common::*;

/// A payload of free text: a NUL in it is refused at every door.
#[derive(Debug, Serialize, Deserialize)]
struct Text {
    s: String,
}

impl Job for Text {
    const KIND: &'static str = "test.text";

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

#[tokio::test]
async fn three_workers_on_one_schedule_enqueue_exactly_one_job_per_period() {
    let h = Harness::new().await;
    let workers: Vec<_> = (0..3)
        .map(|i| {
            h.worker()
                .id(format!("periodic-{i}"))
                .periodic("* * * * * *", || Noop { n: 42 })
                .build()
                .unwrap()
                .start()
        })
        .collect();
    eventually("three periods to run", || async {
        (count_in(&h.store, JobState::Completed).await >= 3).then_some(())
    })
    .await;
    for w in workers {
        w.shutdown().await;
    }
    let per_key: Vec<(String, i64)> = sqlx::query_as(
        "SELECT unique_key, count(*) FROM job.jobs WHERE kind = 'test.noop'
         GROUP BY unique_key ORDER BY unique_key",
    )
    .fetch_all(h.store.pool())
    .await
    .unwrap();
    assert!(per_key.len() >= 3, "{per_key:?}");
    for (key, n) in &per_key {
        assert!(key.starts_with("periodic:test.noop:"), "{key}");
        assert_eq!(*n, 1, "period {key} fired {n} times");
    }
    let completed = count_in(&h.store, JobState::Completed).await;
    assert_eq!(h.ledger.total() as i64, completed, "each period ran once");
}

#[tokio::test]
async fn a_periodic_job_runs_at_its_period_start_not_before() {
    let h = Harness::new().await;
    let worker = h
        .worker()
        .periodic("*/2 * * * * *", || Noop { n: 1 })
        .build()
        .unwrap()
        .start();
    let id: i64 = eventually("a period to complete", || async {
        sqlx::query_scalar("SELECT id FROM job.jobs WHERE state = 'completed' LIMIT 1")
            .fetch_optional(h.store.pool())
            .await
            .unwrap()
    })
    .await;
    worker.shutdown().await;
    let row = h.row(id).await;
    let key = row.unique_key.unwrap();
    let period = key.trim_start_matches("periodic:test.noop:");
    let period: chrono::DateTime<chrono::Utc> = period.parse().unwrap();
    assert_eq!(row.run_at, period);
    assert_eq!(chrono::Timelike::second(&period) % 2, 0);
    assert!(row.finalized_at.unwrap() >= period);
}

#[test]
fn an_invalid_cron_expression_is_a_build_error_naming_it() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(async { job_testkit::TestDb::new().await.store() });
    let err = job::Worker::builder(store)
        .register::<Noop>()
        .queue("default", 1)
        .periodic("every tuesday", || Noop { n: 1 })
        .build()
        .err()
        .expect("refused");
    match &err {
        BuildError::InvalidSchedule {
            kind, expression, ..
        } => {
            assert_eq!(kind, "test.noop");
            assert_eq!(expression, "every tuesday");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(err.to_string().contains("`every tuesday`"), "{err}");
    let _ = Duration::ZERO;
}

#[tokio::test]
async fn a_refused_periodic_job_does_not_stop_the_schedules_after_it() {
    let h = Harness::new().await;
    // Its first job (the sample `Periodic::new` checks) is fine; every later one is refused.
    let sampled = Arc::new(AtomicBool::new(false));
    let refused = Periodic::new("* * * * * *", move || Text {
        s: if sampled.swap(true, Ordering::SeqCst) {
            "a\0b".into()
        } else {
            "ab".into()
        },
    })
    .expect("the sample is fine");
    let fine = Periodic::new("* * * * * *", || Noop { n: 7 }).unwrap();
    let scheduler = Scheduler::new(
        h.store.clone(),
        vec![refused, fine],
        SchedulerConfig::default(),
    );
    let now = chrono::Utc::now();
    let done = scheduler
        .run_once(now)
        .await
        .expect("a refusal is no failed look");
    assert_eq!(
        done,
        Scheduled {
            enqueued: 1,
            duplicates: 0,
            refused: 1,
            gaps: 0,
            ended: 0
        }
    );
    let kinds: Vec<String> = sqlx::query_scalar("SELECT kind FROM job.jobs")
        .fetch_all(h.store.pool())
        .await
        .unwrap();
    assert_eq!(kinds, ["test.noop"]);
    // The refused period is not tried again; the next look has nothing new to do.
    let again = scheduler.run_once(now).await.unwrap();
    assert_eq!(again, Scheduled::default());
}

#[test]
fn a_periodic_job_every_door_would_refuse_is_a_build_error_naming_its_schedule() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(async { job_testkit::TestDb::new().await.store() });
    let err = job::Worker::builder(store)
        .register::<Noop>()
        .queue("default", 1)
        .periodic("* * * * * *", || Text { s: "a\0b".into() })
        .periodic("* * * * * *", || Noop { n: 7 })
        .build()
        .err()
        .expect("refused");
    assert!(
        matches!(
            err,
            BuildError::InvalidOption {
                option: "periodic",
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    for part in ["`test.text`", "`* * * * * *`", "NUL"] {
        assert!(message.contains(part), "{message}");
    }
}

#[test]
fn a_periodic_job_whose_making_panics_is_a_build_error_naming_its_schedule() {
    // `make` is sampled in `.periodic(..)`: its panic escaped the builder.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(async { job_testkit::TestDb::new().await.store() });
    let err = job::Worker::builder(store)
        .register::<Noop>()
        .queue("default", 1)
        .periodic("* * * * * *", || -> Text { panic!("no payload today") })
        .build()
        .err()
        .expect("refused");
    assert!(
        matches!(
            err,
            BuildError::InvalidOption {
                option: "periodic",
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    for part in [
        "`test.text`",
        "`* * * * * *`",
        "panicked",
        "no payload today",
    ] {
        assert!(message.contains(part), "{message}");
    }
}

#[tokio::test]
async fn a_schedule_more_frequent_than_the_looks_loses_no_period() {
    // A look every minute, a period every 10 seconds: each look enqueues every period that
    // starts before the next look. Before, it enqueued the next one only, and five of six
    // periods never ran.
    let h = Harness::new().await;
    let every_ten = Periodic::new("*/10 * * * * *", || Noop { n: 1 }).unwrap();
    let scheduler = Scheduler::new(
        h.store.clone(),
        vec![every_ten],
        SchedulerConfig {
            interval: Duration::from_secs(60),
        },
    );
    let now = chrono::Utc::now();
    let done = scheduler.run_once(now).await.unwrap();
    assert_eq!(done.enqueued, 6, "{done:?}");
    let again = scheduler
        .run_once(now + chrono::Duration::seconds(60))
        .await
        .unwrap();
    assert_eq!(
        again.enqueued, 6,
        "the next minute's, none twice: {again:?}"
    );
    let periods: i64 = sqlx::query_scalar("SELECT count(DISTINCT run_at) FROM job.jobs")
        .fetch_one(h.store.pool())
        .await
        .unwrap();
    assert_eq!(periods, 12);

    // A look every 5 minutes, a period every second: 300 periods per look, more than the 100
    // a late look catches up on. Before, each on-time look enqueued 100 (the next look went on
    // from the last, ever further behind), and the third look warned of a gap it did not have.
    let every_second = Periodic::new("* * * * * *", || Text { s: "s".into() }).unwrap();
    let scheduler = Scheduler::new(
        h.store.clone(),
        vec![every_second],
        SchedulerConfig {
            interval: Duration::from_secs(300),
        },
    );
    for look in 0..3 {
        let at = now + chrono::Duration::seconds(300 * look);
        let done = scheduler.run_once(at).await.unwrap();
        assert_eq!(
            (done.enqueued, done.gaps),
            (300, 0),
            "look {look}: {done:?}"
        );
    }
    let (periods, first, last): (
        i64,
        chrono::DateTime<chrono::Utc>,
        chrono::DateTime<chrono::Utc>,
    ) = sqlx::query_as(
        "SELECT count(DISTINCT run_at), min(run_at), max(run_at) FROM job.jobs
         WHERE kind = 'test.text'",
    )
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    assert_eq!(periods, 900);
    assert_eq!((last - first).num_seconds() + 1, 900, "no second skipped");
    assert!(
        last <= now + chrono::Duration::seconds(900) && last > now + chrono::Duration::seconds(899),
        "every period up to the last look's horizon, {last}"
    );
}

#[tokio::test]
async fn a_look_late_by_more_periods_than_it_catches_up_on_says_so_and_goes_on_from_now() {
    // Looks every 2 minutes, a period every second, a look 150 s late: of the 150 periods it
    // missed it enqueues 100 (due at once), says the rest were skipped, and enqueues its own.
    let h = Harness::new().await;
    let every_second = Periodic::new("* * * * * *", || Noop { n: 1 }).unwrap();
    let scheduler = Scheduler::new(
        h.store.clone(),
        vec![every_second],
        SchedulerConfig {
            interval: Duration::from_secs(120),
        },
    );
    let t0 = chrono::Utc::now();
    assert_eq!(scheduler.run_once(t0).await.unwrap().enqueued, 120);
    let late = scheduler
        .run_once(t0 + chrono::Duration::seconds(270))
        .await
        .unwrap();
    assert_eq!((late.enqueued, late.gaps), (100 + 120, 1), "{late:?}");
}

#[test]
fn two_schedules_of_one_kind_or_one_that_never_fires_are_build_errors() {
    // Two schedules of one kind share its periods' unique keys: the periods they share would
    // run once, for whichever enqueued first. An expression with no period after now would be
    // skipped on every look, silently.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(async { job_testkit::TestDb::new().await.store() });
    let err = job::Worker::builder(store)
        .register::<Noop>()
        .queue("default", 1)
        .periodic("0 0 * * * *", || Noop { n: 1 })
        .periodic("0 0 0 * * *", || Noop { n: 2 })
        .build()
        .err()
        .expect("refused");
    let text = err.to_string();
    assert!(
        text.contains("two schedules") && text.contains("`0 0 0 * * *`"),
        "{text}"
    );
    for never in ["0 0 0 30 2 *", "0 0 0 1 1 * 2024"] {
        let err = Periodic::new(never, || Noop { n: 1 }).unwrap_err();
        assert!(
            matches!(err, BuildError::InvalidSchedule { .. }),
            "{never}: {err:?}"
        );
    }
}

#[tokio::test]
async fn a_look_that_comes_late_enqueues_the_periods_it_missed() {
    // Looks every second, a period every second: a look 3 s late (a slow pass) enqueues the
    // periods since the last one it saw, due at once, rather than skip them.
    let h = Harness::new().await;
    let every_second = Periodic::new("* * * * * *", || Noop { n: 1 }).unwrap();
    let scheduler = Scheduler::new(
        h.store.clone(),
        vec![every_second],
        SchedulerConfig {
            interval: Duration::from_secs(1),
        },
    );
    let t0 = chrono::Utc::now();
    assert_eq!(scheduler.run_once(t0).await.unwrap().enqueued, 1);
    scheduler
        .run_once(t0 + chrono::Duration::seconds(3))
        .await
        .unwrap();
    let (periods, first, last): (
        i64,
        chrono::DateTime<chrono::Utc>,
        chrono::DateTime<chrono::Utc>,
    ) = sqlx::query_as("SELECT count(DISTINCT run_at), min(run_at), max(run_at) FROM job.jobs")
        .fetch_one(h.store.pool())
        .await
        .unwrap();
    assert_eq!(
        (last - first).num_seconds() + 1,
        periods,
        "no second skipped between {first} and {last}"
    );
    assert!(periods >= 4, "{periods} periods from {first} to {last}");
}

#[tokio::test]
async fn a_schedule_whose_job_panics_does_not_stop_the_schedules_after_it() {
    let h = Harness::new().await;
    // Its first job (the sample `Periodic::new` makes) is fine; every later one panics.
    let sampled = Arc::new(AtomicBool::new(false));
    let panics = Periodic::new("* * * * * *", move || {
        if sampled.swap(true, Ordering::SeqCst) {
            panic!("the payload could not be made");
        }
        Text { s: "ab".into() }
    })
    .expect("the sample is fine");
    let fine = Periodic::new("* * * * * *", || Noop { n: 7 }).unwrap();
    let scheduler = Scheduler::new(
        h.store.clone(),
        vec![panics, fine],
        SchedulerConfig::default(),
    );
    let done = scheduler
        .run_once(chrono::Utc::now())
        .await
        .expect("a panic in one schedule is no failed look");
    assert_eq!((done.enqueued, done.refused), (1, 1), "{done:?}");
    let kinds: Vec<String> = sqlx::query_scalar("SELECT kind FROM job.jobs")
        .fetch_all(h.store.pool())
        .await
        .unwrap();
    assert_eq!(kinds, ["test.noop"]);
}

#[tokio::test]
async fn a_look_past_what_it_catches_up_on_says_so() {
    // A look ten minutes after the last (the clock stepped forward, or the process was away)
    // goes on from now rather than run a backlog, and says which schedules it did not catch
    // up on (and logs them at WARN): a skipped run is never silent.
    let h = Harness::new().await;
    let every_minute = Periodic::new("0 * * * * *", || Noop { n: 1 }).unwrap();
    let scheduler = Scheduler::new(
        h.store.clone(),
        vec![every_minute],
        SchedulerConfig::default(),
    );
    let t0 = chrono::Utc::now();
    assert_eq!(scheduler.run_once(t0).await.unwrap().gaps, 0);
    let late = scheduler
        .run_once(t0 + chrono::Duration::minutes(10))
        .await
        .unwrap();
    assert_eq!((late.gaps, late.enqueued), (1, 1), "{late:?}");
}

#[test]
fn a_completed_retention_within_the_schedulers_catch_up_is_a_build_error() {
    // A period's unique key, held until it is pruned, is all that keeps a late look from
    // enqueueing again a period another worker ran: with completed periods pruned sooner than
    // a look looks back (its interval and 60 s), a worker that missed some looks ran them twice.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(async { job_testkit::TestDb::new().await.store() });
    let built = |retention: Duration| {
        job::Worker::builder(store.clone())
            .register::<Noop>()
            .queue("default", 1)
            .periodic("* * * * * *", || Noop { n: 1 })
            .pruner(job::PrunerConfig {
                completed_retention: retention,
                ..job::PrunerConfig::default()
            })
            .build()
    };
    let err = built(Duration::from_secs(5)).err().expect("refused");
    assert!(
        matches!(
            &err,
            BuildError::InvalidOption {
                option: "completed_retention",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("catches up"), "{err}");
    assert!(built(Duration::from_secs(62)).is_ok());
    // So for cancelled periods: one cancelled to skip it, pruned within the catch-up, was
    // enqueued again by a late look, and ran.
    let err = job::Worker::builder(store.clone())
        .register::<Noop>()
        .queue("default", 1)
        .periodic("* * * * * *", || Noop { n: 1 })
        .pruner(job::PrunerConfig {
            cancelled_retention: Duration::ZERO,
            ..job::PrunerConfig::default()
        })
        .build()
        .err()
        .expect("refused");
    assert!(
        matches!(
            &err,
            BuildError::InvalidOption {
                option: "cancelled_retention",
                ..
            }
        ),
        "{err:?}"
    );
}

/// A schedule with a year ends: the first look after its last period says so (`ended`, and a
/// WARN naming it), once, rather than a schedule that silently never fires again.
#[tokio::test]
async fn a_schedule_whose_last_period_has_passed_is_said_to_have_ended_once() {
    let h = Harness::new().await;
    let now = chrono::Utc::now();
    let year = chrono::Datelike::year(&now) + 1;
    let once = Periodic::new(&format!("0 0 0 1 1 * {year}"), || Noop { n: 1 }).unwrap();
    let scheduler = Scheduler::new(h.store.clone(), vec![once], SchedulerConfig::default());
    let first = scheduler.run_once(now).await.unwrap();
    assert_eq!((first.enqueued, first.ended), (1, 0), "{first:?}");
    let after = now + chrono::Duration::days(400);
    let done = scheduler.run_once(after).await.unwrap();
    assert_eq!(
        done,
        Scheduled {
            ended: 1,
            ..Scheduled::default()
        }
    );
    let again = scheduler
        .run_once(after + chrono::Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(again, Scheduled::default(), "said once");
}
