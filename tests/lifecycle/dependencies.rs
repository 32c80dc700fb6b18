//! Dependencies and batches: a dependent runs only after the jobs it waits for have ended as
//! it asks; a batch's callback runs once, after every member has finished, and reads their
//! outcomes and results; all of it enqueued in one transaction with the caller's rows.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use job::{
    Admin, Batch, Enqueue, EnqueueError, Job, JobContext, JobError, JobFilter, JobId, JobOptions,
    JobState, PgStore,
};
use serde::{Deserialize, Serialize};

use crate::common::*;
use crate::support::count;

/// What ran, in order, by name.
#[derive(Clone, Default)]
struct Trail(Arc<Mutex<Vec<String>>>);

impl Trail {
    fn push(&self, name: &str) {
        self.0.lock().unwrap().push(name.to_owned());
    }

    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// Records its name and ends as told: completes with its name as result, or fails for good.
#[derive(Debug, Serialize, Deserialize)]
struct Task {
    name: String,
    fail: bool,
}

impl Job for Task {
    const KIND: &'static str = "test.dep_task";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let trail = ctx.state::<Trail>()?;
        trail.push(&format!("{}:start", self.name));
        // Long enough that a dependent started too early would start before this ends.
        tokio::time::sleep(Duration::from_millis(30)).await;
        trail.push(&format!("{}:end", self.name));
        if self.fail {
            return Err(JobError::terminal("told to fail"));
        }
        ctx.set_result(&self.name)?;
        Ok(())
    }
}

/// A batch's callback: reads its members' outcomes and results through the store.
#[derive(Debug, Serialize, Deserialize)]
struct Summary {}

/// One member as the callback saw it: id, state, result.
type Member = (JobId, JobState, Option<serde_json::Value>);

/// What the callback saw, each time it ran.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Vec<Member>>>>);

impl Job for Summary {
    const KIND: &'static str = "test.dep_summary";

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let store = ctx.state::<PgStore>()?;
        let ids = store.dependencies(ctx.id()).await?;
        let rows = store
            .list(&JobFilter {
                ids,
                ..Default::default()
            })
            .await?;
        ctx.state::<Seen>()?.0.lock().unwrap().push(
            rows.into_iter()
                .map(|r| (r.id, r.state, r.result))
                .collect(),
        );
        ctx.state::<Trail>()?.push("summary");
        Ok(())
    }
}

fn task(name: &str) -> Task {
    Task {
        name: name.into(),
        fail: false,
    }
}

fn failing(name: &str) -> Task {
    Task {
        name: name.into(),
        fail: true,
    }
}

fn worker(h: &Harness, trail: &Trail, seen: &Seen) -> job::Worker<PgStore> {
    job::Worker::builder(h.store.clone())
        .register::<Task>()
        .register::<Summary>()
        .queue("default", 4)
        .poll_interval(Duration::from_millis(20))
        .state(trail.clone())
        .state(seen.clone())
        .state(h.store.clone())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_dependent_runs_after_what_it_waits_for_has_completed() {
    let h = Harness::new().await;
    let (trail, seen) = (Trail::default(), Seen::default());
    let a = enqueue(&h.store, task("a")).await;
    let b = enqueue(&h.store, task("b")).await;
    let c = Enqueue::new(task("c"))
        .depends_on([a, b])
        .enqueue(h.store.pool())
        .await
        .unwrap();
    assert_eq!(h.row(c).await.state, JobState::Pending);
    assert_eq!(h.store.dependencies(c).await.unwrap(), [a, b]);
    let w = worker(&h, &trail, &seen).start();
    h.reaches(c, JobState::Completed).await;
    w.shutdown().await;
    let ran = trail.all();
    let at = |what: &str| ran.iter().position(|r| r == what).expect(what);
    assert!(
        at("c:start") > at("a:end") && at("c:start") > at("b:end"),
        "{ran:?}"
    );
}

#[tokio::test]
async fn a_discarded_dependency_discards_its_dependents_down_the_chain() {
    let h = Harness::new().await;
    let (trail, seen) = (Trail::default(), Seen::default());
    let a = enqueue(&h.store, failing("a")).await;
    let b = Enqueue::new(task("b"))
        .depends_on([a])
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let c = Enqueue::new(task("c"))
        .depends_on([b])
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let w = worker(&h, &trail, &seen).start();
    let c_row = h.reaches(c, JobState::Discarded).await;
    w.shutdown().await;
    let b_row = h.row(b).await;
    assert_eq!(b_row.state, JobState::Discarded);
    assert_eq!(b_row.errors[0].class, "dependency");
    assert_eq!(
        b_row.errors[0].message,
        format!("job {a}, which this job depends on, was discarded")
    );
    assert_eq!(c_row.errors[0].class, "dependency");
    assert_eq!(trail.all(), ["a:start", "a:end"], "neither dependent ran");
}

#[tokio::test]
async fn a_batch_callback_runs_once_after_every_member_with_their_outcomes() {
    let h = Harness::new().await;
    let (trail, seen) = (Trail::default(), Seen::default());
    let mut tx = h.store.pool().begin().await.unwrap();
    let batch = Batch::new()
        .member(Enqueue::new(task("m1")))
        .member(Enqueue::new(failing("m2")))
        .member(Enqueue::new(task("m3")))
        .callback(Enqueue::new(Summary {}))
        .enqueue(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(h.row(batch.callback).await.state, JobState::Pending);
    let w = worker(&h, &trail, &seen).start();
    h.reaches(batch.callback, JobState::Completed).await;
    w.shutdown().await;
    let ran = trail.all();
    assert_eq!(ran.len(), 7, "{ran:?}");
    assert_eq!(ran.last().map(String::as_str), Some("summary"), "{ran:?}");
    let seen = seen.0.lock().unwrap().clone();
    assert_eq!(seen.len(), 1, "the callback ran once");
    let m = &batch.members;
    assert_eq!(
        seen[0],
        [
            (m[0], JobState::Completed, Some(serde_json::json!("m1"))),
            (m[1], JobState::Discarded, None),
            (m[2], JobState::Completed, Some(serde_json::json!("m3"))),
        ]
    );
}

#[tokio::test]
async fn a_rolled_back_batch_leaves_nothing_and_a_missing_dependency_is_refused() {
    let h = Harness::new().await;
    let mut tx = h.store.pool().begin().await.unwrap();
    Batch::new()
        .member(Enqueue::new(task("m1")))
        .callback(Enqueue::new(Summary {}))
        .enqueue(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(count(&h.store, "SELECT count(*) FROM job.jobs").await, 0);
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.dependencies").await,
        0
    );

    let err = Enqueue::new(task("x"))
        .depends_on([987_654])
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    match err {
        EnqueueError::InvalidOption {
            option: "depends_on",
            reason,
        } => assert!(reason.contains("987654"), "{reason}"),
        other => panic!("expected depends_on refused, got {other:?}"),
    }
    assert_eq!(count(&h.store, "SELECT count(*) FROM job.jobs").await, 0);

    let err = Batch::new()
        .callback(Enqueue::new(Summary {}))
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no member"), "{err}");
    let err = Enqueue::new(task("x"))
        .depends_on([1])
        .ordering_key("k")
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("depends_on"), "{err}");
    // The same through the store's function, which takes jobs nobody validated.
    let a = enqueue(&h.store, task("a")).await;
    let unchecked = job_core::NewJob {
        depends_on: vec![job_core::Dependency {
            on: job_core::DependsOn::Job(a),
            mode: job_core::DependencyMode::Completed,
        }],
        ordering_key: Some("k".into()),
        ..job_core::NewJob::new(Task::KIND, r#"{"name":"x","fail":false}"#)
    };
    let err = job_postgres::enqueue_with_dependencies(h.store.pool(), &[unchecked])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnqueueError::InvalidOption {
                option: "depends_on",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(count(&h.store, "SELECT count(*) FROM job.jobs").await, 1);
}

/// Jobs of one bulk enqueue that wait for each other in a loop could never run: the enqueue is
/// refused, naming the loop, and writes nothing. Waiting for a job listed later is no loop.
#[tokio::test]
async fn jobs_of_a_batch_waiting_for_each_other_in_a_loop_are_refused() {
    let h = Harness::new().await;
    let job = |waits_for: &[usize]| job_core::NewJob {
        depends_on: waits_for
            .iter()
            .map(|&index| job_core::Dependency {
                on: job_core::DependsOn::Batch(index),
                mode: job_core::DependencyMode::Finished,
            })
            .collect(),
        ..job_core::NewJob::new(Task::KIND, r#"{"name":"x","fail":false}"#)
    };
    for (jobs, in_loop) in [
        (vec![job(&[1]), job(&[0])], "jobs 0, 1 of the batch"),
        (
            vec![job(&[]), job(&[2, 0]), job(&[3]), job(&[1])],
            "jobs 1, 2, 3 of the batch",
        ),
    ] {
        let err = job_postgres::enqueue_with_dependencies(h.store.pool(), &jobs)
            .await
            .unwrap_err();
        match err {
            EnqueueError::InvalidOption {
                option: "depends_on",
                reason,
            } => assert!(reason.contains(in_loop), "{reason}"),
            other => panic!("expected depends_on refused, got {other:?}"),
        }
        assert_eq!(count(&h.store, "SELECT count(*) FROM job.jobs").await, 0);
    }
    // Listed before what it waits for, in no loop: accepted.
    let ids =
        job_postgres::enqueue_with_dependencies(h.store.pool(), &[job(&[2]), job(&[2]), job(&[])])
            .await
            .unwrap();
    assert_eq!(ids.len(), 3);
    assert_eq!(
        count(
            &h.store,
            "SELECT count(*) FROM job.jobs WHERE state = 'pending'"
        )
        .await,
        2
    );
}

#[tokio::test]
async fn a_cancelled_dependent_is_left_alone_and_its_edges_go_when_pruned() {
    let h = Harness::new().await;
    let (trail, seen) = (Trail::default(), Seen::default());
    let a = enqueue(&h.store, task("a")).await;
    let b = Enqueue::new(task("b"))
        .depends_on([a])
        .enqueue(h.store.pool())
        .await
        .unwrap();
    h.store.cancel(b).await.unwrap();
    let w = worker(&h, &trail, &seen).start();
    h.reaches(a, JobState::Completed).await;
    eventually("the edge to be resolved", || async {
        (count(
            &h.store,
            "SELECT count(*) FROM job.dependencies WHERE NOT resolved",
        )
        .await
            == 0)
            .then_some(())
    })
    .await;
    w.shutdown().await;
    assert_eq!(h.row(b).await.state, JobState::Cancelled);
    assert_eq!(trail.all(), ["a:start", "a:end"]);
    // Pruning the cancelled dependent takes its edge with it (it was due and ended 30 days
    // ago: a job cancelled before its run time is kept until that time has passed).
    sqlx::query(
        "UPDATE job.jobs SET run_at = now() - interval '30 days', \
         finalized_at = now() - interval '30 days' WHERE id = $1",
    )
    .bind(b)
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
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.dependencies").await,
        0
    );
}

#[tokio::test]
async fn a_completed_dependency_is_not_pruned_before_its_dependents_have_seen_it() {
    // A job enqueued to wait for one that already completed must find it completed, however
    // short the retention: the pruner keeps a job that an unresolved edge points at (it used
    // to delete it, and the stager then discarded the dependent: "was deleted").
    let h = Harness::new().await;
    let (trail, seen) = (Trail::default(), Seen::default());
    let a = enqueue(&h.store, task("a")).await;
    let w = worker(&h, &trail, &seen).start();
    h.reaches(a, JobState::Completed).await;
    w.shutdown().await;
    let c = Enqueue::new(task("c"))
        .depends_on([a])
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let prune_all = job::PruneRequest {
        completed_retention: Duration::ZERO,
        cancelled_retention: Duration::ZERO,
        batch: 100,
    };
    assert_eq!(job::Store::prune(&h.store, &prune_all).await.unwrap(), 0);
    assert_eq!(h.row(a).await.state, JobState::Completed);
    let w = worker(&h, &trail, &seen).start();
    h.reaches(c, JobState::Completed).await;
    w.shutdown().await;
    // Once the edge is resolved, both go.
    assert_eq!(job::Store::prune(&h.store, &prune_all).await.unwrap(), 2);
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.dependencies").await,
        0
    );
}

#[tokio::test]
async fn a_dependency_is_not_pruned_while_a_dependent_is_being_enqueued() {
    // The enqueue checks that the job waited for exists, and its edge is seen by the pruner
    // only once it commits: in between, the pruner deleted the completed dependency, and the
    // stager then discarded the dependent as "was deleted". The check now holds the row
    // (FOR KEY SHARE) until the enqueue commits, and the pruner skips it.
    let h = Harness::new().await;
    let (trail, seen) = (Trail::default(), Seen::default());
    let a = enqueue(&h.store, task("a")).await;
    let w = worker(&h, &trail, &seen).start();
    h.reaches(a, JobState::Completed).await;
    w.shutdown().await;
    let mut tx = h.store.pool().begin().await.unwrap();
    let c = Enqueue::new(task("c"))
        .depends_on([a])
        .enqueue(&mut *tx)
        .await
        .unwrap();
    let prune_all = job::PruneRequest {
        completed_retention: Duration::ZERO,
        cancelled_retention: Duration::ZERO,
        batch: 100,
    };
    assert_eq!(
        job::Store::prune(&h.store, &prune_all).await.unwrap(),
        0,
        "the dependency was pruned while its dependent's enqueue was open"
    );
    tx.commit().await.unwrap();
    assert_eq!(job::Store::prune(&h.store, &prune_all).await.unwrap(), 0);
    let w = worker(&h, &trail, &seen).start();
    h.reaches(c, JobState::Completed).await;
    w.shutdown().await;
}

#[tokio::test]
async fn a_dependent_given_an_ordering_key_by_hand_does_not_stop_the_stager() {
    // The doors refuse a job that both waits for dependencies and holds an ordering key; a
    // raw write (job.set_ordering_key, granted to the workers' role) can still make one. The
    // stager promoted it when its dependency ended without asking its key, broke the key's
    // one-head index, and so failed its whole statement on every pass, for every queue.
    use job::Store as _;
    let h = Harness::new().await;
    let pool = h.store.pool();
    let parent = enqueue(&h.store, task("parent")).await;
    let head = Enqueue::new(task("head"))
        .ordering_key("account:1")
        .enqueue(pool)
        .await
        .unwrap();
    let dependent = Enqueue::new(task("dependent"))
        .depends_on([parent])
        .enqueue(pool)
        .await
        .unwrap();
    sqlx::query("SELECT job.set_ordering_key($1, 'account:1')")
        .bind(dependent)
        .execute(pool)
        .await
        .unwrap();
    let (elsewhere,): (i64,) = sqlx::query_as(
        "INSERT INTO job.jobs (kind, queue, payload, state, run_at)
         VALUES ('test.elsewhere', 'other', '{}', 'scheduled', now() - interval '1 minute')
         RETURNING id",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    let finish = |id: JobId| async move {
        sqlx::query("UPDATE job.jobs SET state = 'completed', finalized_at = now() WHERE id = $1")
            .bind(id)
            .execute(pool)
            .await
            .unwrap();
    };
    finish(parent).await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(elsewhere).await.state, JobState::Available);
    assert_eq!(
        h.row(dependent).await.state,
        JobState::Pending,
        "its key still has a head"
    );
    // The head ends: the dependent, its dependency met, is the key's next job.
    finish(head).await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(dependent).await.state, JobState::Available);
}

/// Rows and index entries the current transaction has read from the job schema's tables and
/// indexes (its own, not yet flushed statistics).
const READ_IN_TRANSACTION: &str = "\
SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid)
                    + pg_stat_get_xact_tuples_fetched(c.oid)), 0)::bigint
FROM pg_class c
WHERE c.relnamespace = 'job'::regnamespace AND c.relkind IN ('r', 'i')";

/// One pass of the stager's dependency resolution (not yet due for its once-a-minute sweep),
/// in a transaction of its own: what it changed, and how many rows and index entries it read.
async fn resolve_pass(pool: &sqlx::PgPool) -> (i32, i64) {
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("UPDATE job.dependency_sweep SET at = now()")
        .execute(&mut *tx)
        .await
        .unwrap();
    let before: i64 = sqlx::query_scalar(READ_IN_TRANSACTION)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let changed: i32 = sqlx::query_scalar("SELECT job.dependencies_resolve(1000)")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    let after: i64 = sqlx::query_scalar(READ_IN_TRANSACTION)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    (changed, after - before)
}

#[tokio::test]
async fn the_stager_reads_what_ended_not_every_open_edge() {
    // Every pass of every worker's stager joined each unresolved edge to the job it waits for:
    // with 100,000 open edges whose jobs were still waiting, about 60 ms to find nothing. A
    // pass now reads the jobs that ended among those waited for (jobs_awaited_idx), and new
    // edges once, to flag their jobs.
    use job::Store as _;
    let h = Harness::new().await;
    let pool = h.store.pool();
    const N: i64 = 3_000;
    sqlx::query(
        "WITH parents AS (
             INSERT INTO job.jobs (kind, queue, payload)
             SELECT 'test.dep_task', 'default', '{\"name\": \"p\", \"fail\": false}'
             FROM generate_series(1, $1::bigint)
             RETURNING id
         ),
         dependents AS (
             INSERT INTO job.jobs (kind, queue, payload, state)
             SELECT 'test.dep_task', 'default', '{\"name\": \"d\", \"fail\": false}', 'pending'
             FROM generate_series(1, $1::bigint)
             RETURNING id
         )
         INSERT INTO job.dependencies (job_id, depends_on, mode)
         SELECT d.id, p.id, 'completed'
         FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM parents) p
         JOIN (SELECT id, row_number() OVER (ORDER BY id) AS n FROM dependents) d USING (n)",
    )
    .bind(N)
    .execute(pool)
    .await
    .unwrap();
    sqlx::query("ANALYZE job.jobs, job.dependencies")
        .execute(pool)
        .await
        .unwrap();
    // The first passes flag the jobs waited for, up to the pass's limit each. (A pass may
    // step once over the index entries the last one's flags left behind, at most its limit,
    // until they are marked dead or vacuumed: vacuumed here, as the pruner or autovacuum do.)
    for _ in 0..N / 1000 {
        h.store.stage_due(1000).await.unwrap();
    }
    sqlx::query("VACUUM job.dependencies")
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(
        count(
            &h.store,
            "SELECT count(*) FROM job.dependencies WHERE NOT flagged"
        )
        .await,
        0
    );
    let (changed, read) = resolve_pass(pool).await;
    assert_eq!(changed, 0);
    assert!(
        read < 50,
        "a pass read {read} rows and index entries to find that none of {N} jobs waited for \
         has ended"
    );
    // Three of them end, by any statement: the next pass makes their dependents available,
    // reading about what they are.
    let ended: Vec<i64> = sqlx::query_scalar(
        "UPDATE job.jobs SET state = 'completed', finalized_at = now()
         WHERE id IN (SELECT depends_on FROM job.dependencies ORDER BY depends_on LIMIT 3)
         RETURNING id",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let (changed, read) = resolve_pass(pool).await;
    assert_eq!(changed, 3);
    assert!(read < 200, "a pass read {read} to resolve 3 dependents");
    let available = count(
        &h.store,
        "SELECT count(*) FROM job.jobs WHERE state = 'available' AND payload->>'name' = 'd'",
    )
    .await;
    assert_eq!(available, 3);
    // Their flags are cleared once no open edge points at them, so later passes skip them.
    let flagged: i64 =
        sqlx::query_scalar("SELECT count(*) FROM job.jobs WHERE id = ANY ($1) AND awaited")
            .bind(&ended)
            .fetch_one(pool)
            .await
            .unwrap();
    assert_eq!(flagged, 0);
}

#[tokio::test]
async fn a_dependent_whose_dependency_was_deleted_is_discarded() {
    // A job waited for that is deleted (a purge, raw SQL) leaves no ended row to find. Deleted
    // before the stager flagged it, its dependents are resolved by the pass that finds it
    // missing; deleted after, by the sweep that runs at most once a minute.
    use job::Store as _;
    let h = Harness::new().await;
    let pool = h.store.pool();
    let depend = |on: JobId, name: &'static str| async move {
        Enqueue::new(task(name))
            .depends_on([on])
            .enqueue(pool)
            .await
            .unwrap()
    };
    let delete = |id: JobId| async move {
        sqlx::query("DELETE FROM job.jobs WHERE id = $1")
            .bind(id)
            .execute(pool)
            .await
            .unwrap();
    };
    let early = enqueue(&h.store, task("early")).await;
    let early_dependent = depend(early, "early_dependent").await;
    delete(early).await;
    sqlx::query("UPDATE job.dependency_sweep SET at = now()")
        .execute(pool)
        .await
        .unwrap();
    h.store.stage_due(100).await.unwrap();
    let row = h.row(early_dependent).await;
    assert_eq!(row.state, JobState::Discarded);
    assert!(
        row.errors
            .last()
            .is_some_and(|e| e.message.contains(&format!("job {early}"))
                && e.message.ends_with("was deleted")),
        "{:?}",
        row.errors
    );

    let late = enqueue(&h.store, task("late")).await;
    let late_dependent = depend(late, "late_dependent").await;
    h.store.stage_due(100).await.unwrap();
    let awaited: bool = sqlx::query_scalar("SELECT awaited FROM job.jobs WHERE id = $1")
        .bind(late)
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(awaited, "the stager flags the job waited for");
    delete(late).await;
    let (changed, _) = resolve_pass(pool).await;
    assert_eq!(changed, 0, "no sweep was due");
    assert_eq!(h.row(late_dependent).await.state, JobState::Pending);
    sqlx::query("UPDATE job.dependency_sweep SET at = now() - interval '2 minutes'")
        .execute(pool)
        .await
        .unwrap();
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(late_dependent).await.state, JobState::Discarded);
}

#[tokio::test]
async fn concurrent_stagers_neither_deadlock_nor_miss_a_dependent() {
    // Four stagers pass at once while the jobs waited for end in a shuffled order and new
    // dependents arrive: each pass flags, resolves and clears under SKIP LOCKED row locks, so
    // none waits for another (a deadlock would fail a pass) and every dependent is resolved.
    use job::Store as _;
    let h = Harness::new().await;
    let pool = h.store.pool().clone();
    const N: i64 = 400;
    let parents: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO job.jobs (kind, queue, payload)
         SELECT 'test.dep_task', 'default', '{\"name\": \"p\", \"fail\": false}'
         FROM generate_series(1, $1::bigint)
         RETURNING id",
    )
    .bind(N)
    .fetch_all(&pool)
    .await
    .unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stagers: Vec<_> = (0..4)
        .map(|_| {
            let (store, done) = (h.store.clone(), done.clone());
            tokio::spawn(async move {
                let mut passes = 0u32;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    store.stage_due(50).await.unwrap();
                    passes += 1;
                }
                passes
            })
        })
        .collect();
    // Each dependent waits for two of the parents; half arrive before any parent ends.
    let mut dependents = Vec::new();
    let mut order = parents.clone();
    fastrand::shuffle(&mut order);
    for (i, pair) in parents.chunks(2).enumerate() {
        let d = Enqueue::new(task("d"))
            .depends_on([pair[0], pair[1]])
            .enqueue(&pool)
            .await
            .unwrap();
        dependents.push(d);
        if i == parents.len() / 4 {
            sqlx::query(
                "UPDATE job.jobs SET state = 'completed', finalized_at = now()
                 WHERE id = ANY ($1)",
            )
            .bind(&order[..order.len() / 2])
            .execute(&pool)
            .await
            .unwrap();
        }
    }
    for chunk in order[order.len() / 2..].chunks(10) {
        sqlx::query(
            "UPDATE job.jobs SET state = 'completed', finalized_at = now() WHERE id = ANY ($1)",
        )
        .bind(chunk)
        .execute(&pool)
        .await
        .unwrap();
    }
    let waiting = |pool: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM job.jobs WHERE payload->>'name' = 'd' AND state = 'pending'",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    eventually("every dependent resolved", || {
        let pool = pool.clone();
        async move { (waiting(pool).await == 0).then_some(()) }
    })
    .await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in stagers {
        assert!(s.await.unwrap() > 0);
    }
    let available: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job.jobs WHERE id = ANY ($1) AND state = 'available'",
    )
    .bind(&dependents)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(available, N / 2);
    assert_eq!(
        count(
            &h.store,
            "SELECT count(*) FROM job.jobs WHERE awaited OR id IN (
                 SELECT job_id FROM job.dependencies WHERE NOT resolved)"
        )
        .await,
        0,
        "every flag cleared, every edge resolved"
    );
}

#[tokio::test]
async fn raw_edges_that_close_a_loop_are_refused() {
    // The Rust side refuses a loop within a batch, and its other edges point at jobs that
    // already exist; a raw write to job.dependencies could close one, and every job in it
    // stayed pending for ever. Migration 0025 refuses the edge, whatever wrote it.
    let h = Harness::new().await;
    let pool = h.store.pool();
    let a = enqueue(&h.store, task("a")).await;
    let b = Enqueue::new(task("b"))
        .depends_on([a])
        .enqueue(pool)
        .await
        .unwrap();
    let c = Enqueue::new(task("c"))
        .depends_on([b])
        .enqueue(pool)
        .await
        .unwrap();
    let refused = |statement: String| async move {
        let error = sqlx::raw_sql(&statement)
            .execute(pool)
            .await
            .map(|_| ())
            .expect_err(&statement);
        let db = error.as_database_error().expect("a database error");
        assert_eq!(db.code().as_deref(), Some("23514"), "{statement}: {db}");
        assert!(db.message().contains("`depends_on`"), "{statement}: {db}");
    };
    let edge = |job: JobId, on: JobId, resolved: bool| {
        format!(
            "INSERT INTO job.dependencies (job_id, depends_on, mode, resolved)
             VALUES ({job}, {on}, 'completed', {resolved})"
        )
    };
    refused(edge(a, c, false)).await;
    refused(edge(a, a, false)).await;
    refused(format!(
        "INSERT INTO job.dependencies (job_id, depends_on, mode)
         VALUES ({a}, {b}, 'completed'), ({b}, {c}, 'completed')"
    ))
    .await;
    refused(format!(
        "UPDATE job.dependencies SET depends_on = {c} WHERE job_id = {b}"
    ))
    .await;
    // An edge that closes no loop, and a closed one, are written; reopening the closed one
    // would close a loop.
    for statement in [edge(c, a, false), edge(a, c, true)] {
        sqlx::raw_sql(&statement).execute(pool).await.unwrap();
    }
    refused(format!(
        "UPDATE job.dependencies SET resolved = false WHERE job_id = {a}"
    ))
    .await;
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.dependencies").await,
        4
    );
}

#[tokio::test]
async fn a_redriven_dependent_waits_again_for_a_dependency_that_has_not_completed() {
    // A dependent discarded because its dependency was discarded: redriven, it waits for that
    // job again (pending) rather than running before, or beside, it; redriven alone while its
    // dependency is still a dead letter, it is discarded again for the same reason.
    use job::Store as _;
    let h = Harness::new().await;
    let pool = h.store.pool();
    let charge = enqueue(&h.store, task("charge")).await;
    let ship = Enqueue::new(task("ship"))
        .depends_on([charge])
        .enqueue(pool)
        .await
        .unwrap();
    let end = |id: JobId, state: &'static str| async move {
        sqlx::query(
            "UPDATE job.jobs SET state = $2::job.job_state, finalized_at = now() WHERE id = $1",
        )
        .bind(id)
        .bind(state)
        .execute(pool)
        .await
        .unwrap();
    };
    let redrive = |ids: Vec<JobId>| {
        let store = h.store.clone();
        async move {
            store
                .redrive(&JobFilter {
                    ids,
                    ..Default::default()
                })
                .await
                .unwrap()
        }
    };
    end(charge, "discarded").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(ship).await.state, JobState::Discarded);

    assert_eq!(redrive(vec![ship]).await.redriven, [ship]);
    assert_eq!(h.row(ship).await.state, JobState::Pending, "waits again");
    h.store.stage_due(100).await.unwrap();
    let again = h.row(ship).await;
    assert_eq!(again.state, JobState::Discarded);
    assert_eq!(
        again.errors.last().map(|e| e.message.clone()),
        Some(format!(
            "job {charge}, which this job depends on, was discarded"
        ))
    );

    assert_eq!(redrive(vec![charge, ship]).await.redriven, [charge, ship]);
    assert_eq!(h.row(charge).await.state, JobState::Available);
    assert_eq!(h.row(ship).await.state, JobState::Pending, "behind charge");
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(ship).await.state, JobState::Pending);
    end(charge, "completed").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(ship).await.state, JobState::Available);

    // A dependent that failed on its own, its dependency completed (and since pruned): its
    // edges are satisfied, and it is redriven straight to available.
    end(ship, "discarded").await;
    sqlx::query("DELETE FROM job.jobs WHERE id = $1")
        .bind(charge)
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(redrive(vec![ship]).await.redriven, [ship]);
    assert_eq!(h.row(ship).await.state, JobState::Available);

    // An `after_all` dependent redriven with the job it waits for waits for it again: the
    // statement's snapshot still sees that job ended, which satisfies such an edge.
    let first = enqueue(&h.store, task("first")).await;
    let then = Enqueue::new(task("then"))
        .after_all([first])
        .enqueue(pool)
        .await
        .unwrap();
    end(first, "discarded").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(then).await.state, JobState::Available);
    end(then, "discarded").await;
    assert_eq!(redrive(vec![first, then]).await.redriven, [first, then]);
    assert_eq!(h.row(then).await.state, JobState::Pending, "behind first");
    end(first, "cancelled").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(then).await.state, JobState::Available);
}

/// Ends job `id` in `state` now by a raw write, as a finalize or a cancel would.
async fn end(pool: &sqlx::PgPool, id: JobId, state: &str) {
    sqlx::query(
        "UPDATE job.jobs SET state = $2::job.job_state, finalized_at = now() WHERE id = $1",
    )
    .bind(id)
    .bind(state)
    .execute(pool)
    .await
    .unwrap();
}

/// Redrives the dead letters `ids`; returns those redriven.
async fn redrive(store: PgStore, ids: Vec<JobId>) -> Vec<JobId> {
    store
        .redrive(&JobFilter {
            ids,
            ..Default::default()
        })
        .await
        .unwrap()
        .redriven
}

/// Prunes every completed and cancelled job that may go, whatever its age.
async fn prune_all(store: &PgStore) -> u64 {
    job::Store::prune(
        store,
        &job::PruneRequest {
            completed_retention: Duration::ZERO,
            cancelled_retention: Duration::ZERO,
            batch: 100,
        },
    )
    .await
    .unwrap()
}

/// `satisfied` of the edge from `job` to `on` (migration 0031).
async fn satisfied(pool: &sqlx::PgPool, job: JobId, on: JobId) -> Option<bool> {
    sqlx::query_scalar(
        "SELECT satisfied FROM job.dependencies WHERE job_id = $1 AND depends_on = $2",
    )
    .bind(job)
    .bind(on)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_redriven_dependent_does_not_run_when_what_it_needed_failed_and_is_gone() {
    // An edge recorded only that it was resolved, and redrive read a job waited for that no
    // longer exists as completed and pruned since: a dependent discarded because the job it
    // needed was cancelled ran when redriven once that job had been pruned. The edge now
    // records whether its job satisfied it (migration 0031).
    use job::Store as _;
    let h = Harness::new().await;
    let pool = h.store.pool();
    let charge = enqueue(&h.store, task("charge")).await;
    let ship = Enqueue::new(task("ship"))
        .depends_on([charge])
        .enqueue(pool)
        .await
        .unwrap();
    let audit = Enqueue::new(task("audit"))
        .after_all([charge])
        .enqueue(pool)
        .await
        .unwrap();
    end(pool, charge, "cancelled").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(ship).await.state, JobState::Discarded);
    assert_eq!(h.row(audit).await.state, JobState::Available);
    assert_eq!(satisfied(pool, ship, charge).await, Some(false));
    assert_eq!(satisfied(pool, audit, charge).await, Some(true));
    // The audit fails on its own; both dependents finished, the charge is pruned.
    end(pool, audit, "discarded").await;
    assert_eq!(prune_all(&h.store).await, 1);
    assert!(h.store.get(charge).await.unwrap().is_none());

    assert_eq!(
        redrive(h.store.clone(), vec![ship, audit]).await,
        [ship, audit]
    );
    assert_eq!(
        h.row(ship).await.state,
        JobState::Pending,
        "what it needed never completed"
    );
    assert_eq!(
        h.row(audit).await.state,
        JobState::Available,
        "its edge was satisfied"
    );
    h.store.stage_due(100).await.unwrap();
    let again = h.row(ship).await;
    assert_eq!(again.state, JobState::Discarded);
    assert_eq!(
        again.errors.last().map(|e| e.message.clone()),
        Some(format!(
            "job {charge}, which this job depends on, was deleted"
        ))
    );
    assert_eq!(satisfied(pool, ship, charge).await, Some(false));
}

#[tokio::test]
async fn a_batch_member_is_kept_until_the_callback_has_finished() {
    // The pruner kept only a job that an unresolved edge points at, and the stager resolves a
    // member's edge as the member ends: the early members of a long batch were pruned before
    // the callback ran, which then could not read their outcomes.
    let h = Harness::new().await;
    let (trail, seen) = (Trail::default(), Seen::default());
    let pool = h.store.pool();
    let batch = Batch::new()
        .member(Enqueue::new(task("m1")))
        .member(Enqueue::new(task("m2")))
        .callback(Enqueue::new(Summary {}))
        .enqueue(pool)
        .await
        .unwrap();
    let (m1, m2, callback) = (batch.members[0], batch.members[1], batch.callback);
    end(pool, m1, "completed").await;
    job::Store::stage_due(&h.store, 100).await.unwrap();
    assert_eq!(
        count(
            &h.store,
            "SELECT count(*) FROM job.dependencies WHERE resolved"
        )
        .await,
        1
    );
    assert_eq!(prune_all(&h.store).await, 0, "the callback has not run");
    end(pool, m2, "cancelled").await;
    job::Store::stage_due(&h.store, 100).await.unwrap();
    assert_eq!(h.row(callback).await.state, JobState::Available);
    assert_eq!(prune_all(&h.store).await, 0, "the callback has not run");
    let w = worker(&h, &trail, &seen).start();
    h.reaches(callback, JobState::Completed).await;
    w.shutdown().await;
    assert_eq!(
        seen.0.lock().unwrap().clone(),
        [vec![
            (m1, JobState::Completed, None),
            (m2, JobState::Cancelled, None)
        ]]
    );
    assert_eq!(prune_all(&h.store).await, 3);
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.dependencies").await,
        0
    );
}

#[tokio::test]
async fn a_batch_callback_waits_for_a_member_redriven_from_the_dead_letters() {
    // Redrive opened the edges of the jobs it redrove, never those pointing at them: a member
    // discarded and redriven while its callback still waited for another member left the
    // callback's edge to it resolved, and the callback became available as soon as the other
    // member completed, beside the redriven member still waiting to run.
    use job::Store as _;
    let h = Harness::new().await;
    let pool = h.store.pool();
    let batch = Batch::new()
        .member(Enqueue::new(task("m1")))
        .member(Enqueue::new(task("m2")))
        .callback(Enqueue::new(Summary {}))
        .enqueue(pool)
        .await
        .unwrap();
    let (m1, m2, callback) = (batch.members[0], batch.members[1], batch.callback);
    end(pool, m1, "discarded").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(satisfied(pool, callback, m1).await, Some(true), "any end");
    assert_eq!(redrive(h.store.clone(), vec![m1]).await, [m1]);
    assert_eq!(h.row(m1).await.state, JobState::Available);
    end(pool, m2, "completed").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(
        h.row(callback).await.state,
        JobState::Pending,
        "the callback waits for the member redriven"
    );
    end(pool, m1, "completed").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(callback).await.state, JobState::Available);
}

#[tokio::test]
async fn a_redrive_waits_for_a_stager_pass_holding_the_callback() {
    // Edges are written under their dependent's row lock. A stager pass that holds the callback
    // and read the redriven member as ended decides from that read: were the edge opened again
    // meanwhile without the callback's lock, the pass would promote the callback over an open
    // edge. The redrive locks the pending dependents first: it waits for the pass, and finding
    // the callback promoted once it may go on (the pass came first), leaves its edges alone.
    use job::Store as _;
    let h = Harness::new().await;
    let pool = h.store.pool();
    let batch = Batch::new()
        .member(Enqueue::new(task("m1")))
        .member(Enqueue::new(task("m2")))
        .callback(Enqueue::new(Summary {}))
        .enqueue(pool)
        .await
        .unwrap();
    let (m1, m2, callback) = (batch.members[0], batch.members[1], batch.callback);
    end(pool, m1, "discarded").await;
    h.store.stage_due(100).await.unwrap();
    end(pool, m2, "completed").await;
    // A pass of job.dependencies_resolve, taken apart: it locks the callback, resolves its
    // edge to m2 and, m1 having ended as it read, promotes it.
    let mut pass = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM job.jobs WHERE id = $1 FOR UPDATE")
        .bind(callback)
        .execute(&mut *pass)
        .await
        .unwrap();
    sqlx::query(
        "UPDATE job.dependencies SET resolved = true, satisfied = true
         WHERE job_id = $1 AND NOT resolved",
    )
    .bind(callback)
    .execute(&mut *pass)
    .await
    .unwrap();
    let redriving = tokio::spawn(redrive(h.store.clone(), vec![m1]));
    eventually("the redrive to wait for the pass, or to end", || async {
        let waiting = count(
            &h.store,
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .await;
        (waiting > 0 || redriving.is_finished()).then_some(())
    })
    .await;
    sqlx::query("UPDATE job.jobs SET state = 'available' WHERE id = $1 AND state = 'pending'")
        .bind(callback)
        .execute(&mut *pass)
        .await
        .unwrap();
    pass.commit().await.unwrap();
    assert_eq!(redriving.await.unwrap(), [m1]);
    assert_eq!(h.row(m1).await.state, JobState::Available);
    assert_eq!(h.row(callback).await.state, JobState::Available);
    assert_eq!(
        count(
            &h.store,
            &format!(
                "SELECT count(*) FROM job.dependencies WHERE job_id = {callback} AND NOT resolved"
            )
        )
        .await,
        0,
        "an available callback with an open edge"
    );
}

#[tokio::test]
async fn a_dependency_is_not_pruned_when_its_dependents_enqueue_commits_during_the_prune() {
    // The enqueue holds the job it waits for (FOR KEY SHARE) until it commits, and the pruner's
    // lock skips it; but one statement whose snapshot was taken before the enqueue committed
    // and that reached the row after did not see the edge, locked the row and deleted it, and
    // the stager discarded the dependent ("was deleted"). The pruner's first statement is run
    // here as a cursor, whose snapshot is taken when it is declared and whose rows are locked
    // as they are fetched: that interleaving, made deterministic. The second statement, with
    // a snapshot of its own, sees the edge and keeps the job.
    use job::Store as _;
    const PICK: &str = include_str!("../../job-postgres/src/sql/prune_pick.sql");
    // prune.sql with its fragment spliced in, as the store's sql.rs splices it.
    let delete = include_str!("../../job-postgres/src/sql/prune.sql").replace(
        "-- @verdicts\n",
        include_str!("../../job-postgres/src/sql/verdicts.sql"),
    );
    let h = Harness::new().await;
    let pool = h.store.pool();
    let a = enqueue(&h.store, task("a")).await;
    end(pool, a, "completed").await;
    let mut enqueue = pool.begin().await.unwrap();
    let c = Enqueue::new(task("c"))
        .depends_on([a])
        .enqueue(&mut *enqueue)
        .await
        .unwrap();
    let mut prune = pool.begin().await.unwrap();
    sqlx::query(&format!("DECLARE pick CURSOR FOR {PICK}"))
        .bind(0_i64)
        .bind(0_i64)
        .bind(100_i32)
        .execute(&mut *prune)
        .await
        .unwrap();
    enqueue.commit().await.unwrap();
    let picked: Vec<i64> = sqlx::query_scalar("FETCH ALL FROM pick")
        .fetch_all(&mut *prune)
        .await
        .unwrap();
    assert_eq!(picked, [a], "locked once the enqueue had committed");
    let deleted: i64 = sqlx::query_scalar(&delete)
        .bind(&picked)
        .fetch_one(&mut *prune)
        .await
        .unwrap();
    prune.commit().await.unwrap();
    assert_eq!(deleted, 0, "the job waited for was deleted");
    assert_eq!(h.row(a).await.state, JobState::Completed);
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(c).await.state, JobState::Available);
}

#[tokio::test]
async fn a_redriven_dependent_does_not_fail_on_a_dependency_it_had_and_that_was_pruned() {
    // Ship depends on charge and pack. Charge completes; pack is discarded, and ship with it.
    // Once both of ship's dependencies had ended, the pruner let charge go. The operator fixes
    // the cause and redrives pack and ship; pack completes. Ship was then discarded again as
    // "charge was deleted", though charge had completed: the stager took a missing dependency
    // for a failure whatever its edge recorded (migration 0031).
    use job::Store as _;
    let h = Harness::new().await;
    let pool = h.store.pool();
    let charge = enqueue(&h.store, task("charge")).await;
    let pack = enqueue(&h.store, task("pack")).await;
    let ship = Enqueue::new(task("ship"))
        .depends_on([charge, pack])
        .enqueue(pool)
        .await
        .unwrap();
    end(pool, charge, "completed").await;
    h.store.stage_due(100).await.unwrap();
    end(pool, pack, "discarded").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(ship).await.state, JobState::Discarded);
    assert_eq!(satisfied(pool, ship, charge).await, Some(true));
    assert_eq!(
        prune_all(&h.store).await,
        1,
        "charge, its dependent finished"
    );
    assert_eq!(
        redrive(h.store.clone(), vec![pack, ship]).await,
        [pack, ship]
    );
    assert_eq!(h.row(ship).await.state, JobState::Pending, "behind pack");
    end(pool, pack, "completed").await;
    h.store.stage_due(100).await.unwrap();
    let row = h.row(ship).await;
    assert_eq!(
        row.state,
        JobState::Available,
        "every dependency completed: {:?}",
        row.errors.last()
    );
}

/// `charge`, `pack` and `ship`, which depends on both: `pack` is discarded while `charge` still
/// waits, so `ship` is discarded and its edge to `charge` closed without a verdict. Returns
/// (charge, pack, ship).
async fn ship_discarded_while_charge_waits(h: &Harness) -> (JobId, JobId, JobId) {
    use job::Store as _;
    let pool = h.store.pool();
    let charge = enqueue(&h.store, task("charge")).await;
    let pack = enqueue(&h.store, task("pack")).await;
    let ship = Enqueue::new(task("ship"))
        .depends_on([charge, pack])
        .enqueue(pool)
        .await
        .unwrap();
    h.store.stage_due(100).await.unwrap();
    end(pool, pack, "discarded").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(ship).await.state, JobState::Discarded);
    assert_eq!(
        satisfied(pool, ship, charge).await,
        None,
        "closed without a verdict"
    );
    (charge, pack, ship)
}

#[tokio::test]
async fn a_redriven_dependent_does_not_fail_on_a_dependency_that_completed_after_it_was_discarded()
{
    // As above, the other way round: pack is discarded while charge still runs, so ship is
    // discarded and its edge to charge closed without a verdict; charge then completes and is
    // pruned. Redriven with pack, ship was discarded again as "charge was deleted".
    use job::Store as _;
    let h = Harness::new().await;
    let pool = h.store.pool();
    let (charge, pack, ship) = ship_discarded_while_charge_waits(&h).await;
    end(pool, charge, "completed").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(
        prune_all(&h.store).await,
        1,
        "charge, its dependent finished"
    );
    assert_eq!(
        redrive(h.store.clone(), vec![pack, ship]).await,
        [pack, ship]
    );
    end(pool, pack, "completed").await;
    h.store.stage_due(100).await.unwrap();
    let row = h.row(ship).await;
    assert_eq!(
        row.state,
        JobState::Available,
        "every dependency completed: {:?}",
        row.errors.last()
    );
}

#[tokio::test]
async fn a_redriven_dependent_does_not_run_when_a_dependency_closed_without_a_verdict_failed_and_is_gone(
) {
    // The mirror of the test above: pack is discarded while charge still runs, so ship is
    // discarded and its edge to charge closed without a verdict; charge then ends badly
    // (cancelled, then pruned; or a dead letter, then purged). The missing job of an edge
    // without a verdict read as satisfied: redriven with pack, ship ran once pack completed,
    // although charge never did. Deleting charge now records on the edge that it failed it.
    use job::Store as _;
    for (how, gone_by) in [("cancelled", "prune"), ("discarded", "purge")] {
        let h = Harness::new().await;
        let pool = h.store.pool();
        let (charge, pack, ship) = ship_discarded_while_charge_waits(&h).await;
        end(pool, charge, how).await;
        h.store.stage_due(100).await.unwrap();
        let deleted = match gone_by {
            "prune" => prune_all(&h.store).await,
            _ => h.store.purge(&JobFilter::ids([charge])).await.unwrap(),
        };
        assert_eq!(deleted, 1, "{how}: charge is gone by {gone_by}");
        assert_eq!(
            satisfied(pool, ship, charge).await,
            Some(false),
            "{how}: the edge keeps that charge failed it"
        );
        assert_eq!(
            redrive(h.store.clone(), vec![pack, ship]).await,
            [pack, ship]
        );
        end(pool, pack, "completed").await;
        h.store.stage_due(100).await.unwrap();
        let row = h.row(ship).await;
        assert_eq!(
            row.state,
            JobState::Discarded,
            "{how}: ship needed charge to complete, and charge never did"
        );
        assert_eq!(row.errors.last().unwrap().class, "dependency", "{how}");
    }
}

/// A dependent's deadline holds while it waits for its dependencies: past it, the expirer
/// discards it (class `expired`) whatever it still waits for, and its own dependents fail with
/// it. It used to be read only once the job left `pending`: a dependent of a job scheduled
/// next month waited a month past its deadline.
#[tokio::test]
async fn a_dependent_past_its_deadline_expires_while_it_waits() {
    let h = Harness::new().await;
    let later = Enqueue::new(task("later"))
        .run_at(chrono::Utc::now() + chrono::Duration::days(30))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let dependent = Enqueue::new(task("dependent"))
        .depends_on([later])
        .deadline_in(Duration::from_secs(3600))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let after = Enqueue::new(task("after"))
        .depends_on([dependent])
        .enqueue(h.store.pool())
        .await
        .unwrap();
    assert_eq!(h.row(dependent).await.state, JobState::Pending);
    // The hour passes (the door refuses a deadline already past, so it is moved back).
    sqlx::query("UPDATE job.jobs SET deadline = now() - interval '1 second' WHERE id = $1")
        .bind(dependent)
        .execute(h.store.pool())
        .await
        .unwrap();
    let expired = job::Store::expire(&h.store, 100).await.unwrap();
    assert_eq!((expired.discarded, expired.cancelled), (1, 0));
    let row = h.row(dependent).await;
    assert_eq!(row.state, JobState::Discarded);
    assert_eq!(row.errors.last().unwrap().class, "expired");
    // Its dependent fails with it, at the stager's next pass.
    job::Store::stage_due(&h.store, 100).await.unwrap();
    let row = h.row(after).await;
    assert_eq!(row.state, JobState::Discarded);
    assert_eq!(row.errors.last().unwrap().class, "dependency");
    assert_eq!(h.row(later).await.state, JobState::Scheduled);
}

#[tokio::test]
async fn a_dependent_deleted_raw_takes_its_edges_with_it() {
    // A raw DELETE of waiting dependents (an application with the worker role's table
    // privileges) left their edges unflagged for good, first in the stager's flagging order,
    // where enough of them took its whole batch: the jobs that later dependents waited for
    // were no longer flagged, and those dependents were seen only by the stager's sweep, at
    // most once a minute.
    use job::Store as _;
    let h = Harness::new().await;
    let pool = h.store.pool();
    let later = Enqueue::new(task("later"))
        .run_at(chrono::Utc::now() + chrono::Duration::days(1))
        .enqueue(pool)
        .await
        .unwrap();
    let mut gone = Vec::new();
    for _ in 0..3 {
        gone.push(
            Enqueue::new(task("gone"))
                .depends_on([later])
                .enqueue(pool)
                .await
                .unwrap(),
        );
    }
    sqlx::query("DELETE FROM job.jobs WHERE id = ANY ($1)")
        .bind(&gone)
        .execute(pool)
        .await
        .unwrap();
    let edges: i64 = sqlx::query_scalar("SELECT count(*) FROM job.dependencies")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(edges, 0, "a dependent's edges go with it");
    // An edge of a dependent that does not exist cannot be written either.
    let orphan = sqlx::query(
        "INSERT INTO job.dependencies (job_id, depends_on, mode) VALUES ($1, $2, 'completed')",
    )
    .bind(gone[0])
    .bind(later)
    .execute(pool)
    .await
    .expect_err("no such dependent");
    assert!(
        orphan.to_string().contains("dependencies_job_id_fkey"),
        "{orphan}"
    );
    let a = enqueue(&h.store, task("a")).await;
    let b = Enqueue::new(task("b"))
        .depends_on([a])
        .enqueue(pool)
        .await
        .unwrap();
    end(pool, a, "completed").await;
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(b).await.state, JobState::Available);
}

/// `job.dependencies_exist`, which the store's dependency statement calls and a worker's role
/// may call, names a NULL among the ids as such (it said "names job <NULL>, which does not
/// exist" before migration 0065), and a missing id by its number.
#[tokio::test]
async fn the_dependency_check_names_a_null_id_and_a_missing_one() {
    let h = Harness::new().await;
    let pool = h.db.pool();
    for (ids, says) in [
        (
            "{NULL}",
            "job row refused: `depends_on` holds a null job id",
        ),
        (
            "{1,NULL}",
            "job row refused: `depends_on` holds a null job id",
        ),
        (
            "{987654}",
            "job row refused: `depends_on` names job 987654, which does not exist",
        ),
    ] {
        let refused = sqlx::query("SELECT job.dependencies_exist($1::bigint[])")
            .bind(ids)
            .execute(&pool)
            .await
            .unwrap_err();
        let db_error = refused
            .as_database_error()
            .expect("refused by the function");
        assert_eq!(
            db_error.code().as_deref(),
            Some("23514"),
            "{ids}: {refused}"
        );
        assert_eq!(db_error.message(), says, "{ids}");
    }
}
