//! Per-key ordering: jobs with one ordering key run one at a time, in enqueue order, across
//! every worker; different keys run in parallel; a failing job holds its successors.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use job::{
    Admin, Cancelled, Enqueue, Job, JobContext, JobError, JobId, JobOptions, JobState, Store,
};
use job_core::{EnqueueOptions, NewJob, DEFAULT_PAYLOAD_LIMIT};
use serde::{Deserialize, Serialize};

use crate::common::*;
use crate::support::count;

/// What ran, per key: starts and ends in the order they happened, and every start that found
/// another execution of its key still running.
#[derive(Clone, Default)]
struct Book(Arc<Mutex<BookInner>>);

#[derive(Default)]
struct BookInner {
    running: HashMap<String, usize>,
    order: HashMap<String, Vec<u32>>,
    overlaps: Vec<(String, u32)>,
    now: usize,
    peak: usize,
}

impl Book {
    fn start(&self, key: &str, seq: u32) {
        let mut b = self.0.lock().unwrap();
        let running = b.running.entry(key.to_owned()).or_default();
        *running += 1;
        if *running > 1 {
            b.overlaps.push((key.to_owned(), seq));
        }
        b.order.entry(key.to_owned()).or_default().push(seq);
        b.now += 1;
        b.peak = b.peak.max(b.now);
    }

    fn end(&self, key: &str) {
        let mut b = self.0.lock().unwrap();
        *b.running.get_mut(key).unwrap() -= 1;
        b.now -= 1;
    }
}

/// One job of an ordered sequence: `seq` is its place within its key. Fails its first
/// `fail_first` attempts; runs for `ms` milliseconds.
#[derive(Debug, Serialize, Deserialize)]
struct Step {
    key: String,
    seq: u32,
    ms: u64,
    fail_first: i32,
    #[serde(default)]
    terminal: bool,
}

impl Job for Step {
    const KIND: &'static str = "test.ordered_step";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        max_attempts: 3,
        ..JobOptions::DEFAULT
    };

    fn ordering_key(&self) -> Option<String> {
        Some(self.key.clone())
    }

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let book = ctx.state::<Book>()?.clone();
        book.start(&self.key, self.seq);
        tokio::time::sleep(Duration::from_millis(self.ms)).await;
        book.end(&self.key);
        if self.terminal {
            return Err(JobError::terminal("this step cannot work"));
        }
        if ctx.attempt() <= self.fail_first {
            return Err(JobError::retryable("not yet"));
        }
        Ok(())
    }
}

fn step(key: &str, seq: u32) -> Step {
    Step {
        key: key.into(),
        seq,
        ms: 2,
        fail_first: 0,
        terminal: false,
    }
}

fn worker(h: &Harness, book: &Book, name: &str) -> job::Worker<job::PgStore> {
    job::Worker::builder(h.store.clone())
        .register::<Step>()
        .queue("default", 8)
        .id(name)
        .poll_interval(Duration::from_millis(20))
        .state(book.clone())
        .build()
        .unwrap()
}

async fn all_completed(h: &Harness, n: i64) {
    eventually("every job to complete", || async {
        (count_in(&h.store, JobState::Completed).await == n).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_workers_run_each_of_100_keys_one_at_a_time_in_enqueue_order() {
    let h = Harness::new().await;
    let book = Book::default();
    // Five jobs for each of 100 keys, the keys interleaved; some one by one, some in bulk, and
    // some failing once, which holds their successors until their retry completes.
    let mut bulk = Vec::new();
    for seq in 0..5u32 {
        for k in 0..100 {
            let mut s = step(&format!("account:{k}"), seq);
            s.fail_first = i32::from(k % 10 == 0 && seq == 1);
            if k % 2 == 0 {
                enqueue(&h.store, s).await;
            } else {
                bulk.push(
                    NewJob::build(&s, EnqueueOptions::default(), DEFAULT_PAYLOAD_LIMIT).unwrap(),
                );
            }
        }
        h.store
            .enqueue_many(std::mem::take(&mut bulk))
            .await
            .unwrap();
    }
    assert_eq!(
        count_in(&h.store, JobState::Available).await,
        100,
        "one head per key"
    );
    assert_eq!(count_in(&h.store, JobState::Pending).await, 400);

    let workers: Vec<_> = (0..4)
        .map(|i| worker(&h, &book, &format!("w{i}")).start())
        .collect();
    all_completed(&h, 500).await;
    for w in workers {
        w.shutdown().await;
    }
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.ordering_wake").await,
        0
    );
    let b = book.0.lock().unwrap();
    assert_eq!(b.overlaps, [], "two jobs of one key ran at once");
    for k in 0..100 {
        let order = &b.order[&format!("account:{k}")];
        let want: Vec<u32> = if k % 10 == 0 {
            vec![0, 1, 1, 2, 3, 4]
        } else {
            vec![0, 1, 2, 3, 4]
        };
        assert_eq!(order, &want, "key account:{k} ran out of order");
    }
    assert!(
        b.peak > 1,
        "different keys ran in parallel (peak {})",
        b.peak
    );
}

#[tokio::test]
async fn a_discarded_job_releases_its_key_and_a_cancelled_one_too() {
    let h = Harness::new().await;
    let book = Book::default();
    let mut broken = step("k", 0);
    broken.terminal = true;
    let first = enqueue(&h.store, broken).await;
    let second = enqueue(&h.store, step("k", 1)).await;
    let third = enqueue(&h.store, step("k", 2)).await;
    assert_eq!(h.row(second).await.state, JobState::Pending);
    assert_eq!(h.row(second).await.ordering_key.as_deref(), Some("k"));
    // An operator cancels the third while it waits: it never runs, and holds nothing.
    assert_eq!(h.store.cancel(third).await.unwrap(), Cancelled::Now);

    let w = worker(&h, &book, "w").start();
    h.reaches(second, JobState::Completed).await;
    w.shutdown().await;
    assert_eq!(h.row(first).await.state, JobState::Discarded);
    assert_eq!(book.0.lock().unwrap().order["k"], [0, 1]);
}

#[tokio::test]
async fn an_operator_cancelling_the_head_promotes_the_next_job() {
    let h = Harness::new().await;
    let first = enqueue(&h.store, step("k", 0)).await;
    let second = enqueue(&h.store, step("k", 1)).await;
    assert_eq!(h.row(second).await.state, JobState::Pending);
    h.store.cancel(first).await.unwrap();
    assert_eq!(h.row(second).await.state, JobState::Available);
}

#[tokio::test]
async fn a_redriven_dead_letter_waits_behind_its_keys_unfinished_jobs() {
    let h = Harness::new().await;
    let book = Book::default();
    let mut broken = step("k", 0);
    broken.terminal = true;
    let dead = enqueue(&h.store, broken).await;
    let w = worker(&h, &book, "w").start();
    h.reaches(dead, JobState::Discarded).await;
    w.shutdown().await;

    let head = enqueue(&h.store, step("k", 1)).await;
    assert_eq!(h.row(head).await.state, JobState::Available);
    let report = h
        .store
        .redrive(&job::JobFilter {
            kind: Some(Step::KIND.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(report.redriven, [dead], "{report:?}");
    assert_eq!(
        h.row(dead).await.state,
        JobState::Pending,
        "behind the head"
    );
    h.store.cancel(head).await.unwrap();
    assert_eq!(h.row(dead).await.state, JobState::Available);
}

#[tokio::test]
async fn dead_letters_of_a_key_without_a_head_are_redriven_in_enqueue_order() {
    // a, b and c of one key; b expires while it waits (discarded first), then a is discarded
    // and c completes: the key has no head. Redriven together, the first of them the UPDATE
    // wrote became the head, in the order they were discarded: b ran before a.
    let h = Harness::new().await;
    let pool = h.store.pool();
    let a = enqueue(&h.store, step("k", 0)).await;
    let b = enqueue(&h.store, step("k", 1)).await;
    let c = enqueue(&h.store, step("k", 2)).await;
    assert_eq!(h.row(b).await.state, JobState::Pending);
    let end = |id: JobId, state: &'static str, ago: i32| async move {
        sqlx::query(
            "UPDATE job.jobs SET state = $2::job.job_state,
                    finalized_at = now() - make_interval(mins => $3) WHERE id = $1",
        )
        .bind(id)
        .bind(state)
        .bind(ago)
        .execute(pool)
        .await
        .unwrap();
    };
    end(b, "discarded", 30).await;
    end(a, "discarded", 20).await;
    assert_eq!(h.row(c).await.state, JobState::Available, "c took over");
    end(c, "completed", 10).await;
    let report = h
        .store
        .redrive(&job::JobFilter {
            kind: Some(Step::KIND.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(report.redriven, [a, b], "{report:?}");
    assert_eq!(h.row(a).await.state, JobState::Available, "a heads its key");
    assert_eq!(h.row(b).await.state, JobState::Pending, "b waits behind a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_transactions_enqueueing_one_key_make_one_head() {
    let h = Harness::new().await;
    let tasks: Vec<_> = (0..20u32)
        .map(|i| {
            let pool = h.store.pool().clone();
            tokio::spawn(async move {
                let mut tx = pool.begin().await.unwrap();
                let id = Enqueue::new(step("hot", i))
                    .enqueue(&mut *tx)
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(u64::from(i % 3))).await;
                tx.commit().await.unwrap();
                id
            })
        })
        .collect();
    let mut ids: Vec<JobId> = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap());
    }
    assert_eq!(count_in(&h.store, JobState::Available).await, 1);
    assert_eq!(count_in(&h.store, JobState::Pending).await, 19);
    ids.sort_unstable();
    let head: JobId = sqlx::query_scalar("SELECT id FROM job.jobs WHERE state = 'available'")
        .fetch_one(h.store.pool())
        .await
        .unwrap();
    assert_eq!(head, ids[0], "the first enqueued is the head");
}

#[tokio::test]
async fn a_unique_job_can_carry_an_ordering_key() {
    let h = Harness::new().await;
    let head = enqueue(&h.store, step("k", 0)).await;
    let unique = Enqueue::new(step("k", 1))
        .unique_key("u")
        .enqueue(h.store.pool())
        .await
        .unwrap();
    let row = h.row(unique).await;
    assert_eq!(
        (row.state, row.ordering_key.as_deref()),
        (JobState::Pending, Some("k"))
    );
    h.store.cancel(head).await.unwrap();
    assert_eq!(h.row(unique).await.state, JobState::Available);
}

#[tokio::test]
async fn a_unique_job_waiting_behind_its_ordering_key_holds_its_unique_key() {
    // While it waits in `pending`, another job with its unique key is a duplicate of it,
    // whatever its ordering key; so when the head finishes, nothing stops its promotion (the
    // unique index refused it, failing the head's finalize, when `pending` held no key).
    let h = Harness::new().await;
    let head = enqueue(&h.store, step("k", 0)).await;
    let unique = Enqueue::new(step("k", 1))
        .unique_key("u")
        .enqueue(h.store.pool())
        .await
        .unwrap();
    assert_eq!(h.row(unique).await.state, JobState::Pending);
    for other in [step("k", 2), step("other", 3)] {
        match Enqueue::new(other)
            .unique_key("u")
            .enqueue(h.store.pool())
            .await
        {
            Err(job::EnqueueError::Duplicate { existing, .. }) => assert_eq!(existing, unique),
            got => panic!("expected a duplicate of job {unique}, got {got:?}"),
        }
    }
    let book = Book::default();
    let w = worker(&h, &book, "w").start();
    h.reaches(unique, JobState::Completed).await;
    w.shutdown().await;
    assert_eq!(h.row(head).await.state, JobState::Completed);
    assert_eq!(book.0.lock().unwrap().order["k"], [0, 1]);
}

#[tokio::test]
async fn a_headless_key_left_by_a_race_is_promoted_by_the_stager() {
    // The release trigger could not take the key's lock (an enqueuer held it): the key is on
    // the wake-up list, and the stager promotes its oldest pending job.
    let h = Harness::new().await;
    let a = enqueue(&h.store, step("k", 0)).await;
    let b = enqueue(&h.store, step("k", 1)).await;
    // Finish the head while another session holds the key's lock, as an enqueuer would.
    let mut holder = h.store.pool().begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(job.ordering_lock_key('k'))")
        .execute(&mut *holder)
        .await
        .unwrap();
    h.store.cancel(a).await.unwrap();
    assert_eq!(h.row(b).await.state, JobState::Pending, "not promoted yet");
    assert_eq!(
        h.store.stage_due(100).await.unwrap(),
        0,
        "the lock is still held"
    );
    holder.rollback().await.unwrap();
    assert_eq!(h.store.stage_due(100).await.unwrap(), 1);
    assert_eq!(h.row(b).await.state, JobState::Available);
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.ordering_wake").await,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_the_job_a_promotion_picked_promotes_the_next_one() {
    // An operator's cancel of a pending job does not take the key's lock: it can hold the row
    // that the head's release picked to promote, and commit after the release read it. The
    // promotion then takes the key's next pending job. Before, it gave up: the key had no
    // head and no wake-up entry, and its jobs waited until a new job of the key came.
    let h = Harness::new().await;
    let head = enqueue(&h.store, step("k", 0)).await;
    let picked = enqueue(&h.store, step("k", 1)).await;
    let next = enqueue(&h.store, step("k", 2)).await;
    // The stager's pass forgets the key the admit trigger listed (it has a head).
    h.store.stage_due(100).await.unwrap();
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.ordering_wake").await,
        0
    );
    let mut operator = h.store.pool().begin().await.unwrap();
    sqlx::query(
        "UPDATE job.jobs SET state = 'cancelled', finalized_at = now() \
         WHERE id = $1 AND state = 'pending'",
    )
    .bind(picked)
    .execute(&mut *operator)
    .await
    .unwrap();
    let store = h.store.clone();
    let head_ends = tokio::spawn(async move { store.cancel(head).await });
    eventually("the head's release to wait for the picked row", || async {
        let waiting = count(
            &h.store,
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .await;
        (waiting == 1).then_some(())
    })
    .await;
    operator.commit().await.unwrap();
    assert_eq!(head_ends.await.unwrap().unwrap(), Cancelled::Now);
    assert_eq!(h.row(picked).await.state, JobState::Cancelled);
    assert_eq!(h.row(next).await.state, JobState::Available);
}

#[tokio::test]
async fn an_ordering_key_is_bounded_at_the_door() {
    let h = Harness::new().await;
    for (key, why) in [("", "must be 1 to 512 bytes"), ("a\0b", "NUL")] {
        let err = Enqueue::new(step("x", 0))
            .ordering_key(key)
            .enqueue(h.store.pool())
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("ordering_key") && text.contains(why),
            "{text}"
        );
    }
    let long = "k".repeat(513);
    let err = Enqueue::new(step("x", 0))
        .ordering_key(long)
        .enqueue(h.store.pool())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("ordering_key"), "{err}");
    // Past the Rust door, the table's CHECK refuses it too.
    let raw = sqlx::query(
        "INSERT INTO job.jobs (kind, payload, ordering_key) VALUES ('x', '{}', repeat('k', 513))",
    )
    .execute(h.store.pool())
    .await
    .unwrap_err();
    assert!(raw.to_string().contains("jobs_ordering_key_check"), "{raw}");
    assert_eq!(count(&h.store, "SELECT count(*) FROM job.jobs").await, 0);
}

#[tokio::test]
async fn a_head_finishing_while_the_stager_forgets_its_key_still_hands_the_key_on() {
    // The stager holds the key's lock and has deleted the key's wake-up entry, not yet
    // committed, when the head finishes: the release trigger cannot take the lock and must put
    // the key back on the list although it still sees the entry being deleted.
    let h = Harness::new().await;
    let a = enqueue(&h.store, step("k", 0)).await;
    let b = enqueue(&h.store, step("k", 1)).await;
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.ordering_wake").await,
        1,
        "the admit trigger listed the key"
    );
    let mut stager = h.store.pool().begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(job.ordering_lock_key('k'))")
        .execute(&mut *stager)
        .await
        .unwrap();
    sqlx::query("DELETE FROM job.ordering_wake WHERE ordering_key = 'k'")
        .execute(&mut *stager)
        .await
        .unwrap();
    h.store.cancel(a).await.unwrap();
    stager.commit().await.unwrap();
    assert_eq!(h.row(b).await.state, JobState::Pending);
    assert_eq!(h.store.stage_due(100).await.unwrap(), 1);
    assert_eq!(h.row(b).await.state, JobState::Available);
}

#[tokio::test]
async fn a_bulk_enqueue_of_twenty_thousand_keys_fits_the_servers_lock_table() {
    // Each key's admit takes an advisory lock held to commit; without buckets, 20,000 keys in
    // one transaction overflow the shared lock table (6,400 slots by default).
    let h = Harness::new().await;
    let jobs: Vec<NewJob> = (0..20_000)
        .map(|k| {
            NewJob::build(
                &step(&format!("key:{k}"), 0),
                EnqueueOptions::default(),
                DEFAULT_PAYLOAD_LIMIT,
            )
            .unwrap()
        })
        .collect();
    let ids = h.store.enqueue_many(jobs).await.unwrap();
    assert_eq!(ids.len(), 20_000);
    assert_eq!(count_in(&h.store, JobState::Available).await, 20_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_bulk_enqueues_of_shared_keys_in_opposite_orders_do_not_deadlock() {
    // Each row's admit takes its key's lock; taken row by row in input order, two bulk
    // enqueues sharing keys in opposite orders each held what the other waited for, and the
    // server aborted one (deadlock detected). The statement now takes all its locks first, in
    // one order. (A bulk enqueue split in chunks takes every chunk's locks first too.)
    let h = Harness::new().await;
    let keyed = |round: u32, keys: Vec<u32>| -> Vec<NewJob> {
        keys.into_iter()
            .map(|k| {
                NewJob::build(
                    &step(&format!("r{round}:{k}"), 0),
                    EnqueueOptions::default(),
                    DEFAULT_PAYLOAD_LIMIT,
                )
                .unwrap()
            })
            .collect()
    };
    for round in 0..3 {
        let up = keyed(round, (0..1_000).collect());
        let down = keyed(round, (0..1_000).rev().collect());
        let (a, b) = (h.store.clone(), h.store.clone());
        let (x, y) = tokio::join!(
            tokio::spawn(async move { a.enqueue_many(up).await.map(|ids| ids.len()) }),
            tokio::spawn(async move { b.enqueue_many(down).await.map(|ids| ids.len()) }),
        );
        assert_eq!(x.unwrap().unwrap(), 1_000, "round {round}");
        assert_eq!(y.unwrap().unwrap(), 1_000, "round {round}");
    }
}

#[tokio::test]
async fn a_keyed_job_draws_its_id_after_taking_its_keys_lock() {
    // An id drawn before the key's lock (here forced low, as a transaction that drew its id
    // and then waited for the lock would hold) is drawn again once the lock is held, so the
    // ids of a key follow the order in which their enqueuers took its lock.
    let h = Harness::new().await;
    let head = enqueue(&h.store, step("k", 0)).await;
    let id: JobId = sqlx::query_scalar(
        "INSERT INTO job.jobs (id, kind, payload, ordering_key) OVERRIDING SYSTEM VALUE \
         VALUES (-5, 'test.ordered_step', '{}', 'k') RETURNING id",
    )
    .fetch_one(h.store.pool())
    .await
    .unwrap();
    assert!(id > head, "id {id} drawn again after the head {head}");
    assert_eq!(h.row(id).await.state, JobState::Pending);
}

/// A transaction under REPEATABLE READ sees what was committed before its first statement,
/// however long ago. A head finished in one (`complete_in` in the application's transaction,
/// say) while a job of its key was enqueued after that snapshot: its promotion did not see the
/// new job, and the stager had dropped the key's wake-up entry while the head still ran. The
/// new job stayed pending with no head until another job of its key came.
#[tokio::test]
async fn a_head_finished_under_repeatable_read_hands_its_key_on() {
    let h = Harness::new().await;
    let head = enqueue(&h.store, step("k", 0)).await;
    sqlx::query("UPDATE job.jobs SET state = 'running', attempt = 1, lock_token = gen_random_uuid(), locked_by = 'w', locked_until = now() + interval '1 hour' WHERE id = $1")
        .bind(head)
        .execute(h.store.pool())
        .await
        .unwrap();
    let mut app = h.store.pool().begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *app)
        .await
        .unwrap();
    sqlx::query("SELECT count(*) FROM job.jobs")
        .execute(&mut *app)
        .await
        .unwrap();
    let next = enqueue(&h.store, step("k", 1)).await;
    assert_eq!(h.row(next).await.state, JobState::Pending);
    // The stager forgets the key: its head still runs.
    h.store.stage_due(100).await.unwrap();
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.ordering_wake").await,
        0
    );
    sqlx::query(
        "UPDATE job.jobs SET state = 'completed', finalized_at = now(), lock_token = NULL, \
         locked_until = NULL, locked_by = NULL WHERE id = $1",
    )
    .bind(head)
    .execute(&mut *app)
    .await
    .unwrap();
    app.commit().await.unwrap();
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(next).await.state, JobState::Available);
}

/// An enqueue under REPEATABLE READ that saw its key's head (finished since) made its job
/// pending, and skipped the key's wake-up entry because its snapshot still showed one (deleted
/// since by a stager pass): no head, no entry, until another job of its key came.
#[tokio::test]
async fn a_job_enqueued_under_repeatable_read_behind_a_finished_head_is_promoted() {
    let h = Harness::new().await;
    let head = enqueue(&h.store, step("k", 0)).await;
    let first = enqueue(&h.store, step("k", 1)).await;
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.ordering_wake").await,
        1
    );
    let mut app = h.store.pool().begin().await.unwrap();
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *app)
        .await
        .unwrap();
    sqlx::query("SELECT count(*) FROM job.ordering_wake")
        .execute(&mut *app)
        .await
        .unwrap();
    // Meanwhile both jobs of the key finish, and the stager drops the entry.
    h.store.cancel(head).await.unwrap();
    h.store.stage_due(100).await.unwrap();
    h.store.cancel(first).await.unwrap();
    h.store.stage_due(100).await.unwrap();
    assert_eq!(
        count(&h.store, "SELECT count(*) FROM job.ordering_wake").await,
        0
    );
    let late = job::Enqueue::new(step("k", 2))
        .enqueue(&mut *app)
        .await
        .unwrap();
    app.commit().await.unwrap();
    assert_eq!(
        h.row(late).await.state,
        JobState::Pending,
        "its snapshot saw a head"
    );
    h.store.stage_due(100).await.unwrap();
    assert_eq!(h.row(late).await.state, JobState::Available);
}

/// A redrive of keyed dead letters takes all their keys' locks first, in the order a bulk
/// enqueue takes them. Taken row by row, a redrive waiting for one key while an application's
/// bulk enqueue of the same keys held the other deadlocked with it, and the server could cancel
/// the application's transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redrive_and_a_bulk_enqueue_of_the_same_keys_do_not_deadlock() {
    let h = Harness::new().await;
    // Two keys whose locks a bulk enqueue takes B first; the redrive's rows come A first.
    let lock = |key: String| {
        let pool = h.store.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>("SELECT job.ordering_lock_key($1)")
                .bind(key)
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let (a, b) = {
        let mut found = None;
        for i in 0..50 {
            let (x, y) = (format!("a{i}"), format!("b{i}"));
            if lock(y.clone()).await < lock(x.clone()).await {
                found = Some((x, y));
                break;
            }
        }
        found.expect("two keys in that order")
    };
    let dead_a = enqueue(&h.store, step(&a, 0)).await;
    let dead_b = enqueue(&h.store, step(&b, 0)).await;
    sqlx::query("UPDATE job.jobs SET state = 'discarded', finalized_at = now() WHERE id = ANY($1)")
        .bind(vec![dead_a, dead_b])
        .execute(h.store.pool())
        .await
        .unwrap();
    let waiting = |n: i64| {
        let pool = h.store.pool().clone();
        async move {
            eventually("a lock to be waited for", || async {
                let w: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
                )
                .fetch_one(&pool)
                .await
                .unwrap();
                (w >= n).then_some(())
            })
            .await
        }
    };
    // Someone holds A's lock for a while (another enqueue of A, mid-transaction).
    let mut holder = h.store.pool().begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(job.ordering_lock_key($1))")
        .bind(&a)
        .execute(&mut *holder)
        .await
        .unwrap();
    let store = h.store.clone();
    let redrive =
        tokio::spawn(async move { store.redrive(&job::JobFilter::ids([dead_a, dead_b])).await });
    waiting(1).await;
    let pool = h.store.pool().clone();
    let (ka, kb) = (a.clone(), b.clone());
    let application = tokio::spawn(async move {
        let mut tx = pool.begin().await?;
        sqlx::query("SELECT job.ordering_lock_keys(ARRAY[$1, $2])")
            .bind(ka)
            .bind(kb)
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    });
    waiting(2).await;
    holder.commit().await.unwrap();
    let redriven = redrive.await.unwrap().unwrap();
    assert_eq!(redriven.redriven.len(), 2, "{redriven:?}");
    application
        .await
        .unwrap()
        .expect("the application's transaction is not the deadlock's victim");
}

/// Sequential scans of `job.jobs` by this transaction so far.
async fn table_scans(tx: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relid = 'job.jobs'::regclass",
    )
    .fetch_one(tx)
    .await
    .unwrap()
}

/// A keyed job's admission reads its key's unfinished jobs through the key's two partial
/// indexes, whatever else the table holds (migration 0058): it asked for five states in one
/// test, which no index holds, so each keyed enqueue, set_ordering_key and redrive read the
/// whole table, the finished jobs kept for retention included, and a bulk enqueue of keyed
/// jobs grew with the square of its size. No plan is timed: the transaction's own count of
/// sequential scans shows whether the table was read.
#[tokio::test]
async fn a_keyed_enqueue_reads_its_key_through_indexes_not_the_whole_table() {
    let h = Harness::new().await;
    let pool = h.db.pool();
    sqlx::raw_sql(
        "INSERT INTO job.jobs (kind, payload, state, finalized_at)
         SELECT 'done', '{}', 'completed', now() FROM generate_series(1, 20000);
         ANALYZE job.jobs",
    )
    .execute(&pool)
    .await
    .unwrap();
    let mut tx = pool.begin().await.unwrap();
    let before = table_scans(&mut tx).await;
    // A head, a job behind it (pending), a running head given a free key, and a bulk enqueue
    // of keyed jobs, some behind others.
    let (head, behind): (i64, i64) = sqlx::query_as(
        "SELECT job.enqueue('k', '{}', ordering_key => 'a'),
                job.enqueue('k', '{}', ordering_key => 'a')",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    let bulk: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job.enqueue_many((
             SELECT jsonb_agg(jsonb_build_object('kind', 'k', 'payload', '{}'::jsonb,
                                                 'ordering_key', 'b' || (g % 10)))
             FROM generate_series(1, 100) g))",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    let after = table_scans(&mut tx).await;
    let states: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, state::text FROM job.jobs WHERE id IN ($1, $2) ORDER BY id")
            .bind(head)
            .bind(behind)
            .fetch_all(&mut *tx)
            .await
            .unwrap();
    let pending: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM job.jobs WHERE ordering_key LIKE 'b%' AND state = 'pending'",
    )
    .fetch_one(&mut *tx)
    .await
    .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(
        after - before,
        0,
        "keyed enqueues read the whole of job.jobs ({} sequential scans)",
        after - before
    );
    assert_eq!(
        states,
        vec![
            (head, "available".to_owned()),
            (behind, "pending".to_owned())
        ]
    );
    assert_eq!(
        (bulk, pending),
        (100, 90),
        "one head per key, the rest behind"
    );
}

/// A running job given a key another unfinished job holds is refused naming the job, its
/// state and the key (it cannot wait behind the key while it runs): the table's lease check
/// refused it with the whole row in the error's detail.
#[tokio::test]
async fn a_running_job_given_a_held_key_is_refused_naming_it() {
    let h = Harness::new().await;
    let pool = h.db.pool();
    let holder: i64 = sqlx::query_scalar("SELECT job.enqueue('k', '{}', ordering_key => 'held')")
        .fetch_one(&pool)
        .await
        .unwrap();
    let running: i64 = sqlx::query_scalar("SELECT job.enqueue('other', '{}')")
        .fetch_one(&pool)
        .await
        .unwrap();
    let claimed: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM job.claim('default', ARRAY['other'], ARRAY[1], ARRAY[60000::bigint], 1,
                                  'w', ARRAY[NULL::integer], '{}')",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(claimed, vec![running]);
    let error = sqlx::query("SELECT job.set_ordering_key($1, 'held')")
        .bind(running)
        .execute(&pool)
        .await
        .expect_err("refused");
    let db_error = error.as_database_error().expect("the database refused it");
    assert_eq!(db_error.code().as_deref(), Some("55000"), "{error}");
    assert_eq!(
        db_error.message(),
        format!(
            "job {running} is running, so it cannot wait behind ordering key `held`, which \
             another unfinished job holds: give a job its key before it starts"
        )
    );
    // Nothing changed: the running job has no key, the holder still holds it.
    let keys: Vec<(i64, Option<String>, String)> =
        sqlx::query_as("SELECT id, ordering_key, state::text FROM job.jobs ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        keys,
        vec![
            (holder, Some("held".to_owned()), "available".to_owned()),
            (running, None, "running".to_owned()),
        ]
    );
}
