//! Pruning finished jobs after their retention, in bounded batches; dead letters stay.

use std::time::Duration;

use job::JobState;
use job_core::{Pruner, PrunerConfig};

use crate::common::*;
use crate::support::*;

#[tokio::test]
async fn completed_and_cancelled_jobs_are_pruned_after_their_retention_and_discarded_kept() {
    let h = Harness::new().await;
    let mut ids = Vec::new();
    for n in 0..7 {
        ids.push(enqueue(&h.store, Noop { n }).await);
    }
    let state = |i: usize| match i {
        0..=2 => "completed",
        3..=4 => "cancelled",
        _ => "discarded",
    };
    for (i, id) in ids.iter().enumerate() {
        sqlx::query(&format!(
            "UPDATE job.jobs SET state = '{}', finalized_at = now() - interval '2 hours'
             WHERE id = $1",
            state(i)
        ))
        .bind(id)
        .execute(h.store.pool())
        .await
        .unwrap();
    }
    // A fresh completion, inside its retention.
    let fresh = enqueue(&h.store, Noop { n: 99 }).await;
    exec(
        &h.store,
        "UPDATE job.jobs SET state = 'completed', finalized_at = now() WHERE id = $1",
        fresh,
    )
    .await;

    let pruner = Pruner::new(
        h.store.clone(),
        PrunerConfig {
            completed_retention: Duration::from_secs(3600),
            cancelled_retention: Duration::from_secs(3 * 3600),
            batch: 2,
            ..PrunerConfig::default()
        },
    );
    let pass = pruner.run_once().await.unwrap();
    assert_eq!(
        pass.deleted, 3,
        "the three old completions, in batches of two"
    );
    for (i, id) in ids.iter().enumerate() {
        let gone = h.store_row_gone(*id).await;
        assert_eq!(gone, state(i) == "completed", "job {i} ({})", state(i));
    }
    assert!(!h.store_row_gone(fresh).await);

    let strict = Pruner::new(
        h.store.clone(),
        PrunerConfig {
            completed_retention: Duration::ZERO,
            cancelled_retention: Duration::ZERO,
            ..PrunerConfig::default()
        },
    );
    assert_eq!(strict.run_once().await.unwrap().deleted, 3);
    assert_eq!(
        count_in(&h.store, JobState::Discarded).await,
        2,
        "dead letters stay"
    );
    assert_eq!(count(&h.store, "SELECT count(*) FROM job.jobs").await, 2);
}

trait Gone {
    async fn store_row_gone(&self, id: job::JobId) -> bool;
}

impl Gone for Harness {
    async fn store_row_gone(&self, id: job::JobId) -> bool {
        job::Store::get(&self.store, id).await.unwrap().is_none()
    }
}

/// When this database's `job.jobs` was last vacuumed by hand (not by autovacuum).
async fn last_vacuum(h: &Harness) -> Option<chrono::DateTime<chrono::Utc>> {
    sqlx::query_scalar(
        "SELECT last_vacuum FROM pg_stat_user_tables WHERE relid = 'job.jobs'::regclass",
    )
    .fetch_one(h.store.pool())
    .await
    .unwrap()
}

async fn set_table_autovacuum(h: &Harness, enabled: bool) {
    sqlx::query(&format!(
        "ALTER TABLE job.jobs SET (autovacuum_enabled = {enabled})"
    ))
    .execute(h.store.pool())
    .await
    .unwrap();
}

/// Leaves `n` dead rows in `job.jobs` and waits until the statistics show them.
async fn dead_rows(h: &Harness, n: u32) {
    let ids = job::Enqueue::<Noop>::many(h.store.pool(), (0..n).map(|n| Noop { n }))
        .await
        .unwrap();
    assert_eq!(ids.len(), n as usize);
    sqlx::query("DELETE FROM job.jobs")
        .execute(h.store.pool())
        .await
        .unwrap();
    eventually("the statistics to count the dead rows", || async {
        let dead: i64 = sqlx::query_scalar(
            "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'job.jobs'::regclass",
        )
        .fetch_one(h.store.pool())
        .await
        .unwrap();
        (dead >= i64::from(n)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_store_vacuums_the_job_tables_when_autovacuum_will_not() {
    let h = Harness::new().await;
    set_table_autovacuum(&h, false).await;
    assert!(
        !job::Store::vacuum(&h.store).await.unwrap(),
        "nothing changed yet: no vacuum"
    );
    dead_rows(&h, 1500).await;
    assert_eq!(last_vacuum(&h).await, None);
    assert!(
        job::Store::vacuum(&h.store).await.unwrap(),
        "autovacuum is off for the table"
    );
    assert!(last_vacuum(&h).await.is_some(), "VACUUM ran on job.jobs");
}

/// Each job table is judged on its own: the wake-up list of ordering keys, which takes a row
/// and loses it for every keyed job that waits, is vacuumed when it churned, though
/// `job.jobs` did not (it never was: an empty list cost every stager pass a read of every dead
/// row it had held).
#[tokio::test]
async fn the_store_vacuums_each_job_table_that_churned() {
    let h = Harness::new().await;
    if sqlx::query_scalar::<_, bool>("SELECT current_setting('autovacuum')::boolean")
        .fetch_one(h.store.pool())
        .await
        .unwrap()
    {
        sqlx::query("ALTER TABLE job.ordering_wake SET (autovacuum_enabled = false)")
            .execute(h.store.pool())
            .await
            .unwrap();
    }
    sqlx::query(
        "INSERT INTO job.ordering_wake (ordering_key) SELECT 'k' || n FROM generate_series(1, 1500) n",
    )
    .execute(h.store.pool())
    .await
    .unwrap();
    sqlx::query("DELETE FROM job.ordering_wake")
        .execute(h.store.pool())
        .await
        .unwrap();
    let stat = |column: &'static str, table: &'static str| {
        let pool = h.store.pool().clone();
        async move {
            sqlx::query_scalar::<_, Option<i64>>(&format!(
                "SELECT {column} FROM pg_stat_user_tables WHERE relid = '{table}'::regclass"
            ))
            .fetch_one(&pool)
            .await
            .unwrap()
        }
    };
    eventually("the statistics to count the dead rows", || async {
        (stat("n_dead_tup", "job.ordering_wake").await >= Some(1500)).then_some(())
    })
    .await;
    assert!(job::Store::vacuum(&h.store).await.unwrap());
    let vacuums = |table: &'static str| stat("vacuum_count", table);
    assert_eq!(vacuums("job.ordering_wake").await, Some(1));
    assert_eq!(vacuums("job.jobs").await, Some(0), "job.jobs did not churn");
}

#[tokio::test]
async fn the_store_leaves_the_job_tables_to_autovacuum_when_it_runs() {
    let h = Harness::new().await;
    set_table_autovacuum(&h, true).await;
    dead_rows(&h, 1500).await;
    let server_autovacuum: bool =
        sqlx::query_scalar("SELECT current_setting('autovacuum')::boolean")
            .fetch_one(h.store.pool())
            .await
            .unwrap();
    // 1,500 rows came and went: the table did not outgrow its statistics, so where the
    // server's autovacuum runs, nothing (not even an ANALYZE) is run.
    let ran = job::Store::vacuum(&h.store).await.unwrap();
    assert_eq!(
        ran, !server_autovacuum,
        "vacuums only when the server's autovacuum is off"
    );
    assert_eq!(last_vacuum(&h).await.is_some(), ran);
}

#[tokio::test]
async fn the_workers_pruner_asks_for_vacuum_on_its_interval() {
    let h = Harness::new().await;
    set_table_autovacuum(&h, false).await;
    dead_rows(&h, 1500).await;
    let worker = h
        .worker()
        .pruner(PrunerConfig {
            interval: Duration::from_millis(20),
            vacuum_interval: Some(Duration::from_millis(20)),
            ..PrunerConfig::default()
        })
        .build()
        .unwrap()
        .start();
    eventually("the pruner to vacuum job.jobs", || async {
        last_vacuum(&h).await
    })
    .await;
    worker.shutdown().await;
}

/// Where autovacuum runs, the store still ANALYZEs a job table grown past twice its size at
/// its last VACUUM or ANALYZE and 1 MiB (128 pages), and never VACUUMs it: sessions keep their
/// plans until the statistics change, so claims planned on an empty table read the whole table
/// by a sequential scan until autovacuum's first ANALYZE, a minute or more later. On a private
/// cluster of its own, the only kind of server whose autovacuum a test may count on:
/// autovacuum on, but kept off job.jobs by thresholds no test reaches, so that nothing but the
/// store analyzes it here. A role that may not analyze leaves it to autovacuum, without an
/// error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_analyzes_a_job_table_grown_past_its_statistics_where_autovacuum_runs() {
    let cluster = tokio::task::spawn_blocking(job_testkit::PrivateCluster::start)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("a private cluster: {e}"));
    let store = job_postgres::PgStore::connect(&cluster.url("postgres"))
        .await
        .unwrap();
    store.migrate().await.unwrap();
    let pool = store.pool().clone();
    let autovacuum: bool = sqlx::query_scalar("SELECT current_setting('autovacuum')::boolean")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(autovacuum, "a fresh cluster runs autovacuum");
    sqlx::query(
        "ALTER TABLE job.jobs SET (autovacuum_vacuum_threshold = 2000000000, \
         autovacuum_vacuum_insert_threshold = 2000000000, \
         autovacuum_analyze_threshold = 2000000000)",
    )
    .execute(&pool)
    .await
    .unwrap();
    // job.jobs's pages now and at its last VACUUM or ANALYZE.
    let pages = || async {
        sqlx::query_as::<_, (i64, i64)>(
            "SELECT pg_relation_size(oid) / current_setting('block_size')::bigint, \
                    relpages::bigint \
             FROM pg_class WHERE oid = 'job.jobs'::regclass",
        )
        .fetch_one(&pool)
        .await
        .unwrap()
    };
    // Grows job.jobs, 2,000 jobs at a time, until it is over the bound, asking the store at
    // each size under it: nothing is run.
    let grow = || async {
        let mut n = 0;
        loop {
            let (now, planned) = pages().await;
            if now > 2 * planned + 128 {
                return now;
            }
            assert!(
                !job::Store::vacuum(&store).await.unwrap(),
                "{now} pages against {planned} at the last ANALYZE: nothing to analyze"
            );
            job::Enqueue::<Noop>::many(&pool, (n..n + 2000).map(|n| Noop { n }))
                .await
                .unwrap();
            n += 2000;
        }
    };
    let grown = grow().await;

    // A role that may not analyze job.jobs: nothing run, and no error.
    sqlx::query("CREATE ROLE job_reader LOGIN")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("GRANT USAGE ON SCHEMA job TO job_reader")
        .execute(&pool)
        .await
        .unwrap();
    let reader = job_postgres::PgStore::connect(
        &cluster.url("postgres").replace("postgres@", "job_reader@"),
    )
    .await
    .unwrap();
    assert!(
        !job::Store::vacuum(&reader).await.unwrap(),
        "a role that may not analyze ran something"
    );
    reader.pool().close().await;

    assert!(
        job::Store::vacuum(&store).await.unwrap(),
        "{grown} pages, where the planner knew an empty table"
    );
    // PostgreSQL 14 reports the counts a moment later; 15 at once.
    let counts = eventually("the statistics to count the ANALYZE", || async {
        let counts: (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT analyze_count, vacuum_count, autoanalyze_count, autovacuum_count \
             FROM pg_stat_user_tables WHERE relid = 'job.jobs'::regclass",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        (counts.0 >= 1).then_some(counts)
    })
    .await;
    assert_eq!(
        counts,
        (1, 0, 0, 0),
        "one ANALYZE by the store, no VACUUM, nothing by autovacuum"
    );
    assert_eq!(pages().await.1, grown, "the planner knows the table's size");
    // The next time is at twice that size.
    grow().await;
    assert!(job::Store::vacuum(&store).await.unwrap());
    store.pool().close().await;
    pool.close().await;
}
