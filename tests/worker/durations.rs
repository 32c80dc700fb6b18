//! Durations have one bound, `MAX_DURATION` (100 years): `build()` refuses a longer worker
//! setting or kind timeout or lease, naming it, and a worker whose every duration is the bound
//! itself runs: its lease keeper renews and fences as with the defaults. The periods of the
//! worker's loops have a floor, `MIN_INTERVAL` (10 ms), refused below in the same way, and the
//! bound of a store call, `store_timeout`, a floor of its own: 1 s; the rescuer's hold after a
//! jump of the clock, `rescuer.after_clock_jump`, a bound of its own: 1 day.

use std::sync::Arc;
use std::time::Duration;

use job::{
    BuildError, Job, JobContext, JobError, JobOptions, JobState, PgStore, RescuerConfig,
    WorkerBuilder, WorkerConfig, MAX_DURATION, MIN_INTERVAL,
};
use serde::{Deserialize, Serialize};
use tokio::sync::Semaphore;

use crate::common::*;

/// Over the bound by a nanosecond, and as far over as a `Duration` goes.
const TOO_LONG: [Duration; 2] = [
    MAX_DURATION.saturating_add(Duration::from_nanos(1)),
    Duration::MAX,
];

/// Opened by the test to let [`HeldLong`] finish.
#[derive(Clone)]
struct Release(Arc<Semaphore>);

/// Holds its slot until [`Release`] opens, under a short lease and the longest timeout.
#[derive(Debug, Serialize, Deserialize)]
struct HeldLong {}

impl Job for HeldLong {
    const KIND: &'static str = "test.held_long";
    const OPTIONS: JobOptions = JobOptions {
        timeout: MAX_DURATION,
        // 1.5 s, not less: the keeper has a third of it to renew (a loaded CI run once held a
        // heartbeat of a 500 ms lease back past that).
        lease: Duration::from_millis(1500),
        max_attempts: 1,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Ledger>()?.record(&ctx);
        let release = ctx.state::<Release>()?.0.clone();
        let _ = release.acquire().await;
        Ok(())
    }
}

/// A hand-written kind whose timeout is `T` and lease `L` milliseconds.
#[derive(Debug, Serialize, Deserialize)]
struct Timed<const T: u64, const L: u64> {}

impl<const T: u64, const L: u64> Job for Timed<T, L> {
    const KIND: &'static str = "test.timed";
    const OPTIONS: JobOptions = JobOptions {
        timeout: Duration::from_millis(T),
        lease: Duration::from_millis(L),
        ..JobOptions::DEFAULT
    };

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// The option `build()` refused, and its message; fails the test when it built.
pub(crate) fn refused(builder: WorkerBuilder<PgStore>) -> (&'static str, String) {
    match builder.build() {
        Err(e @ BuildError::InvalidOption { option, .. }) => (option, e.to_string()),
        Err(other) => panic!("refused for another reason: {other}"),
        Ok(_) => panic!("built"),
    }
}

#[tokio::test]
async fn worker_durations_over_the_bound_are_refused_naming_the_option() {
    let h = Harness::new().await;
    type Set = fn(&mut WorkerConfig, Duration);
    // `rescuer.after_clock_jump` has a lower bound of its own: see below.
    let settings: [(&str, &str, Set); 13] = [
        ("poll_interval", "poll_interval", |c, d| c.poll_interval = d),
        ("prefetch_ttl", "prefetch_ttl", |c, d| c.prefetch_ttl = d),
        ("drain_timeout", "drain_timeout", |c, d| c.drain_timeout = d),
        ("shutdown_grace", "shutdown_grace", |c, d| {
            c.shutdown_grace = d
        }),
        ("stuck_after", "stuck_after", |c, d| c.stuck_after = d),
        ("store_timeout", "store_timeout", |c, d| c.store_timeout = d),
        ("heartbeat_interval", "heartbeat_interval", |c, d| {
            c.heartbeat_interval = Some(d)
        }),
        ("lease", "lease", |c, d| c.lease = Some(d)),
        ("stager", "interval", |c, d| c.stager.interval = d),
        ("rescuer", "interval", |c, d| c.rescuer.interval = d),
        ("scheduler", "interval", |c, d| c.scheduler.interval = d),
        ("reporter.interval", "interval", |c, d| {
            c.reporter.interval = d
        }),
        ("pruner", "interval", |c, d| c.pruner.interval = d),
    ];
    for too_long in TOO_LONG {
        for (option, field, set) in settings {
            let (refused_option, message) = refused(h.worker().configure(|c| set(c, too_long)));
            assert_eq!(refused_option, option, "{message}");
            assert!(message.contains(field), "{message}");
            assert!(message.contains("at most 100 years"), "{message}");
        }
        let pruner: [(&str, Set); 3] = [
            ("completed_retention", |c, d| {
                c.pruner.completed_retention = d
            }),
            ("cancelled_retention", |c, d| {
                c.pruner.cancelled_retention = d
            }),
            ("vacuum_interval", |c, d| c.pruner.vacuum_interval = Some(d)),
        ];
        for (field, set) in pruner {
            let (option, message) = refused(h.worker().configure(|c| set(c, too_long)));
            assert_eq!(option, "pruner", "{message}");
            assert!(message.contains(field), "{message}");
        }
        // The builder's own setters reach the same checks.
        assert_eq!(
            refused(h.worker().drain_timeout(too_long)).0,
            "drain_timeout"
        );
        assert_eq!(
            refused(h.worker().poll_interval(too_long)).0,
            "poll_interval"
        );
    }
}

/// After a jump of the wall clock the rescuer takes nothing for `after_clock_jump`: at 100
/// years (accepted before), one sleep of the machine stopped every rescue for the life of the
/// process. A day covers the heartbeat of leases of 3 days; a worker whose own heartbeat
/// period is longer still holds twice that, and builds.
#[tokio::test]
async fn a_clock_jump_hold_over_a_day_is_refused_naming_the_option() {
    let h = Harness::new().await;
    let day = RescuerConfig::MAX_AFTER_CLOCK_JUMP;
    assert_eq!(day, Duration::from_secs(24 * 3600));
    for too_long in [day + Duration::from_nanos(1), MAX_DURATION, Duration::MAX] {
        let (option, message) = refused(
            h.worker()
                .configure(|c| c.rescuer.after_clock_jump = too_long),
        );
        assert_eq!(option, "rescuer", "{message}");
        assert!(message.contains("after_clock_jump"), "{message}");
        assert!(message.contains("at most 1 day"), "{message}");
        assert!(message.contains(&format!("got {too_long:?}")), "{message}");
    }
    h.worker()
        .configure(|c| c.rescuer.after_clock_jump = day)
        .build()
        .expect("the bound is allowed");
    // Leases of 6 days: a heartbeat every 2, a hold of 4 derived from them.
    const SIX_DAYS_MS: u64 = 6 * 24 * 3600 * 1000;
    h.worker()
        .register::<Timed<300_000, SIX_DAYS_MS>>()
        .build()
        .expect("a hold derived from the worker's own leases is not bounded by the setting's");
}

#[tokio::test]
async fn periodic_intervals_under_the_floor_are_refused_naming_the_option() {
    let h = Harness::new().await;
    type Set = fn(&mut WorkerConfig, Duration);
    // Each of these runs a loop once per interval (the fetchers' claims, the heartbeat, each
    // maintenance service): at 1ns, a loop that never sleeps.
    let settings: [(&str, &str, Set); 7] = [
        ("poll_interval", "poll_interval", |c, d| c.poll_interval = d),
        ("heartbeat_interval", "heartbeat_interval", |c, d| {
            c.heartbeat_interval = Some(d)
        }),
        ("stager", "interval", |c, d| c.stager.interval = d),
        ("rescuer", "interval", |c, d| c.rescuer.interval = d),
        ("scheduler", "interval", |c, d| c.scheduler.interval = d),
        ("reporter.interval", "interval", |c, d| {
            c.reporter.interval = d
        }),
        ("pruner", "interval", |c, d| c.pruner.interval = d),
    ];
    let too_short = [
        Duration::ZERO,
        Duration::from_nanos(1),
        MIN_INTERVAL - Duration::from_nanos(1),
    ];
    for short in too_short {
        for (option, field, set) in settings {
            let (refused_option, message) = refused(h.worker().configure(|c| set(c, short)));
            assert_eq!(refused_option, option, "{message}");
            assert!(message.contains(field), "{message}");
            assert!(message.contains("at least 10ms"), "{message}");
        }
        // The builder's own setter reaches the same check.
        assert_eq!(refused(h.worker().poll_interval(short)).0, "poll_interval");
    }
    // The floor itself is accepted.
    for (_, _, set) in settings {
        h.worker()
            .configure(|c| set(c, MIN_INTERVAL))
            .build()
            .expect("the floor is allowed");
    }
}

/// A call given up by the worker may still commit in the database: a claim's leases the
/// worker never tracks, a rescue pass that never finishes its batch. The floor of a loop's
/// period (10 ms) is no floor for a call's bound; `store_timeout`'s own is 1 s.
#[tokio::test]
async fn a_store_timeout_under_a_second_is_refused_naming_the_option_and_the_floor() {
    let h = Harness::new().await;
    for short in [
        Duration::ZERO,
        MIN_INTERVAL,
        Duration::from_millis(25),
        Duration::from_secs(1) - Duration::from_nanos(1),
    ] {
        let (option, message) = refused(h.worker().configure(|c| c.store_timeout = short));
        assert_eq!(option, "store_timeout", "{message}");
        assert!(message.contains("at least 1s"), "{message}");
        assert!(message.contains(&format!("got {short:?}")), "{message}");
    }
    h.worker()
        .configure(|c| c.store_timeout = Duration::from_secs(1))
        .build()
        .expect("the floor is allowed");
}

#[tokio::test]
async fn a_kind_timeout_or_lease_over_the_bound_is_refused_naming_the_kind() {
    let h = Harness::new().await;
    const CENTURY_MS: u64 = MAX_DURATION.as_millis() as u64;
    const TEN_THOUSAND_YEARS_MS: u64 = CENTURY_MS * 100;
    let cases = [
        (
            refused(h.worker().register::<Timed<{ CENTURY_MS + 1 }, 30_000>>()),
            "timeout",
        ),
        (
            refused(h.worker().register::<Timed<300_000, { CENTURY_MS + 1 }>>()),
            "lease",
        ),
        (
            refused(
                h.worker()
                    .register::<Timed<300_000, TEN_THOUSAND_YEARS_MS>>(),
            ),
            "lease",
        ),
        (
            refused(h.worker().register::<Timed<0, 30_000>>()),
            "timeout",
        ),
    ];
    for ((option, message), expected) in cases {
        assert_eq!(option, expected, "{message}");
        assert!(message.contains("`test.timed`"), "{message}");
    }
    // The bound itself is accepted.
    h.worker()
        .register::<Timed<CENTURY_MS, CENTURY_MS>>()
        .build()
        .expect("the bound is allowed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keeper_renews_leases_when_every_duration_is_the_bound() {
    let h = Harness::new().await;
    let release = Release(Arc::new(Semaphore::new(0)));
    let id = enqueue(&h.store, HeldLong {}).await;
    let worker = job::Worker::builder(h.store.clone())
        .register::<HeldLong>()
        .queue("default", 1)
        .state(h.ledger.clone())
        .state(release.clone())
        .configure(|c| {
            c.poll_interval = MAX_DURATION;
            c.prefetch_ttl = MAX_DURATION;
            c.drain_timeout = MAX_DURATION;
            c.shutdown_grace = MAX_DURATION;
            c.stuck_after = MAX_DURATION;
            c.store_timeout = MAX_DURATION;
            c.pruner.completed_retention = MAX_DURATION;
            c.pruner.cancelled_retention = MAX_DURATION;
            c.reporter.interval = MAX_DURATION;
            c.scheduler.interval = MAX_DURATION;
        })
        .build()
        .expect("every duration at the bound is allowed")
        .start();
    let first = h.reaches(id, JobState::Running).await;
    let first_until = first.locked_until.expect("a running job has a lease");
    // Renewed past three of its leases: the keeper kept beating (a dead keeper lets the lease
    // expire, and the rescuer ends the job, which has one attempt).
    let renewed = eventually("the lease to be renewed past three leases", || async {
        let row = h.row(id).await;
        let until = row.locked_until?;
        (until > first_until + chrono::Duration::milliseconds(4500)).then_some(row)
    })
    .await;
    assert_eq!(renewed.state, JobState::Running);
    assert_eq!(renewed.lock_token, first.lock_token, "the same lease");
    assert_eq!(worker.stats().stuck, 0);

    release.0.add_permits(1);
    let row = h.reaches(id, JobState::Completed).await;
    assert_eq!(row.attempt, 1);
    assert_eq!(h.ledger.runs(id), 1);
    let stats = worker.shutdown().await.stats;
    assert_eq!((stats.lease_lost, stats.fenced, stats.stuck), (0, 0, 0));
}
