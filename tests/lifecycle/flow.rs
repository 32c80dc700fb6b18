//! Flow control across workers: a kind's rate limit bounds its starts in every window of its
//! period, while other kinds run as usual; a kind's circuit breaker pauses it once its failure
//! rate crosses the threshold, losing nothing, until an operator resumes it or the cool-down
//! ends.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{
    Admin, Breaker, Enqueue, Job, JobContext, JobError, JobOptions, JobState, Pause, PausedBy,
    RateLimit,
};
use serde::{Deserialize, Serialize};

use crate::common::*;
use crate::support::count;

/// The rated kind's limit: 4 starts in any 300 ms.
const RATE: RateLimit = RateLimit::new(4, Duration::from_millis(300));

/// Rate-limited; every fifth job fails its first attempt (a retry is a start too).
#[derive(Debug, Serialize, Deserialize)]
struct Rated {
    n: u32,
}

#[derive(Clone, Default)]
struct Handled(Arc<AtomicUsize>);

impl Job for Rated {
    const KIND: &'static str = "test.rated";
    const OPTIONS: JobOptions = JobOptions {
        rate: Some(RATE),
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<Handled>()?.0.fetch_add(1, Ordering::SeqCst);
        if self.n % 5 == 0 && ctx.attempt() == 1 {
            return Err(JobError::retryable("first attempt fails"));
        }
        Ok(())
    }
}

/// Records, by the database's clock, every time a claim makes a `test.rated` row running. A
/// BEFORE trigger: it stamps each row as the claim writes it, after the claim read its room and
/// before the claim stamps its starts, so a correct limiter keeps these stamps within the limit
/// too (an AFTER trigger fires at the end of the statement, after the limiter's stamps, and its
/// times can trail them by milliseconds on a loaded machine).
async fn record_starts(h: &Harness, kind: &str) {
    let trigger = format!(
        "CREATE TRIGGER record_start BEFORE UPDATE OF state ON job.jobs FOR EACH ROW
         WHEN (NEW.state = 'running' AND NEW.kind = '{kind}')
         EXECUTE FUNCTION public.record_start()"
    );
    for statement in [
        "CREATE TABLE public.starts (id bigint, attempt integer, at timestamptz, rate_key text)",
        "CREATE FUNCTION public.record_start() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             INSERT INTO public.starts
             VALUES (NEW.id, NEW.attempt, clock_timestamp(), NEW.rate_key);
             RETURN NEW;
         END $$",
        &trigger,
    ] {
        sqlx::query(statement)
            .execute(h.store.pool())
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn three_workers_start_at_most_the_rate_in_any_window_while_other_kinds_run() {
    let h = Harness::new().await;
    record_starts(&h, Rated::KIND).await;
    let handled = Handled::default();
    Enqueue::<Rated>::many(h.store.pool(), (0..30).map(|n| Rated { n }))
        .await
        .unwrap();
    Enqueue::<Noop>::many(h.store.pool(), (0..20).map(|n| Noop { n }))
        .await
        .unwrap();
    let workers: Vec<_> = (0..3)
        .map(|i| {
            h.worker()
                .register::<Rated>()
                .id(format!("rated-{i}"))
                .state(handled.clone())
                .build()
                .unwrap()
                .start()
        })
        .collect();
    eventually("every rated job to complete", || async {
        (in_state(&h, "test.rated", "completed").await == 30).then_some(())
    })
    .await;
    for w in workers {
        w.shutdown().await;
    }

    // 30 first attempts and 6 retries, each started once, by the claims and by the handlers.
    let starts: Vec<(i64, i32, f64)> = sqlx::query_as(
        "SELECT id, attempt, extract(epoch FROM at)::float8 FROM public.starts ORDER BY at",
    )
    .fetch_all(h.store.pool())
    .await
    .unwrap();
    assert_eq!(starts.len(), 36, "{starts:?}");
    assert_eq!(handled.0.load(Ordering::SeqCst), 36);
    // No window of 300 ms holds a fifth start: each start is at least a period after the start
    // four before it.
    let period = RATE.per.as_secs_f64();
    let crowded: Vec<_> = starts
        .windows(5)
        .filter(|w| w[4].2 - w[0].2 < period)
        .map(|w| (w[0].0, w[4].0, w[4].2 - w[0].2))
        .collect();
    assert!(
        crowded.is_empty(),
        "five starts within {period}s: {crowded:?}"
    );
    // The unlimited kind did not wait for the limited one: its jobs were done before the
    // limited kind's last start (36 starts at 4 per 300 ms take at least 2.4 s).
    let (noops_done, last_noop, last_start): (i64, f64, f64) = sqlx::query_as(
        "SELECT count(*), extract(epoch FROM max(finalized_at))::float8,
                (SELECT extract(epoch FROM max(at))::float8 FROM public.starts)
         FROM job.jobs WHERE kind = 'test.noop' AND state = 'completed'",
    )
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    assert_eq!(noops_done, 20);
    assert!(
        last_noop < last_start,
        "the unlimited kind finished at {last_noop}, after the limited kind's last start at \
         {last_start}"
    );
    // The window row holds no more than the limit's starts.
    let kept: i32 = sqlx::query_scalar(
        "SELECT cardinality(starts) FROM job.rate_windows WHERE kind = 'test.rated'",
    )
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    assert!(kept <= 4, "{kept} starts kept");
}

/// Fails while [`Health`] says broken; its breaker trips at half failed of at least 6.
#[derive(Debug, Serialize, Deserialize)]
struct Fragile {
    n: u32,
}

#[derive(Clone)]
struct Health {
    broken: Arc<AtomicBool>,
}

const FRAGILE_BREAKER: Breaker = Breaker {
    failure_percent: 50,
    min_attempts: 6,
    window: Duration::from_secs(60),
    cool_down: Duration::from_secs(3600),
};

impl Job for Fragile {
    const KIND: &'static str = "test.fragile";
    const OPTIONS: JobOptions = JobOptions {
        breaker: Some(FRAGILE_BREAKER),
        backoff: FAST_BACKOFF,
        max_attempts: 1000,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        if ctx.state::<Health>()?.broken.load(Ordering::SeqCst) {
            return Err(JobError::retryable("the downstream service is down"));
        }
        Ok(())
    }
}

/// Like [`Fragile`], with a cool-down of one second.
#[derive(Debug, Serialize, Deserialize)]
struct Brief {
    n: u32,
}

impl Job for Brief {
    const KIND: &'static str = "test.brief";
    const OPTIONS: JobOptions = JobOptions {
        breaker: Some(Breaker {
            cool_down: Duration::from_secs(1),
            ..FRAGILE_BREAKER
        }),
        backoff: FAST_BACKOFF,
        max_attempts: 1000,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        if ctx.state::<Health>()?.broken.load(Ordering::SeqCst) {
            return Err(JobError::retryable("the downstream service is down"));
        }
        Ok(())
    }
}

fn breaker_workers(h: &Harness, health: &Health) -> Vec<job::WorkerHandle> {
    (0..2)
        .map(|i| {
            h.worker()
                .register::<Fragile>()
                .register::<Brief>()
                .id(format!("breaker-{i}"))
                .state(health.clone())
                .build()
                .unwrap()
                .start()
        })
        .collect()
}

/// Waits for the breaker of `kind` to pause it; returns the pause.
async fn tripped(h: &Harness, kind: &str) -> job::PauseEntry {
    eventually(&format!("the breaker of {kind} to trip"), || async {
        h.store
            .pauses()
            .await
            .unwrap()
            .into_iter()
            .find(|p| p.what == Pause::Kind(kind.to_owned()))
    })
    .await
}

async fn in_state(h: &Harness, kind: &str, state: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job.jobs WHERE kind = $1 AND state::text = $2")
        .bind(kind)
        .bind(state)
        .fetch_one(h.store.pool())
        .await
        .unwrap()
}

#[tokio::test]
async fn a_failing_kind_trips_its_breaker_and_waits_for_an_operator_losing_nothing() {
    let h = Harness::new().await;
    let health = Health {
        broken: Arc::new(AtomicBool::new(true)),
    };
    Enqueue::<Fragile>::many(h.store.pool(), (0..30).map(|n| Fragile { n }))
        .await
        .unwrap();
    let workers = breaker_workers(&h, &health);
    let pause = tripped(&h, "test.fragile").await;
    assert_eq!(pause.paused_by, PausedBy::Breaker);
    let reason = pause.reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("circuit breaker: ") && reason.contains("attempts failed"),
        "{reason}"
    );
    assert!(pause.resume_at.is_some_and(|at| at > pause.paused_at));
    // A claim already in flight when it tripped began before the pause and may still take its
    // jobs (seen once in CI: ten of them ran once the service had recovered). Stopping the
    // workers ends those claims and what they took, so that every claim after this began
    // after the pause. Then the service recovers, and claims skip the paused kind: two later
    // jobs of another kind in the same queue run, none of it does.
    for w in workers {
        w.shutdown().await;
    }
    assert_eq!(in_state(&h, "test.fragile", "running").await, 0);
    health.broken.store(false, Ordering::SeqCst);
    let workers = breaker_workers(&h, &health);
    for n in 0..2 {
        let id = enqueue(&h.store, Noop { n }).await;
        h.reaches(id, JobState::Completed).await;
    }
    assert_eq!(in_state(&h, "test.fragile", "completed").await, 0);
    assert_eq!(in_state(&h, "test.fragile", "discarded").await, 0);
    assert_eq!(
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM job.jobs WHERE kind = 'test.fragile'
             AND state IN ('available', 'retryable')"
        )
        .fetch_one(h.store.pool())
        .await
        .unwrap(),
        30,
        "every job waits"
    );
    // An operator resumes it: every job completes.
    assert!(h
        .store
        .resume(&Pause::Kind("test.fragile".into()))
        .await
        .unwrap());
    eventually("every fragile job to complete", || async {
        (in_state(&h, "test.fragile", "completed").await == 30).then_some(())
    })
    .await;
    for w in workers {
        w.shutdown().await;
    }
    assert_eq!(h.store.pauses().await.unwrap(), vec![]);
    let trips: i64 =
        sqlx::query_scalar("SELECT trips FROM job.breakers WHERE kind = 'test.fragile'")
            .fetch_one(h.store.pool())
            .await
            .unwrap();
    assert_eq!(trips, 1);
}

#[tokio::test]
async fn a_tripped_kind_resumes_by_itself_after_its_cool_down() {
    let h = Harness::new().await;
    let health = Health {
        broken: Arc::new(AtomicBool::new(true)),
    };
    Enqueue::<Brief>::many(h.store.pool(), (0..20).map(|n| Brief { n }))
        .await
        .unwrap();
    let workers = breaker_workers(&h, &health);
    let pause = tripped(&h, "test.brief").await;
    health.broken.store(false, Ordering::SeqCst);
    eventually("every brief job to complete", || async {
        (in_state(&h, "test.brief", "completed").await == 20).then_some(())
    })
    .await;
    for w in workers {
        w.shutdown().await;
    }
    // Nobody resumed it: the jobs that completed after the trip's in-flight attempts ran once
    // the cool-down had ended.
    let resume_at = pause.resume_at.expect("a breaker's pause ends");
    let after: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job.jobs WHERE kind = 'test.brief' AND finalized_at >= $1",
    )
    .bind(resume_at)
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    assert!(
        after > 0,
        "no job ran after the cool-down ended at {resume_at}"
    );
    assert_eq!(h.store.pauses().await.unwrap(), vec![]);
    assert_eq!(
        count(
            &h.store,
            "SELECT count(*) FROM job.jobs WHERE state = 'discarded'"
        )
        .await,
        0
    );
}

/// Rate-limited per tenant: 2 starts per tenant in any 5 s; jobs without a tenant share one
/// window.
#[derive(Debug, Serialize, Deserialize)]
struct TenantSync {
    tenant: String,
    n: u32,
}

const PER_TENANT: RateLimit = RateLimit::new(2, Duration::from_secs(5));

impl Job for TenantSync {
    const KIND: &'static str = "test.tenant_sync";
    const OPTIONS: JobOptions = JobOptions {
        rate: Some(PER_TENANT),
        ..JobOptions::DEFAULT
    };

    fn rate_key(&self) -> Option<String> {
        (!self.tenant.is_empty()).then(|| format!("tenant:{}", self.tenant))
    }

    async fn perform(self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn tenant_jobs(tenant: &str, n: u32) -> impl Iterator<Item = TenantSync> + '_ {
    (0..n).map(move |n| TenantSync {
        tenant: tenant.into(),
        n,
    })
}

#[tokio::test]
async fn each_rate_key_has_its_own_window_so_a_busy_key_holds_back_no_other() {
    let h = Harness::new().await;
    record_starts(&h, TenantSync::KIND).await;
    let starts_of = |key: &'static str| {
        let pool = h.store.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT count(*) FROM public.starts WHERE rate_key = $1")
                .bind(key)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    // The busy tenant's four jobs: two start, two wait for the next window.
    Enqueue::<TenantSync>::many(h.store.pool(), tenant_jobs("busy", 4))
        .await
        .unwrap();
    let workers: Vec<_> = (0..2)
        .map(|i| {
            h.worker()
                .register::<TenantSync>()
                .id(format!("tenants-{i}"))
                .build()
                .unwrap()
                .start()
        })
        .collect();
    eventually("the busy tenant's window to fill", || async {
        (starts_of("tenant:busy").await == 2).then_some(())
    })
    .await;
    // Then two jobs of each other tenant, and two without one.
    for tenant in ["a", "b", "c", ""] {
        Enqueue::<TenantSync>::many(h.store.pool(), tenant_jobs(tenant, 2))
            .await
            .unwrap();
    }
    eventually("every tenant job to complete", || async {
        (in_state(&h, "test.tenant_sync", "completed").await == 12).then_some(())
    })
    .await;
    for w in workers {
        w.shutdown().await;
    }
    let starts: Vec<(Option<String>, f64)> = sqlx::query_as(
        "SELECT rate_key, extract(epoch FROM at)::float8 FROM public.starts ORDER BY at",
    )
    .fetch_all(h.store.pool())
    .await
    .unwrap();
    assert_eq!(starts.len(), 12, "{starts:?}");
    let period = PER_TENANT.per.as_secs_f64();
    let mut by_key: std::collections::BTreeMap<Option<String>, Vec<f64>> = Default::default();
    for (key, at) in &starts {
        by_key.entry(key.clone()).or_default().push(*at);
    }
    assert_eq!(by_key.len(), 5, "{by_key:?}");
    for (key, times) in &by_key {
        let crowded = times.windows(3).any(|w| w[2] - w[0] < period);
        assert!(
            !crowded,
            "three starts of {key:?} within {period}s: {times:?}"
        );
    }
    // Every other key started both its jobs while the busy key's window was still full (its
    // first start less than a period before): none waited for the busy key's window.
    let busy = &by_key[&Some("tenant:busy".to_owned())];
    for (key, times) in by_key
        .iter()
        .filter(|(k, _)| k.as_deref() != Some("tenant:busy"))
    {
        assert!(
            times.iter().all(|t| t - busy[0] < period),
            "{key:?} waited for the busy key's window: started at {times:?}, the busy key at \
             {busy:?}"
        );
    }
}

#[tokio::test]
async fn every_enqueue_stores_the_rate_key_and_a_kind_without_a_rate_refuses_one() {
    let h = Harness::new().await;
    let one = Enqueue::new(TenantSync {
        tenant: "acme".into(),
        n: 1,
    })
    .enqueue(h.store.pool())
    .await
    .unwrap();
    let unique = Enqueue::new(TenantSync {
        tenant: "acme".into(),
        n: 2,
    })
    .unique_key("sync:2")
    .enqueue(h.store.pool())
    .await
    .unwrap();
    let overridden = Enqueue::new(TenantSync {
        tenant: String::new(),
        n: 3,
    })
    .rate_key("tenant:other")
    .enqueue(h.store.pool())
    .await
    .unwrap();
    let many = Enqueue::<TenantSync>::many(h.store.pool(), tenant_jobs("bulk", 2))
        .await
        .unwrap();
    for (id, key) in [
        (one, Some("tenant:acme")),
        (unique, Some("tenant:acme")),
        (overridden, Some("tenant:other")),
        (many[0], Some("tenant:bulk")),
    ] {
        assert_eq!(h.row(id).await.rate_key.as_deref(), key, "job {id}");
    }
    let refused = Enqueue::new(Noop { n: 1 })
        .rate_key("tenant:acme")
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            job::EnqueueError::InvalidOption {
                option: "rate_key",
                ..
            }
        ),
        "{refused}"
    );
    let too_long = Enqueue::new(TenantSync {
        tenant: "x".repeat(600),
        n: 4,
    })
    .enqueue(h.store.pool())
    .await
    .unwrap_err();
    assert!(
        matches!(
            too_long,
            job::EnqueueError::InvalidOption {
                option: "rate_key",
                ..
            }
        ),
        "{too_long}"
    );
    // The database refuses what the door would: a key over 512 bytes.
    let raw = sqlx::query("UPDATE job.jobs SET rate_key = repeat('x', 513) WHERE id = $1")
        .bind(one)
        .execute(h.store.pool())
        .await;
    assert!(raw.is_err(), "{raw:?}");
}

/// A claim reads at most 256 keys with waiting jobs, in rotation: with 300 keys of one job
/// each, the first claim takes 256 of them, the next the other 44 (wrapping around to keys at
/// their limit), and a third none; no key is read twice before every key was read once.
#[tokio::test]
async fn a_claim_reads_a_bounded_number_of_keys_in_rotation() {
    let h = Harness::new().await;
    let jobs = (0..300).map(|n| TenantSync {
        tenant: format!("{n:03}"),
        n,
    });
    Enqueue::<TenantSync>::many(h.store.pool(), jobs)
        .await
        .unwrap();
    let request = job::ClaimRequest {
        queue: "default".into(),
        kinds: vec![job::ClaimKind {
            kind: TenantSync::KIND.into(),
            max_version: 1,
            lease: Duration::from_secs(30),
            concurrency: None,
            rate: Some(RateLimit::new(1, Duration::from_secs(3600))),
        }],
        limit: 1000,
        worker_id: "rotation".into(),
    };
    let claim = || async { job::Store::claim(&h.store, &request).await.unwrap() };
    let first = claim().await;
    assert_eq!(first.len(), 256);
    let second = claim().await;
    assert_eq!(second.len(), 44);
    assert_eq!(claim().await.len(), 0);
    let mut ids: Vec<_> = first.iter().chain(&second).map(|j| j.lease.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 300, "every key's job once");
}

/// A worker claims every kind it registered in every queue it serves. The claim of a queue
/// that holds no job of a limited kind neither takes that kind's lock nor waits for it: before,
/// every claim of every queue queued behind each limited kind's lock, one at a time across the
/// cluster. The queue that holds the kind's jobs still claims them under the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_a_queue_without_a_limited_kinds_jobs_never_waits_for_its_lock() {
    let h = Harness::new().await;
    let job = |kind: &str, queue: &str| job_core::NewJob {
        queue: queue.into(),
        ..job_core::NewJob::new(kind, "{}")
    };
    let plain = job::Store::enqueue(&h.store, job("test.plain", "mail"))
        .await
        .unwrap();
    let limited = job::Store::enqueue(&h.store, job("test.limited", "sync"))
        .await
        .unwrap();
    let kind = |name: &str, limit: bool| job::ClaimKind {
        kind: name.into(),
        max_version: 1,
        lease: Duration::from_secs(30),
        concurrency: limit.then_some(3),
        rate: limit.then(|| RateLimit::new(10, Duration::from_secs(60))),
    };
    let request = |queue: &str| job::ClaimRequest {
        queue: queue.into(),
        kinds: vec![kind("test.limited", true), kind("test.plain", false)],
        limit: 10,
        worker_id: "probe".into(),
    };
    let mut holder = h.store.pool().begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('job.kind:test.limited', 0))")
        .execute(&mut *holder)
        .await
        .unwrap();
    // A guard against a hang, not a measure of time.
    let mail = tokio::time::timeout(
        Duration::from_secs(10),
        job::Store::claim(&h.store, &request("mail")),
    )
    .await
    .expect("the claim of `mail` waited for the lock of a kind it holds no job of")
    .unwrap();
    assert_eq!(mail.iter().map(|j| j.lease.id).collect::<Vec<_>>(), [plain]);
    holder.rollback().await.unwrap();
    let sync = job::Store::claim(&h.store, &request("sync")).await.unwrap();
    assert_eq!(
        sync.iter().map(|j| j.lease.id).collect::<Vec<_>>(),
        [limited]
    );
}

/// A key's rate window is trimmed only when that key is claimed again: windows no claim wrote
/// for longer than the longest period (7 days) limit nothing, and the pruner deletes them, so
/// keys that come and go (one per tenant) do not pile up.
#[tokio::test]
async fn the_pruner_deletes_rate_windows_no_claim_wrote_for_longer_than_any_period() {
    let h = Harness::new().await;
    sqlx::query(
        "INSERT INTO job.rate_windows (kind, rate_key, starts, updated_at) VALUES \
         ('k', 'gone', ARRAY[now() - interval '9 days'], now() - interval '9 days'), \
         ('k', 'week', ARRAY[now() - interval '6 days'], now() - interval '6 days'), \
         ('k', 'live', ARRAY[now()], now())",
    )
    .execute(h.store.pool())
    .await
    .unwrap();
    job::Store::prune(
        &h.store,
        &job::PruneRequest {
            completed_retention: Duration::from_secs(3600),
            cancelled_retention: Duration::from_secs(3600),
            batch: 100,
        },
    )
    .await
    .unwrap();
    let left: Vec<String> =
        sqlx::query_scalar("SELECT rate_key FROM job.rate_windows ORDER BY rate_key")
            .fetch_all(h.store.pool())
            .await
            .unwrap();
    assert_eq!(left, ["live", "week"]);
    // The look reads every window: it is made again an hour after one that found less than a
    // batch, not at every pass of every worker.
    sqlx::query(
        "INSERT INTO job.rate_windows (kind, rate_key, starts, updated_at) VALUES \
         ('k', 'gone too', ARRAY[now() - interval '9 days'], now() - interval '9 days')",
    )
    .execute(h.store.pool())
    .await
    .unwrap();
    let request = job::PruneRequest {
        completed_retention: Duration::from_secs(3600),
        cancelled_retention: Duration::from_secs(3600),
        batch: 100,
    };
    job::Store::prune(&h.store, &request).await.unwrap();
    let windows: i64 = sqlx::query_scalar("SELECT count(*) FROM job.rate_windows")
        .fetch_one(h.store.pool())
        .await
        .unwrap();
    assert_eq!(windows, 3, "not looked at again within the hour");
    // A look that deleted a full batch looks again at the next pass (a store of its own: the
    // first one's clones share its hour).
    let other = job::PgStore::new(h.store.pool().clone());
    sqlx::query(
        "INSERT INTO job.rate_windows (kind, rate_key, starts, updated_at) \
         SELECT 'k', 'old ' || n, ARRAY[now() - interval '9 days'], now() - interval '9 days' \
         FROM generate_series(1, 3) AS n",
    )
    .execute(h.store.pool())
    .await
    .unwrap();
    let two = job::PruneRequest {
        batch: 2,
        ..request
    };
    let old = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM job.rate_windows WHERE updated_at < now() - interval '8 days'",
        )
        .fetch_one(h.store.pool())
        .await
        .unwrap()
    };
    job::Store::prune(&other, &two).await.unwrap();
    assert_eq!(old().await, 2);
    job::Store::prune(&other, &two).await.unwrap();
    assert_eq!(old().await, 0);
}

/// Rate-limited kinds are claimed each by a statement of their own: the one whose first job
/// comes first in claim order goes first. Before, they went by name, and a claim of one job
/// (slow jobs are claimed a few at a time) always took the first kind by name while it had
/// room, however older the other kind's jobs.
#[tokio::test]
async fn rate_limited_kinds_are_claimed_in_the_order_of_their_oldest_job() {
    let h = Harness::new().await;
    let older = job::Store::enqueue(&h.store, job_core::NewJob::new("b.rated", "{}"))
        .await
        .unwrap();
    let newer = job::Store::enqueue(&h.store, job_core::NewJob::new("a.rated", "{}"))
        .await
        .unwrap();
    let kind = |name: &str| job::ClaimKind {
        kind: name.into(),
        max_version: 1,
        lease: Duration::from_secs(30),
        concurrency: None,
        rate: Some(RateLimit::new(100, Duration::from_secs(60))),
    };
    let request = job::ClaimRequest {
        queue: "default".into(),
        kinds: vec![kind("a.rated"), kind("b.rated")],
        limit: 1,
        worker_id: "order".into(),
    };
    let first = job::Store::claim(&h.store, &request).await.unwrap();
    assert_eq!(
        first.iter().map(|j| j.lease.id).collect::<Vec<_>>(),
        [older]
    );
    let second = job::Store::claim(&h.store, &request).await.unwrap();
    assert_eq!(
        second.iter().map(|j| j.lease.id).collect::<Vec<_>>(),
        [newer]
    );
}

/// Always fails; a run after the first waits until its kind is paused before it fails, so that
/// the test knows the trip happened while later jobs waited in the prefetch buffer.
#[derive(Debug, Serialize, Deserialize)]
struct Hasty {
    n: u32,
}

#[derive(Clone, Default)]
struct HastyRuns(Arc<AtomicUsize>);

impl Job for Hasty {
    const KIND: &'static str = "test.hasty";
    const OPTIONS: JobOptions = JobOptions {
        breaker: Some(Breaker {
            failure_percent: 100,
            min_attempts: 1,
            window: Duration::from_secs(60),
            cool_down: Duration::from_secs(3600),
        }),
        backoff: FAST_BACKOFF,
        max_attempts: 1000,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let run = ctx.state::<HastyRuns>()?.0.fetch_add(1, Ordering::SeqCst) + 1;
        // A run after the first waits until the worker has seen the trip (the test says so
        // once `WorkerStats::breakers_tripped` counts it): so no run starts in the moment
        // between the pause's commit and the worker's reading of the answer, however slow
        // the machine.
        if run > 1 {
            let seen = ctx.state::<TripSeen>()?;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while !seen.0.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        Err(JobError::retryable("the downstream service is down"))
    }
}

/// Set by the test once the worker counted the breaker's trip.
#[derive(Clone, Default)]
struct TripSeen(Arc<AtomicBool>);

/// A breaker's trip stops what the worker already claimed too: the jobs of the kind waiting in
/// its prefetch buffer go back unstarted (the attempt not counted) instead of each spending an
/// attempt on the service the breaker paused.
#[tokio::test]
async fn a_tripped_breaker_gives_back_the_kinds_prefetched_jobs_unstarted() {
    let h = Harness::new().await;
    Enqueue::<Hasty>::many(h.store.pool(), (0..10).map(|n| Hasty { n }))
        .await
        .unwrap();
    let runs = HastyRuns::default();
    let seen = TripSeen::default();
    let mut config = job::WorkerConfig::default();
    config.prefetch = job::Prefetch::Fixed(9);
    config.poll_interval = Duration::from_millis(20);
    let worker = job::Worker::builder(h.store.clone())
        .register::<Hasty>()
        .queue("default", 1)
        .config(config)
        .state(runs.clone())
        .state(seen.clone())
        .build()
        .unwrap()
        .start();
    eventually("the worker to see the breaker trip", || async {
        (worker.stats().breakers_tripped == 1).then_some(())
    })
    .await;
    seen.0.store(true, Ordering::SeqCst);
    tripped(&h, "test.hasty").await;
    eventually("no job of the kind running or held", || async {
        (in_state(&h, "test.hasty", "running").await == 0).then_some(())
    })
    .await;
    worker.shutdown().await;
    let ran = runs.0.load(Ordering::SeqCst);
    // The first, and the one that started before its failure was written (it waited for the
    // worker to see the trip). Without the give-back, every prefetched job ran: 10.
    assert!(ran <= 2, "{ran} runs of 10 prefetched jobs after the trip");
    assert_eq!(
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM job.jobs WHERE kind = 'test.hasty'
             AND state IN ('available', 'retryable')"
        )
        .fetch_one(h.store.pool())
        .await
        .unwrap(),
        10,
        "every job waits"
    );
}

/// A backward step of the server's clock leaves starts stamped after now in a key's window
/// (here half an hour ahead, the limit's worth, with the claim's own shortcut recorded): they
/// are not counted, and the next claim forgets them, rather than hold the kind at its limit
/// until the clock is past them.
#[tokio::test]
async fn starts_stamped_after_now_do_not_hold_a_rate_limited_kind_at_its_limit() {
    let h = Harness::new().await;
    for _ in 0..3 {
        job::Store::enqueue(&h.store, job_core::NewJob::new("test.limited", "{}"))
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO job.rate_windows (kind, rate_key, starts, limit_starts, limit_start)
         SELECT 'test.limited', '', array_fill(now() + interval '30 minutes', ARRAY[10]),
                10, now() + interval '30 minutes'",
    )
    .execute(h.store.pool())
    .await
    .unwrap();
    let request = job::ClaimRequest {
        queue: "default".into(),
        kinds: vec![job::ClaimKind {
            kind: "test.limited".into(),
            max_version: 1,
            lease: Duration::from_secs(30),
            concurrency: None,
            rate: Some(RateLimit::new(10, Duration::from_secs(3600))),
        }],
        limit: 10,
        worker_id: "clock".into(),
    };
    let claimed = job::Store::claim(&h.store, &request).await.unwrap();
    assert_eq!(claimed.len(), 3, "the starts after now held the kind");
    let kept: i32 = sqlx::query_scalar(
        "SELECT cardinality(starts) FROM job.rate_windows WHERE kind = 'test.limited'",
    )
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    assert_eq!(kept, 3, "the claim's own starts, the others forgotten");
}
