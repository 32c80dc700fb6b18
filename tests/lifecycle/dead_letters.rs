//! Dead letters: list, inspect, redrive through the unique guard, purge.

use job::{Enqueue, JobState};
use job_core::{Admin, JobFilter, Store};

use crate::common::*;
use crate::support::*;

/// Discards `id` the way an exhausted job ends, with one error in its history.
async fn kill(h: &Harness, id: job::JobId) {
    exec(
        &h.store,
        "UPDATE job.jobs SET state = 'discarded', attempt = max_attempts, finalized_at = now(),
                errors = errors || '[{\"attempt\": 1, \"at\": \"2024-01-01T00:00:00Z\",
                                      \"class\": \"terminal\", \"message\": \"boom\"}]'
         WHERE id = $1",
        id,
    )
    .await;
}

#[tokio::test]
async fn a_discarded_job_is_listed_with_its_history_and_redriven_with_fresh_attempts() {
    let h = Harness::new().await;
    let id = enqueue(
        &h.store,
        Flaky {
            failures: 1,
            how: How::Terminal,
        },
    )
    .await;
    let other = enqueue(&h.store, Noop { n: 1 }).await;
    let worker = h.worker().build().unwrap().start();
    h.reaches(id, JobState::Discarded).await;
    h.reaches(other, JobState::Completed).await;

    let dead = h.store.list(&JobFilter::dead_letters()).await.unwrap();
    assert_eq!(dead.iter().map(|r| r.id).collect::<Vec<_>>(), [id]);
    assert_eq!(dead[0].errors[0].class, "terminal");
    let by_kind = JobFilter {
        kind: Some("test.noop".into()),
        ..JobFilter::dead_letters()
    };
    assert!(h.store.list(&by_kind).await.unwrap().is_empty());
    let in_range = JobFilter {
        finalized_from: Some(chrono::Utc::now() - chrono::Duration::minutes(5)),
        finalized_to: Some(chrono::Utc::now() + chrono::Duration::minutes(5)),
        queue: Some("default".into()),
        ..JobFilter::dead_letters()
    };
    assert_eq!(h.store.list(&in_range).await.unwrap().len(), 1);
    let too_old = JobFilter {
        finalized_to: Some(chrono::Utc::now() - chrono::Duration::minutes(5)),
        ..JobFilter::dead_letters()
    };
    assert!(h.store.list(&too_old).await.unwrap().is_empty());

    let redriven = h.store.redrive(&JobFilter::ids([id])).await.unwrap();
    assert_eq!(redriven.redriven, [id]);
    assert!(redriven.skipped.is_empty());
    // Flaky fails on attempt 1 only: the fresh attempt 1 is terminal again, proving the count
    // restarted; the history keeps both failures.
    let row = eventually("the redriven job to fail again", || async {
        let r = h.row(id).await;
        (r.state == JobState::Discarded && r.errors.len() == 2).then_some(r)
    })
    .await;
    assert_eq!(row.attempt, 1);
    assert_eq!(h.ledger.snapshot()[&id], vec![1, 1]);
    worker.shutdown().await;
}

#[tokio::test]
async fn redrive_many_by_kind_skips_those_whose_unique_key_is_taken_and_purge_deletes() {
    let h = Harness::new().await;
    let mut noops = Vec::new();
    for n in 0..3 {
        let id = enqueue(&h.store, Noop { n }).await;
        kill(&h, id).await;
        noops.push(id);
    }
    let invoice = |note: &str| SendInvoice {
        invoice_id: 9,
        note: note.into(),
    };
    let dead_invoice = Enqueue::new(invoice("first"))
        .enqueue(h.store.pool())
        .await
        .unwrap();
    kill(&h, dead_invoice).await;
    let live_invoice = Enqueue::new(invoice("second"))
        .enqueue(h.store.pool())
        .await
        .unwrap();

    let skipped = h
        .store
        .redrive(&JobFilter {
            kind: Some("test.send_invoice".into()),
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert!(skipped.redriven.is_empty());
    assert_eq!(skipped.skipped, [(dead_invoice, live_invoice)]);
    assert_eq!(h.row(dead_invoice).await.state, JobState::Discarded);

    let redriven = h
        .store
        .redrive(&JobFilter {
            kind: Some("test.noop".into()),
            limit: Some(2),
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(redriven.redriven, noops[..2]);
    for id in &noops[..2] {
        let row = h.row(*id).await;
        assert_eq!(row.state, JobState::Available);
        assert_eq!(row.attempt, 0);
        assert_eq!(row.errors.len(), 1, "errors are kept");
        assert_eq!(row.finalized_at, None);
    }

    let purged = h
        .store
        .purge(&JobFilter {
            kind: Some("test.noop".into()),
            ..JobFilter::default()
        })
        .await
        .unwrap();
    assert_eq!(purged, 1, "only the discarded one is purged");
    assert!(h.store.get(noops[2]).await.unwrap().is_none());
    assert!(h.store.get(noops[0]).await.unwrap().is_some());
    assert!(h.store.get(dead_invoice).await.unwrap().is_some());
}

/// `PgStore::list_summaries` lists what `Admin::list` lists (same filter, order and limit,
/// the last error cut short) without the payloads: what the CLI's table and purge prompt read.
#[tokio::test]
async fn list_summaries_match_the_listing_without_the_payloads() {
    let h = Harness::new().await;
    let mut ids = Vec::new();
    for failures in 0..4 {
        ids.push(
            enqueue(
                &h.store,
                Flaky {
                    failures,
                    how: How::Terminal,
                },
            )
            .await,
        );
    }
    for id in &ids[1..] {
        kill(&h, *id).await;
    }
    let filter = JobFilter {
        states: vec![JobState::Discarded],
        limit: Some(2),
        ..JobFilter::default()
    };
    let rows = h.store.list(&filter).await.unwrap();
    let summaries = h.store.list_summaries(&filter).await.unwrap();
    let summary_ids: Vec<i64> = summaries.iter().map(|s| s.id).collect();
    let row_ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    assert_eq!(summary_ids, row_ids);
    assert_eq!(summary_ids, ids[1..3]);
    assert_eq!(summaries.len(), 2);
    for (s, r) in summaries.iter().zip(&rows) {
        assert_eq!((s.state, &s.kind, s.attempt), (r.state, &r.kind, r.attempt));
        let last = s.last_error.as_ref().expect("its last error");
        assert_eq!(
            (last.class.as_str(), last.message.as_str()),
            ("terminal", "boom")
        );
    }
    let tenant = h.store.for_tenant("nobody");
    assert!(tenant.list_summaries(&filter).await.unwrap().is_empty());
}

/// Rows of `job.jobs` the server has read for the session of `pool` (one connection), by index
/// or by scan, counted once its statistics are flushed: `pg_stat_force_next_flush` makes the
/// session flush them as that statement ends, before the next one runs.
async fn rows_read(pool: &sqlx::PgPool) -> i64 {
    let version: i32 = sqlx::query_scalar("SELECT current_setting('server_version_num')::integer")
        .fetch_one(pool)
        .await
        .unwrap();
    assert!(
        version >= 150_000,
        "this test reads a session's statistics after pg_stat_force_next_flush(), which \
         PostgreSQL 15 added (server_version_num {version}): run it against 15 or later"
    );
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(pool)
        .await
        .unwrap();
    sqlx::query_scalar(
        "SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0)
         FROM pg_stat_user_tables WHERE relid = 'job.jobs'::regclass",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A listing of one state reads that state's rows through its partial index, not every row
/// before them: the states were bound as text and cast in the statement, a cast the planner
/// does not fold, so no partial index matched and a listing of the available jobs (or of the
/// dead letters) behind 20,000 finished ones read all 20,000 (`job list --state available`
/// over 378,000 rows: 276-449 ms, against 1-8 ms now). No index has the running state for its
/// predicate: a listing of the running jobs reads them through jobs_rescue_idx, whose
/// `locked_until IS NOT NULL` the filter adds (it walked the primary key through the 20,000).
#[tokio::test]
async fn a_listing_by_state_reads_that_states_rows_not_the_table() {
    let h = Harness::new().await;
    sqlx::raw_sql(
        "INSERT INTO job.jobs (kind, payload, state, finalized_at)
         SELECT 'done', '{}', 'completed', now() FROM generate_series(1, 20000);
         INSERT INTO job.jobs (kind, payload) SELECT 'waiting', '{}' FROM generate_series(1, 50);
         INSERT INTO job.jobs (kind, payload, state, attempt, finalized_at)
         SELECT 'dead', '{}', 'discarded', 1, now() FROM generate_series(1, 50);
         INSERT INTO job.jobs (kind, payload, state, attempt, lock_token, locked_until, locked_by)
         SELECT 'busy', '{}', 'running', 1, gen_random_uuid(), now() + interval '1 hour', 'w'
         FROM generate_series(1, 50);
         ANALYZE job.jobs",
    )
    .execute(&h.db.pool())
    .await
    .unwrap();
    // One connection: the listings run on the session whose statistics are read.
    let pool = job::pool_options()
        .max_connections(1)
        .connect_with(h.db.connect_options())
        .await
        .unwrap();
    let store = job::PgStore::new(pool.clone());
    for state in [JobState::Available, JobState::Discarded, JobState::Running] {
        let before = rows_read(&pool).await;
        let listed = store
            .list(&JobFilter {
                states: vec![state],
                ..JobFilter::default()
            })
            .await
            .unwrap();
        let read = rows_read(&pool).await - before;
        assert_eq!(listed.len(), 50, "{state:?}");
        assert!(
            read < 1000,
            "a listing of 50 {state:?} jobs read {read} rows of job.jobs"
        );
    }
    pool.close().await;
}

/// A redrive or a purge reads the dead letters it takes, lowest id first, through
/// jobs_dead_letters_idx (migration 0061). With the dead letters only in jobs_discarded_idx, by
/// time, a batch either read every dead letter and sorted them (here: 2,200 rows for a batch of
/// 100; 300 now, the redrive's own reads by id included) or walked the primary key through the
/// finished jobs before them (the same rows as a plain `SELECT ... LIMIT`: 20,100), and each
/// batch of a redrive did so again.
#[tokio::test]
async fn a_redrive_and_a_purge_read_their_dead_letters_not_the_rows_before_them() {
    let h = Harness::new().await;
    sqlx::raw_sql(
        "INSERT INTO job.jobs (kind, payload, state, finalized_at)
         SELECT 'done', '{}', 'completed', now() FROM generate_series(1, 20000);
         INSERT INTO job.jobs (kind, payload, state, attempt, finalized_at)
         SELECT 'dead', '{}', 'discarded', 1, now() FROM generate_series(1, 2000);
         ANALYZE job.jobs",
    )
    .execute(&h.db.pool())
    .await
    .unwrap();
    let pool = job::pool_options()
        .max_connections(1)
        .connect_with(h.db.connect_options())
        .await
        .unwrap();
    let store = job::PgStore::new(pool.clone());
    // Batches of 100 of the 2,000 dead letters, which come after the 20,000 in id order.
    let batch = JobFilter {
        limit: Some(100),
        ..JobFilter::default()
    };

    let before = rows_read(&pool).await;
    let redriven = store.redrive(&batch).await.unwrap();
    let read = rows_read(&pool).await - before;
    assert_eq!(redriven.redriven.len(), 100);
    assert!(
        read < 1000,
        "a redrive of 100 dead letters read {read} rows of job.jobs"
    );

    let before = rows_read(&pool).await;
    let purged = store.purge(&batch).await.unwrap();
    let read = rows_read(&pool).await - before;
    assert_eq!(purged, 100);
    assert!(
        read < 1000,
        "a purge of 100 dead letters read {read} rows of job.jobs"
    );
    pool.close().await;
}
