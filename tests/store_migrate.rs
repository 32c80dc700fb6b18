//! The migration runner.

#[path = "common/silence.rs"]
mod silence;

use std::time::{Duration, Instant};

use job_postgres::{Error, MigrationGaveUp};
use job_testkit::TestDb;

async fn applied(pool: &sqlx::PgPool) -> Vec<(i32, String)> {
    sqlx::query_as("SELECT version, name FROM job.schema_migrations ORDER BY version")
        .fetch_all(pool)
        .await
        .unwrap()
}

/// Replaces the test database's schema with the migrations below `version` only, applied and
/// recorded as the migrator does: a database that has not been upgraded yet.
async fn migrate_below(pool: &sqlx::PgPool, version: i32) {
    sqlx::raw_sql("DROP SCHEMA job CASCADE")
        .execute(pool)
        .await
        .unwrap();
    sqlx::raw_sql(
        "CREATE SCHEMA job;
         CREATE TABLE job.schema_migrations (
             version integer PRIMARY KEY, name text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(pool)
    .await
    .unwrap();
    for m in job_postgres::MIGRATIONS
        .iter()
        .filter(|m| m.version < version)
    {
        let mut tx = pool.begin().await.unwrap();
        sqlx::raw_sql(m.sql).execute(&mut *tx).await.unwrap();
        sqlx::query("INSERT INTO job.schema_migrations (version, name) VALUES ($1, $2)")
            .bind(m.version)
            .bind(m.name)
            .execute(&mut *tx)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
}

/// The schema script as a client other than psql runs it: without its first line, psql's
/// `\set ON_ERROR_STOP on` (a simple-protocol query stops at its first error anyway).
fn script_without_psql() -> String {
    let script = job_postgres::schema_script();
    script
        .strip_prefix("\\set ON_ERROR_STOP on\n")
        .expect("the script starts by setting ON_ERROR_STOP")
        .to_owned()
}

#[tokio::test]
async fn migrate_is_re_runnable() {
    let db = TestDb::new().await;
    let store = db.store();
    let before = applied(&db.pool()).await;
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    assert_eq!(applied(&db.pool()).await, before);
    let expected: Vec<(i32, String)> = job_postgres::MIGRATIONS
        .iter()
        .map(|m| (m.version, m.name.to_owned()))
        .collect();
    assert_eq!(before, expected);
    db.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_migrators_apply_each_migration_once() {
    let db = TestDb::new().await;
    let pool = db.pool();
    sqlx::raw_sql("DROP SCHEMA job CASCADE")
        .execute(&pool)
        .await
        .unwrap();
    let migrators: Vec<_> = (0..4)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { job_postgres::migrate(&pool).await })
        })
        .collect();
    for migrator in migrators {
        migrator.await.unwrap().unwrap();
    }
    assert_eq!(applied(&pool).await.len(), job_postgres::MIGRATIONS.len());
    db.close().await;
}

#[tokio::test]
async fn migrations_live_in_their_own_schema_and_leave_sqlx_books_alone() {
    let db = TestDb::new().await;
    let outside: Vec<String> = sqlx::query_scalar(
        "SELECT table_schema || '.' || table_name FROM information_schema.tables
         WHERE table_schema NOT IN ('job', 'pg_catalog', 'information_schema')",
    )
    .fetch_all(&db.pool())
    .await
    .unwrap();
    assert_eq!(outside, Vec::<String>::new());
    db.close().await;
}

#[tokio::test]
async fn a_store_connects_by_the_test_databases_url() {
    let db = TestDb::new().await;
    let url = db.url();
    assert!(url.contains(db.name()), "{url} does not name {}", db.name());
    let store = job_postgres::PgStore::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    let database: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(database, db.name());
    store.pool().close().await;
    db.close().await;
}

/// Migration 0016 makes a pending job hold its unique key. Jobs the older index let in as
/// duplicates of a pending holder are kept: the one the old index held keeps the key, the
/// others' scope becomes 'spent', and the new index can be built.
#[tokio::test]
async fn migration_16_keeps_duplicates_admitted_before_it_and_spends_their_keys() {
    let db = TestDb::new().await;
    let pool = db.pool();
    migrate_below(&pool, 16).await;
    // What the old index admitted: two pending jobs and an available one sharing key u.
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO job.jobs (kind, queue, payload, state, unique_key, unique_scope)
         VALUES ('k', 'default', '{}', 'pending', 'u', 'finished'),
                ('k', 'default', '{}', 'pending', 'u', 'finished'),
                ('k', 'default', '{}', 'available', 'u', 'finished'),
                ('k', 'default', '{}', 'pending', 'v', 'started')
         RETURNING id",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    job_postgres::migrate(&pool).await.unwrap();
    let scopes: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, unique_scope FROM job.jobs ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        scopes,
        [
            (ids[0], "spent".to_owned()),
            (ids[1], "spent".to_owned()),
            (ids[2], "finished".to_owned()),
            (ids[3], "started".to_owned()),
        ]
    );
    // The pending holder of v now holds it.
    let refused = sqlx::query(
        "INSERT INTO job.jobs (kind, queue, payload, unique_key, unique_scope)
         VALUES ('k', 'default', '{}', 'v', 'started')",
    )
    .execute(&pool)
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("jobs_unique_idx"), "{refused}");
    db.close().await;
}

/// Migration 0017 replaces jobs_finalized_idx (every finished row) by one index per state the
/// pruner deletes. On a database with finished jobs of every state, each new index holds
/// exactly its state's rows, and pruning afterwards deletes what it did before and keeps the
/// dead letters.
#[tokio::test]
async fn migration_17_indexes_completed_and_cancelled_jobs_apart_from_dead_letters() {
    let db = TestDb::new().await;
    let pool = db.pool();
    migrate_below(&pool, 17).await;
    sqlx::raw_sql(
        "INSERT INTO job.jobs (kind, queue, payload, state, attempt, run_at, finalized_at)
         SELECT 'k', 'default', '{}', s::job.job_state, 1, now() - a * interval '1 day',
                now() - a * interval '1 day'
         FROM unnest(ARRAY['completed', 'completed', 'cancelled', 'cancelled', 'discarded'],
                     ARRAY[2, 0, 9, 0, 30]) AS x(s, a);
         INSERT INTO job.jobs (kind, queue, payload) VALUES ('k', 'default', '{}')",
    )
    .execute(&pool)
    .await
    .unwrap();
    job_postgres::migrate(&pool).await.unwrap();
    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT indexname::text, indexdef FROM pg_indexes
         WHERE schemaname = 'job' AND tablename = 'jobs'
           AND indexname IN ('jobs_finalized_idx', 'jobs_completed_idx', 'jobs_cancelled_idx')
         ORDER BY indexname",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        indexes,
        [
            (
                "jobs_cancelled_idx".to_owned(),
                "CREATE INDEX jobs_cancelled_idx ON job.jobs USING btree (finalized_at) \
                 WHERE (state = 'cancelled'::job.job_state)"
                    .to_owned()
            ),
            (
                "jobs_completed_idx".to_owned(),
                "CREATE INDEX jobs_completed_idx ON job.jobs USING btree (finalized_at) \
                 WHERE (state = 'completed'::job.job_state)"
                    .to_owned()
            ),
        ]
    );
    // Each state's rows, counted through its index: built over the rows already there
    // (migration 0029 adds the pruner's second index of cancelled rows, which the planner may
    // prefer for a count: either is one of them).
    for (state, index) in [
        ("completed", "jobs_completed_idx"),
        ("cancelled", "jobs_cancelled_"),
    ] {
        let mut tx = pool.begin().await.unwrap();
        sqlx::raw_sql("SET LOCAL enable_seqscan = off; SET LOCAL enable_bitmapscan = off")
            .execute(&mut *tx)
            .await
            .unwrap();
        let plan: Vec<String> = sqlx::query_scalar(&format!(
            "EXPLAIN SELECT count(*) FROM job.jobs WHERE state = '{state}'"
        ))
        .fetch_all(&mut *tx)
        .await
        .unwrap();
        assert!(
            plan.iter().any(|line| line.contains(index)),
            "{state} rows are not read through {index}: {plan:?}"
        );
        let n: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM job.jobs WHERE state = '{state}'"
        ))
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        assert_eq!(n, 2, "{index}");
        tx.rollback().await.unwrap();
    }
    let store = job_postgres::PgStore::new(pool.clone());
    let pruned = job_core::Store::prune(
        &store,
        &job_core::PruneRequest {
            completed_retention: std::time::Duration::from_secs(24 * 3600),
            cancelled_retention: std::time::Duration::from_secs(7 * 24 * 3600),
            batch: 100,
        },
    )
    .await
    .unwrap();
    assert_eq!(
        pruned, 2,
        "the completed job of 2 days ago, the cancelled one of 9"
    );
    let left: Vec<String> =
        sqlx::query_scalar("SELECT state::text FROM job.jobs ORDER BY state::text")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(left, ["available", "cancelled", "completed", "discarded"]);
    db.close().await;
}

#[tokio::test]
async fn migration_20_gives_the_new_job_enqueue_the_grants_of_the_old() {
    // Two arguments more make a new function: the old one's grants must follow it, or a role
    // that enqueued before the upgrade is refused after it.
    let db = TestDb::new().await;
    let pool = db.pool();
    migrate_below(&pool, 20).await;
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let (plain, quoted) = (format!("enq_{suffix}"), format!("Enq; {suffix}"));
    let old = "job.enqueue(text, jsonb, text, integer, integer, timestamptz, integer, text, \
               text, text, text[], text, timestamptz)";
    sqlx::raw_sql(&format!(
        "CREATE ROLE \"{plain}\"; CREATE ROLE \"{quoted}\";
         GRANT USAGE ON SCHEMA job TO \"{plain}\", \"{quoted}\";
         GRANT EXECUTE ON FUNCTION {old} TO \"{plain}\";
         GRANT EXECUTE ON FUNCTION {old} TO \"{quoted}\" WITH GRANT OPTION"
    ))
    .execute(&pool)
    .await
    .unwrap();
    job_postgres::migrate(&pool).await.unwrap();
    let new = "job.enqueue(text, jsonb, text, integer, integer, timestamptz, integer, text, \
               text, text, text[], text, timestamptz, text, text)";
    let (may, grantable, public): (bool, bool, bool) = sqlx::query_as(&format!(
        "SELECT has_function_privilege($1, '{new}', 'EXECUTE'),
                has_function_privilege($2, '{new}', 'EXECUTE WITH GRANT OPTION'),
                EXISTS (SELECT 1 FROM pg_proc p, aclexplode(p.proacl) a
                        WHERE p.oid = '{new}'::regprocedure AND a.grantee = 0)"
    ))
    .bind(&plain)
    .bind(&quoted)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((may, grantable, public), (true, true, false));
    let mut tx = pool.begin().await.unwrap();
    sqlx::raw_sql(&format!("SET LOCAL ROLE \"{plain}\""))
        .execute(&mut *tx)
        .await
        .unwrap();
    let id: i64 = sqlx::query_scalar("SELECT job.enqueue('k', '{}', ordering_key => 'a')")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(id > 0);
    let admin = sqlx::PgPool::connect_with(db.connect_options().database("postgres"))
        .await
        .unwrap();
    db.close().await;
    sqlx::raw_sql(&format!("DROP ROLE \"{plain}\"; DROP ROLE \"{quoted}\""))
        .execute(&admin)
        .await
        .unwrap();
}

/// Under SQL_ASCII, PostgreSQL stores any bytes as text: a row written by another client could
/// hold text that is not UTF-8, which no worker reads back. `migrate` refuses such a database,
/// naming it, and creates nothing in it.
#[tokio::test]
async fn migrate_refuses_a_database_that_stores_text_unchecked() {
    let db = TestDb::new().await;
    let name = format!("job_test_ascii_{}", uuid::Uuid::new_v4().simple());
    sqlx::query(&format!(
        "CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' \
         TEMPLATE template0"
    ))
    .execute(&db.pool())
    .await
    .unwrap();
    let pool = sqlx::PgPool::connect_with(db.connect_options().database(&name))
        .await
        .unwrap();
    let refused = job_postgres::migrate(&pool).await.unwrap_err();
    assert!(
        matches!(&refused, job_postgres::Error::Encoding { database } if *database == name),
        "{refused}"
    );
    assert!(refused.to_string().contains("SQL_ASCII"), "{refused}");
    // And the plain script, for psql, as well.
    let refused = sqlx::raw_sql(&script_without_psql())
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("SQL_ASCII"), "{refused}");
    let schema: Option<String> =
        sqlx::query_scalar("SELECT nspname::text FROM pg_namespace WHERE nspname = 'job'")
            .fetch_optional(&pool)
            .await
            .unwrap();
    assert_eq!(schema, None, "nothing created");
    pool.close().await;
    // FORCE: the closed pool's session may not have left the server yet.
    sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .execute(&db.pool())
        .await
        .unwrap();
    db.close().await;
}

/// Every function of the `job` schema, as defined, and every relation: what a migration
/// applied out of order would change.
async fn schema_fingerprint(pool: &sqlx::PgPool) -> String {
    sqlx::query_scalar(
        "SELECT (SELECT string_agg(pg_get_functiondef(p.oid), E'\\n' ORDER BY p.oid)
                 FROM pg_proc p WHERE p.pronamespace = 'job'::regnamespace AND p.prokind = 'f')
             || (SELECT string_agg(c.relname, ',' ORDER BY c.relname)
                 FROM pg_class c WHERE c.relnamespace = 'job'::regnamespace)",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// A database whose books have a gap (migration 15 not recorded, 16 to 19 recorded: what a
/// run of the schema script that went on past a failed 15 used to leave, or a row deleted) is
/// upgraded by neither migrator. Each refuses, naming the migration missing and the later one
/// recorded, and applies nothing: applied now, 15 would run on a schema it was not written
/// for, and 20 on one without 15.
#[tokio::test]
async fn a_gap_in_the_recorded_migrations_stops_both_migrators() {
    let db = TestDb::new().await;
    let pool = db.pool();
    migrate_below(&pool, 20).await;
    sqlx::query("DELETE FROM job.schema_migrations WHERE version = 15")
        .execute(&pool)
        .await
        .unwrap();
    let books = applied(&pool).await;
    let schema = schema_fingerprint(&pool).await;

    // The Rust migrator.
    let refused = job_postgres::migrate(&pool).await.unwrap_err();
    assert!(
        matches!(
            refused,
            job_postgres::Error::MigrationOutOfOrder {
                version: 15,
                name: "flow_control",
                later: 16
            }
        ),
        "{refused:?}"
    );
    let message = refused.to_string();
    assert!(
        message.contains("job migration 15 `flow_control` was not applied")
            && message.contains("migration 16, which comes after it"),
        "{message}"
    );
    assert_eq!(applied(&pool).await, books);
    assert_eq!(schema_fingerprint(&pool).await, schema);

    // The script, stopping at its first error (psql with ON_ERROR_STOP, or any client that
    // sends it as one query).
    let refused = sqlx::raw_sql(&script_without_psql())
        .execute(&pool)
        .await
        .unwrap_err();
    let message = refused.to_string();
    assert!(
        message.contains("job migration 15 `flow_control` was not applied")
            && message.contains("migration 16, which comes after it"),
        "{message}"
    );
    assert_eq!(applied(&pool).await, books);
    assert_eq!(schema_fingerprint(&pool).await, schema);

    // The script going on past each error, as psql does without ON_ERROR_STOP: migration by
    // migration, each failed one rolled back. 15 refuses for 16, every one after 19 for 15.
    let script = script_without_psql();
    let starts: Vec<usize> = job_postgres::MIGRATIONS
        .iter()
        .map(|m| {
            script
                .find(&format!("\n-- {:04} {}\nBEGIN;\n", m.version, m.name))
                .unwrap_or_else(|| panic!("migration {} in the script", m.version))
        })
        .chain([script.len()])
        .collect();
    let mut conn = pool.acquire().await.unwrap();
    sqlx::raw_sql(&script[..starts[0]])
        .execute(&mut *conn)
        .await
        .unwrap();
    for (m, bounds) in job_postgres::MIGRATIONS.iter().zip(starts.windows(2)) {
        let result = sqlx::raw_sql(&script[bounds[0]..bounds[1]])
            .execute(&mut *conn)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        if result.is_err() {
            sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.unwrap();
        }
        match m.version {
            ..=14 | 16..=19 => assert!(result.is_ok(), "{}: {result:?}", m.version),
            15 => {
                let message = result.unwrap_err();
                assert!(
                    message.contains("migration 16, which comes after it"),
                    "{message}"
                );
            }
            _ => {
                let message = result.unwrap_err();
                assert!(
                    message.contains(&format!(
                        "job migration {} `{}` was not applied: migration 15, which comes \
                         before it, is not recorded",
                        m.version, m.name
                    )),
                    "{message}"
                );
            }
        }
    }
    drop(conn);
    assert_eq!(applied(&pool).await, books);
    assert_eq!(schema_fingerprint(&pool).await, schema);
    db.close().await;
}

#[tokio::test]
async fn migration_37_waits_for_an_enqueue_with_dependencies_instead_of_deadlocking() {
    // The foreign key's ALTER locked job.dependencies, then waited for job.jobs; an enqueue
    // with dependencies (or the stager) writes a job, then its edges: each waited for the
    // other, and the server cancelled one (a worker's migrate at startup failed, or the
    // application's enqueue). The migration now locks job.jobs first, as every writer does.
    let db = TestDb::new().await;
    let pool = db.pool();
    migrate_below(&pool, 37).await;
    let mut app = pool.begin().await.unwrap();
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO job.jobs (kind, state) VALUES ('a', 'available'), ('b', 'pending') \
         RETURNING id",
    )
    .fetch_all(&mut *app)
    .await
    .unwrap();
    let store = db.store();
    let migrating = tokio::spawn(async move { store.migrate().await });
    // The migration waits for the application's transaction (it holds job.jobs).
    loop {
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_stat_activity
                            WHERE datname = current_database() AND wait_event_type = 'Lock')",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        if waiting {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    sqlx::query(
        "INSERT INTO job.dependencies (job_id, depends_on, mode) VALUES ($1, $2, 'completed')",
    )
    .bind(ids[1])
    .bind(ids[0])
    .execute(&mut *app)
    .await
    .expect("the application's edge is written, not cancelled as a deadlock's victim");
    app.commit().await.unwrap();
    migrating
        .await
        .unwrap()
        .expect("the migration completes once the application's transaction has");
    assert!(applied(&pool).await.iter().any(|(v, _)| *v == 37));
    db.close().await;
}

#[tokio::test]
async fn a_migration_recorded_under_another_name_is_refused_and_a_newer_one_is_not() {
    // Only versions were compared: a database migrated by a build whose migration 33 was
    // another one (renumbered, replaced before it landed) was "up to date", and never got
    // this build's 33. The names recorded are now compared, by `migrate` and by the script.
    let db = TestDb::new().await;
    let pool = db.pool();
    sqlx::query("UPDATE job.schema_migrations SET name = 'satisfied_edges' WHERE version = 33")
        .execute(&pool)
        .await
        .unwrap();
    let refused = db.store().migrate().await.unwrap_err();
    assert!(
        matches!(
            &refused,
            job_postgres::Error::MigrationRenamed { version: 33, recorded, name: "deadline_door" }
                if recorded == "satisfied_edges"
        ),
        "{refused:?}"
    );
    assert!(refused.to_string().contains("differ"), "{refused}");
    let refused = sqlx::raw_sql(&script_without_psql())
        .execute(&pool)
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("recorded in job.schema_migrations as `satisfied_edges`"),
        "{refused}"
    );
    sqlx::query("UPDATE job.schema_migrations SET name = 'deadline_door' WHERE version = 33")
        .execute(&pool)
        .await
        .unwrap();
    // A migration of a newer release: this build runs on its schema (a rolling deploy, a
    // rollback), saying so.
    sqlx::query(
        "INSERT INTO job.schema_migrations (version, name) VALUES (9999, 'from_the_future')",
    )
    .execute(&pool)
    .await
    .unwrap();
    db.store()
        .migrate()
        .await
        .expect("a newer migration is not refused");
    db.close().await;
}

/// Waits until `n` sessions of the test database wait for a lock.
async fn lock_waiters(pool: &sqlx::PgPool, n: i64) {
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if waiting >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn migration_37_and_a_redrive_wait_for_each_other_in_turn_instead_of_deadlocking() {
    // The redrive's statement locks job.dependencies before it writes job.jobs: queued behind
    // the migration on job.jobs while holding job.dependencies, which the migration wanted
    // next, one of them was cancelled (a worker's migrate at startup, most often). A redrive
    // now takes job.jobs first, as every other writer does.
    use job::Admin as _;
    let db = TestDb::new().await;
    let pool = db.pool();
    migrate_below(&pool, 37).await;
    // A writer of job.jobs that the migration queues behind.
    let mut writer = pool.begin().await.unwrap();
    sqlx::query("LOCK TABLE job.jobs IN ROW EXCLUSIVE MODE")
        .execute(&mut *writer)
        .await
        .unwrap();
    let store = db.store();
    let migrating = tokio::spawn(async move { store.migrate().await });
    lock_waiters(&pool, 1).await;
    let store = db.store();
    let redriving =
        tokio::spawn(async move { store.redrive(&job::JobFilter::dead_letters()).await });
    lock_waiters(&pool, 2).await;
    // Past the server's deadlock_timeout (1 s): the redrive's one deadlock check has run and
    // found no cycle, so a cycle formed now is found by the migration's check, which cancels
    // the migration (arranges the interleaving; nothing here is timed).
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    writer.commit().await.unwrap();
    migrating
        .await
        .unwrap()
        .expect("the migration is not a deadlock's victim");
    // Nor is the redrive. This build's redrive is written for the latest schema (migration
    // 0045's column): given job.jobs while later migrations are still to come, it may find
    // that column missing (42703, after its locks were taken, which is what is tested here).
    if let Err(e) = redriving.await.unwrap() {
        let text = format!("{e:?}");
        assert!(
            text.contains("42703") && text.contains("interruptions"),
            "nor is the redrive: {text}"
        );
    }
    db.close().await;
}

/// Migration 0040 releases the pending rows stranded before it: one with nothing to wait for
/// becomes available (scheduled when due later), a key without a head goes on the wake-up
/// list; a row behind its key's head, or waiting for a dependency, stays pending.
#[tokio::test]
async fn migration_40_releases_pending_rows_that_wait_for_nothing() {
    let db = TestDb::new().await;
    let pool = db.pool();
    migrate_below(&pool, 40).await;
    let insert = |state: &'static str, key: Option<&'static str>, later: bool| {
        let pool = pool.clone();
        async move {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO job.jobs (kind, payload, state, ordering_key, run_at)
                 VALUES ('k', '{}', $1::job.job_state, $2,
                         now() + CASE WHEN $3 THEN interval '1 hour' ELSE interval '0' END)
                 RETURNING id",
            )
            .bind(state)
            .bind(key)
            .bind(later)
            .fetch_one(&pool)
            .await
            .unwrap();
            id
        }
    };
    let bare = insert("pending", None, false).await;
    let later = insert("pending", None, true).await;
    let headless = insert("pending", Some("a"), false).await;
    let head = insert("available", Some("b"), false).await;
    let behind = insert("pending", Some("b"), false).await;
    let parent = insert("available", None, false).await;
    let dependent = insert("available", None, false).await;
    sqlx::query(
        "INSERT INTO job.dependencies (job_id, depends_on, mode) VALUES ($1, $2, 'completed')",
    )
    .bind(dependent)
    .bind(parent)
    .execute(&pool)
    .await
    .unwrap();
    sqlx::query("UPDATE job.jobs SET state = 'pending' WHERE id = $1")
        .bind(dependent)
        .execute(&pool)
        .await
        .unwrap();
    // What the admit trigger put on the list for `behind`, a stager pass since.
    sqlx::query("DELETE FROM job.ordering_wake")
        .execute(&pool)
        .await
        .unwrap();
    job_postgres::migrate(&pool).await.unwrap();
    let states: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, state::text FROM job.jobs ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
    let state = |id: i64| {
        states
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, s)| s.as_str())
            .unwrap()
            .to_owned()
    };
    assert_eq!(state(bare), "available");
    assert_eq!(state(later), "scheduled");
    assert_eq!(state(headless), "pending", "until the stager's pass");
    assert_eq!(state(head), "available");
    assert_eq!(state(behind), "pending");
    assert_eq!(state(dependent), "pending");
    let woken: Vec<String> = sqlx::query_scalar("SELECT ordering_key FROM job.ordering_wake")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(woken, ["a"]);
    db.close().await;
}

/// Migration 46 starts again the windows of breaker rows whose counts its new constraint
/// refuses, repairing with them a time out of range that a raw write stored before migration
/// 22 (a repaired row is checked against the NOT VALID constraints too: without that repair
/// the migration failed, and no worker of the build could start).
#[tokio::test]
async fn migration_46_repairs_breaker_rows_it_would_refuse() {
    let db = TestDb::new().await;
    let pool = db.pool();
    migrate_below(&pool, 22).await;
    sqlx::query(
        "INSERT INTO job.breakers (kind, failure_percent, min_attempts, window_ms, cool_down_ms,
                                   attempts, failures, tripped_at)
         VALUES ('negative', 50, 20, 60000, 60000, -5, 0, 'infinity'),
                ('more_failed', 50, 20, 60000, 60000, 3, 7, now()),
                ('sound', 50, 20, 60000, 60000, 9, 4, now())",
    )
    .execute(&pool)
    .await
    .unwrap();
    job_postgres::migrate(&pool)
        .await
        .expect("migrations 22 to 46 apply over the rows");
    let rows: Vec<(String, i64, i64, bool)> = sqlx::query_as(
        "SELECT kind, attempts, failures, tripped_at IS NULL FROM job.breakers ORDER BY kind",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            ("more_failed".to_owned(), 0, 0, false),
            ("negative".to_owned(), 0, 0, true),
            ("sound".to_owned(), 9, 4, false),
        ]
    );
}

/// How long a migration may take before a test calls it stuck: a bound so that a hang fails
/// the test instead of stalling it, not a measure of speed.
const STUCK: Duration = Duration::from_secs(60);

/// Holds the lock every migrator takes first (migrate_lock.sql) in a transaction of its own.
async fn hold_migrators_lock(db: &TestDb) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut holder = db.pool().begin().await.unwrap();
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0))")
        .execute(&mut *holder)
        .await
        .unwrap();
    holder
}

/// Waits until a migration's session (tagged `job migrate <pid>.<time>`) has waited for the
/// migrators' lock for longer than `for_at_least`, by the server's clock.
async fn until_migration_waits_for_the_lock(db: &TestDb, for_at_least: Duration) {
    let give_up = Instant::now() + STUCK;
    loop {
        let waiting: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT FROM pg_stat_activity
                            WHERE datname = current_database()
                              AND application_name ~ '^job migrate [0-9]'
                              AND state = 'active' AND wait_event_type = 'Lock'
                              AND clock_timestamp() - state_change > $1)",
        )
        .bind(for_at_least)
        .fetch_one(&db.pool())
        .await
        .unwrap();
        if waiting {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "the migration never waited for the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A migration's statement the server works on (here, a wait for another migrator's lock) is
/// waited for however much longer than the idle limit it takes: the watch gives up only on a
/// session that waits for the process, not on one the server is busy with.
#[tokio::test]
async fn migrate_waits_for_a_statement_longer_than_its_idle_limit() {
    let db = TestDb::new().await;
    let holder = hold_migrators_lock(&db).await;
    let pool = db.pool();
    let migrating = tokio::spawn(async move {
        job_postgres::migrate_with_idle_limit(&pool, Duration::from_secs(1)).await
    });
    // Three times the idle limit, and several of the watch's looks.
    until_migration_waits_for_the_lock(&db, Duration::from_secs(3)).await;
    assert!(!migrating.is_finished(), "the migration was given up");
    holder.rollback().await.unwrap();
    tokio::time::timeout(STUCK, migrating)
        .await
        .expect("the migration ends once the lock is free")
        .unwrap()
        .expect("the migration goes through");
    db.close().await;
}

/// A database that stops answering mid-migration (every connection silent: a partitioned
/// network, a host gone) no longer holds `migrate` for ever: it gives up once the watch's
/// connection has had no answer for 10 s, saying so, and the session it left inside a
/// transaction (holding the migrators' lock) is ended by the server a second past the idle
/// limit, so the next migrator goes through.
#[tokio::test]
async fn migrate_gives_up_when_the_database_stops_answering() {
    let db = TestDb::new().await;
    let blackhole = silence::Blackhole::start(&db.connect_options()).await;
    let through = job_postgres::pool_options()
        .max_connections(2)
        .connect_with(blackhole.options())
        .await
        .unwrap();
    let holder = hold_migrators_lock(&db).await;
    let migrating = tokio::spawn(async move {
        job_postgres::migrate_with_idle_limit(&through, Duration::from_secs(1)).await
    });
    until_migration_waits_for_the_lock(&db, Duration::ZERO).await;
    blackhole.silence();
    // The server goes on: the migration takes the lock, and its answer is lost.
    holder.rollback().await.unwrap();
    let gave_up = tokio::time::timeout(STUCK, migrating)
        .await
        .expect("migrate gave up instead of waiting for ever")
        .unwrap();
    match gave_up {
        Err(Error::MigrateGaveUp(MigrationGaveUp::Silent { waited })) => {
            assert_eq!(waited, Duration::from_secs(10));
        }
        other => panic!("given up as silent, not {other:?}"),
    }
    let error = job_postgres::Error::MigrateGaveUp(MigrationGaveUp::Silent {
        waited: Duration::from_secs(10),
    })
    .to_string();
    assert!(
        error.starts_with(
            "the job migration gave up: the database did not answer the second connection"
        ) && error.contains("migrate again"),
        "{error}"
    );
    // No lock of it stays held: the next migrator goes through.
    tokio::time::timeout(STUCK, job_postgres::migrate(&db.pool()))
        .await
        .expect("the next migrator is not held by the one given up")
        .expect("the next migration goes through");
    db.close().await;
}
