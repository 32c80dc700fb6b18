//! Least-privilege roles, as the README sets them up: an owner that migrates, a worker with
//! table privileges only, and an enqueue-only role that can call the enqueue functions and
//! nothing else. Each test makes roles with names of its own and drops them at the end.

use std::time::Duration;

use job::{Job, JobContext, JobError, JobState, PgStore, Store, Worker};
use job_testkit::TestDb;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

use crate::support::{db_error, ident, readme_block, Roles};

#[derive(Debug, Serialize, Deserialize)]
struct Ping {
    n: i64,
}

impl Job for Ping {
    const KIND: &'static str = "doors.ping";
    // A rate limit and a breaker, so the worker's claims and outcomes use their statements.
    const OPTIONS: job::JobOptions = job::JobOptions {
        rate: Some(job::RateLimit::new(1000, Duration::from_secs(1))),
        breaker: Some(job::Breaker::new(50)),
        ..job::JobOptions::DEFAULT
    };
    // A step too: its save reads the job's totals (job.step_totals, migration 0062).
    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let n = self.n;
        ctx.step("pinged", || async move { Ok(n) }).await?;
        Ok(())
    }
}

/// Fails once, then completes: its retry waits `retryable` for the stager.
#[derive(Debug, Serialize, Deserialize)]
struct FailsOnce {}

impl Job for FailsOnce {
    const KIND: &'static str = "doors.fails_once";
    const OPTIONS: job::JobOptions = job::JobOptions {
        backoff: crate::common::FAST_BACKOFF,
        ..job::JobOptions::DEFAULT
    };
    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        if ctx.attempt() == 1 {
            return Err(JobError::retryable("the first attempt fails"));
        }
        Ok(())
    }
}

/// The README's statements with the roles' names and the database put in.
fn readme_sql(block: &str, names: &[(&str, &str)], database: &str) -> String {
    let mut sql = readme_block(block);
    for (from, to) in names {
        sql = sql.replace(from, to);
    }
    sql.replace("DATABASE app", &format!("DATABASE {database}"))
}

async fn pool_as(db: &TestDb, role: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(4)
        .connect_with(db.connect_options().username(role))
        .await
        .unwrap()
}

/// Asserts that `statement` run as this pool's role is refused for lack of privilege.
async fn denied(pool: &PgPool, statement: &str) {
    let error = sqlx::raw_sql(statement)
        .execute(pool)
        .await
        .map(|_| ())
        .expect_err(statement);
    let (code, message) = db_error(error);
    assert!(
        code == "42501" || message.contains("must be owner"),
        "{statement}: expected a privilege error, got {code} {message}"
    );
}

#[tokio::test]
async fn an_owner_a_worker_and_an_enqueue_only_role_each_do_what_they_need_and_no_more() {
    let mut roles: Roles; // dropped after the database, which holds the roles' privileges
    let db = TestDb::new().await;
    roles = Roles::new(&db);
    let (owner, worker, producer) = (
        roles.name("job_owner"),
        roles.name("job_worker"),
        roles.name("job_enqueue"),
    );
    let names = [
        ("job_owner", owner.as_str()),
        ("job_worker", worker.as_str()),
        ("job_enqueue", producer.as_str()),
    ];
    // A database without the schema, and the README's roles.
    let admin = db.pool();
    sqlx::raw_sql("DROP SCHEMA job CASCADE")
        .execute(&admin)
        .await
        .unwrap();
    sqlx::raw_sql(&readme_sql("roles-create", &names, db.name()))
        .execute(&admin)
        .await
        .unwrap();

    // The owner migrates, with the Rust migrator, and grants.
    let as_owner = pool_as(&db, &owner).await;
    let owner_store = PgStore::new(as_owner.clone());
    owner_store.migrate().await.unwrap();
    sqlx::raw_sql(&readme_sql("roles-grants", &names, db.name()))
        .execute(&as_owner)
        .await
        .unwrap();
    let schema_owner: String = sqlx::query_scalar(
        "SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'job'",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(schema_owner, owner);

    // The enqueue-only role enqueues through the functions, and can do nothing else.
    let as_producer = pool_as(&db, &producer).await;
    let id: i64 = sqlx::query_scalar("SELECT job.enqueue('doors.ping', '{\"n\": 1}')")
        .fetch_one(&as_producer)
        .await
        .unwrap();
    let many: Vec<i64> = sqlx::query_scalar(
        "SELECT * FROM job.enqueue_many('[{\"kind\": \"doors.ping\", \"payload\": {\"n\": 2}}]')",
    )
    .fetch_all(&as_producer)
    .await
    .unwrap();
    let unique: i64 = sqlx::query_scalar(
        "SELECT job.enqueue('doors.ping', '{\"n\": 3}', unique_key => 'ping:3')",
    )
    .fetch_one(&as_producer)
    .await
    .unwrap();
    for statement in [
        "SELECT * FROM job.jobs",
        "SELECT count(*) FROM job.steps",
        "INSERT INTO job.jobs (kind) VALUES ('doors.ping')",
        "UPDATE job.jobs SET priority = 9",
        "DELETE FROM job.jobs",
        "SELECT * FROM job.settings",
        "UPDATE job.settings SET payload_limit = 999999999",
        "INSERT INTO job.pauses (scope, name) VALUES ('queue', 'default')",
        "SELECT * FROM job.enqueue_unique('doors.ping', 'default', 0::smallint, '{}', 1, 25, now(), NULL, 'k', 'finished', false, '{}', NULL)",
        "SELECT job.name_problem('x')",
        // EXECUTE is PUBLIC's, but it runs as its caller: no table privilege, no claim.
        "SELECT * FROM job.claim('default', '{doors.ping}', '{1}', '{30000}', 10, 'w', '{NULL}', '{}')",
        "SELECT * FROM job.rescue_expired(100)",
        "SELECT * FROM job.admission_problem('a', 'b', '{}', '{}', NULL, NULL)",
        "CREATE TABLE job.mine (x int)",
        "CREATE FUNCTION job.enqueue(x int) RETURNS int LANGUAGE sql AS 'SELECT 1'",
        "TRUNCATE job.jobs",
    ] {
        denied(&as_producer, statement).await;
    }
    // A store on it (a worker started with the producer's credentials) says what is missing
    // and where the grants are listed.
    let refused = job::Admin::stats(
        &PgStore::new(as_producer.clone()),
        &job::JobFilter::default(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(refused.contains("permission denied"), "{refused}");
    assert!(
        refused.contains("lacks a privilege on the job schema")
            && refused.contains("\"Roles and privileges\""),
        "{refused}"
    );

    // The worker runs the jobs with table privileges only.
    let as_worker = pool_as(&db, &worker).await;
    let store = PgStore::new(as_worker.clone());
    // A worker runs `migrate()` at startup as the README says: with nothing to migrate, it
    // only reads the books, which its grants allow.
    store
        .migrate()
        .await
        .expect("the worker's migrate on an up-to-date schema");
    let running = Worker::builder(store.clone())
        .register::<Ping>()
        .queue("default", 2)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    for id in [id, many[0], unique] {
        crate::common::reaches(&store, id, JobState::Completed).await;
    }
    running.shutdown().await;
    // ... recording its kind's starts and outcomes for the rate limit and the breaker ...
    let (starts, attempts): (i32, i64) = sqlx::query_as(
        "SELECT (SELECT cardinality(starts) FROM job.rate_windows WHERE kind = 'doors.ping'),
                (SELECT attempts FROM job.breakers WHERE kind = 'doors.ping')",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!((starts, attempts), (3, 3));
    // ... enqueues with the typed helper (the Rust producer's statements), unique ones too ...
    job::Enqueue::new(Ping { n: 4 })
        .unique_key("ping:4")
        .enqueue(&as_worker)
        .await
        .unwrap();
    job::Enqueue::new(Ping { n: 5 })
        .unique_key("ping:5")
        .rate_key("tenant:5")
        .enqueue(&as_worker)
        .await
        .unwrap();
    job::Enqueue::new(Ping { n: 6 })
        .unique_key("ping:6")
        .ordering_key("account:6")
        .enqueue(&as_worker)
        .await
        .unwrap();
    // ... and a keyed job that breaks a rule, sent past the Rust checks, is refused naming
    // what it breaks (job.enqueue_unique asks job.enqueue_problem why, which a worker may
    // execute since migration 0053: before, "permission denied for function enqueue_problem") ...
    for (job, option) in [
        (
            job::NewJob {
                priority: -1,
                ..job::NewJob::new("doors.ping", "{}")
            },
            "priority",
        ),
        (
            job::NewJob {
                max_attempts: 0,
                ..job::NewJob::new("doors.ping", "{}")
            },
            "max_attempts",
        ),
    ] {
        let job = job::NewJob {
            unique: Some(job::Unique {
                key: "ping:bad".into(),
                scope: job::UniqueScope::UntilFinished,
                on_duplicate: job::OnDuplicate::Keep,
            }),
            ..job
        };
        match job::enqueue(&as_worker, &job).await {
            Err(job::EnqueueError::InvalidOption { option: named, .. }) => {
                assert_eq!(named, option)
            }
            other => panic!("a keyed job of {option} refused as {other:?}"),
        }
    }
    // ... in bulk, which takes its ordering keys' locks first (job.ordering_lock_keys) ...
    let many = job::Enqueue::<Ping>::many(&as_worker, [Ping { n: 7 }, Ping { n: 8 }])
        .await
        .unwrap();
    assert_eq!(many.len(), 2);
    // ... and changes nothing it does not need to.
    for statement in [
        "UPDATE job.settings SET payload_limit = 999999999",
        "INSERT INTO job.pauses (scope, name) VALUES ('queue', 'default')",
        "CREATE TABLE job.mine (x int)",
        "DROP TABLE job.steps",
        "ALTER TABLE job.jobs DISABLE TRIGGER jobs_admission",
        "TRUNCATE job.jobs",
        "INSERT INTO job.schema_migrations (version, name) VALUES (99, 'x')",
    ] {
        denied(&as_worker, statement).await;
    }
    // The rules hold for it as for anyone: the trigger runs as the owner.
    let (code, _) = db_error(
        sqlx::query("INSERT INTO job.jobs (kind, payload) VALUES ('doors.ping', '[1]')")
            .execute(&as_worker)
            .await
            .unwrap_err(),
    );
    assert_eq!(code, "23514");
    // So do migration 0025's bounds, whose triggers call the owner's functions.
    for (statement, column) in [
        (
            "UPDATE job.jobs SET errors = (SELECT jsonb_agg(i) FROM generate_series(1, 21) i)",
            "`errors`",
        ),
        (
            "INSERT INTO job.jobs (kind, payload, trace_context) VALUES ('doors.ping', '{}', repeat('z', 55))",
            "`trace_context`",
        ),
        (
            "INSERT INTO job.compensations (kind, compensate_kind, compensate_queue)
                 VALUES ('doors.ping', 'doors pong', 'default')",
            "`compensate_kind`",
        ),
    ] {
        let (code, message) = db_error(sqlx::raw_sql(statement).execute(&as_worker).await.unwrap_err());
        assert_eq!(code, "23514", "{statement}: {message}");
        assert!(message.contains(column), "{statement}: {message}");
    }

    // The owner migrates again (nothing to do), and can change the payload limit.
    owner_store.migrate().await.unwrap();
    sqlx::query("UPDATE job.settings SET payload_limit = 2097152")
        .execute(&as_owner)
        .await
        .unwrap();

    for pool in [as_owner, as_producer, as_worker] {
        pool.close().await;
    }
    db.close().await;
    roles.drop_all().await;
}

/// An operator's role with exactly the README's grants (the worker's, then the operator's own
/// on `job.pauses`) does every operator action: pause and resume (a breaker's pause replaced
/// by the operator's too), what the `job` command and the dashboard read, cancel, redrive and
/// purge. Not the payload limit, which is the owner's.
#[tokio::test]
async fn an_operator_with_the_readme_grants_pauses_resumes_and_runs_every_admin_action() {
    use job::{Admin, Cancelled, JobFilter, Pause, PausedBy};

    let mut roles: Roles; // dropped after the database, which holds the roles' privileges
    let db = TestDb::new().await;
    roles = Roles::new(&db);
    let (owner, operator, producer) = (
        roles.name("job_owner"),
        roles.name("job_operator"),
        roles.name("job_enqueue"),
    );
    // The worker's grants go to the operator's role.
    let names = [
        ("job_owner", owner.as_str()),
        ("job_worker", operator.as_str()),
        ("job_enqueue", producer.as_str()),
    ];
    let admin = db.pool();
    sqlx::raw_sql("DROP SCHEMA job CASCADE")
        .execute(&admin)
        .await
        .unwrap();
    sqlx::raw_sql(&readme_sql("roles-create", &names, db.name()))
        .execute(&admin)
        .await
        .unwrap();
    let as_owner = pool_as(&db, &owner).await;
    PgStore::new(as_owner.clone()).migrate().await.unwrap();
    sqlx::raw_sql(&readme_sql("roles-grants", &names, db.name()))
        .execute(&as_owner)
        .await
        .unwrap();
    sqlx::raw_sql(&readme_sql(
        "roles-operator",
        &[("job_operator", operator.as_str())],
        db.name(),
    ))
    .execute(&as_owner)
    .await
    .unwrap();

    // Jobs to act on, and a breaker's pause of a kind, as the owner.
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO job.jobs (kind, payload, state, attempt, finalized_at)
         VALUES ('doors.ping', '{\"n\": 1}', 'available', 0, NULL),
                ('doors.ping', '{\"n\": 2}', 'discarded', 1, now()),
                ('doors.ping', '{\"n\": 3}', 'discarded', 1, now())
         RETURNING id",
    )
    .fetch_all(&as_owner)
    .await
    .unwrap();
    let (waiting, dead, purged) = (ids[0], ids[1], ids[2]);
    sqlx::query(
        "INSERT INTO job.pauses (scope, name, paused_by, reason, resume_at)
         VALUES ('kind', 'doors.ping', 'breaker', 'tripped', now() + interval '1 hour')",
    )
    .execute(&as_owner)
    .await
    .unwrap();

    let as_operator = pool_as(&db, &operator).await;
    let store = PgStore::new(as_operator.clone());
    let queue = Pause::Queue("default".to_owned());
    let kind = Pause::Kind("doors.ping".to_owned());
    // `job pause`, the dashboard's pause, `Admin::pause`.
    assert!(store.pause(&queue).await.unwrap());
    assert!(!store.pause(&queue).await.unwrap(), "paused already");
    assert!(
        store.pause(&kind).await.unwrap(),
        "the breaker's pause becomes the operator's"
    );
    let pauses = store.pauses().await.unwrap();
    assert_eq!(
        pauses
            .iter()
            .map(|p| (p.what.clone(), p.paused_by, p.resume_at))
            .collect::<Vec<_>>(),
        [
            (kind.clone(), PausedBy::Operator, None),
            (queue.clone(), PausedBy::Operator, None)
        ]
    );
    assert_eq!(store.paused().await.unwrap(), [kind.clone(), queue.clone()]);
    assert!(store.resume(&queue).await.unwrap());
    assert!(store.resume(&kind).await.unwrap());
    assert!(!store.resume(&kind).await.unwrap(), "resumed already");
    assert_eq!(store.paused().await.unwrap(), []);
    // A pause written by hand: the table says what is wrong with its name, to an operator
    // who may not call `job.name_problem` itself (migration 0065).
    let refused = sqlx::query("INSERT INTO job.pauses (scope, name) VALUES ('queue', 'a b')")
        .execute(&as_operator)
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains(
            "pause refused: the queue name must not contain whitespace, control or format \
             characters (U+0020 at character 2)"
        ),
        "{refused}"
    );

    // What `job stats`, `list`, `show`, `check` and the dashboard read.
    let stats = store.stats(&JobFilter::default()).await.unwrap();
    assert_eq!(stats.dead_letters, 2);
    let listed = store.list(&JobFilter::dead_letters()).await.unwrap();
    assert_eq!(
        listed.iter().map(|j| j.id).collect::<Vec<_>>(),
        [dead, purged]
    );
    assert_eq!(
        Store::get(&store, waiting).await.unwrap().unwrap().id,
        waiting
    );
    assert_eq!(store.steps(waiting).await.unwrap(), []);
    let check = store.check(Duration::from_secs(30)).await.unwrap();
    assert_eq!(check.problems(), Vec::<String>::new());
    let page = store
        .page(&job_postgres::PageRequest::default())
        .await
        .unwrap();
    assert_eq!(page.jobs.len(), 3);
    store
        .overview(1000, Duration::from_secs(3600))
        .await
        .unwrap();

    // `job cancel`, `redrive`, `purge`.
    assert_eq!(store.cancel(waiting).await.unwrap(), Cancelled::Now);
    let redriven = store.redrive(&JobFilter::ids([dead])).await.unwrap();
    assert_eq!(redriven.redriven, [dead]);
    assert_eq!(store.purge(&JobFilter::ids([purged])).await.unwrap(), 1);

    // The payload limit is the owner's.
    denied(
        &as_operator,
        "UPDATE job.settings SET payload_limit = 999999999",
    )
    .await;

    for pool in [as_owner, as_operator] {
        pool.close().await;
    }
    db.close().await;
    roles.drop_all().await;
}

/// The README's grants as they were at migration 11, before 0012 to 0015 added objects a worker
/// needs: a worker's (with `job_worker` and `job_enqueue` put in), and an operator's, who also
/// took `INSERT, DELETE ON job.pauses`.
const GRANTS_AT_11: &str = "
GRANT USAGE ON SCHEMA job TO job_worker, job_enqueue;
GRANT SELECT, INSERT, UPDATE, DELETE ON job.jobs, job.steps TO job_worker;
GRANT SELECT ON job.pauses TO job_worker;
GRANT SELECT, INSERT, UPDATE, DELETE ON job.kind_owners, job.leaders TO job_worker;
GRANT EXECUTE ON FUNCTION job.enqueue_unique, job.set_trace_context TO job_worker;
GRANT EXECUTE ON FUNCTION job.enqueue, job.enqueue_many TO job_enqueue;
";

/// Installs the migrations below `version` only, as `pool`'s role, recorded as the migrator
/// records them: the schema an older release left.
async fn migrate_below(pool: &PgPool, version: i32) {
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

/// An installation from before migration 12, whose worker role was granted what the README
/// said then, upgraded to this release: the worker runs as on a fresh installation (it stages
/// a scheduled job, one enqueued before the upgrade too, and a retry; promotes the next job of
/// an ordering key; resolves a dependent; records rate-limit starts and breaker outcomes), and
/// the operator of then pauses and resumes. Migration 0032 granted them what 0009 to 0015
/// added, to every role that held UPDATE on job.jobs (a name SQL must quote too), and to
/// nobody else.
#[tokio::test]
async fn a_worker_granted_as_the_readme_said_before_migration_12_still_works_after_the_upgrade() {
    use job::{Admin, Pause};

    let mut roles: Roles; // dropped after the database, which holds the roles' privileges
    let db = TestDb::new().await;
    roles = Roles::new(&db);
    let (owner, worker, producer, operator, quoted) = (
        roles.name("job_owner"),
        roles.name("job_worker"),
        roles.name("job_enqueue"),
        roles.name("job_operator"),
        roles.name_to_quote("Job Worker"),
    );
    let names = [
        ("job_owner", owner.as_str()),
        ("job_worker", worker.as_str()),
        ("job_enqueue", producer.as_str()),
    ];
    let admin = db.pool();
    sqlx::raw_sql("DROP SCHEMA job CASCADE")
        .execute(&admin)
        .await
        .unwrap();
    sqlx::raw_sql(&readme_sql("roles-create", &names, db.name()))
        .execute(&admin)
        .await
        .unwrap();
    sqlx::raw_sql(&format!(
        "CREATE ROLE {operator} LOGIN; CREATE ROLE {}",
        ident(&quoted)
    ))
    .execute(&admin)
    .await
    .unwrap();

    // The older release: its migrations, its grants.
    let as_owner = pool_as(&db, &owner).await;
    migrate_below(&as_owner, 12).await;
    let mut grants = String::new();
    for (role, enqueuer) in [(&worker, &producer), (&operator, &producer)] {
        grants.push_str(
            &GRANTS_AT_11
                .replace("job_worker", role)
                .replace("job_enqueue", enqueuer),
        );
    }
    grants.push_str(&format!(
        "GRANT INSERT, DELETE ON job.pauses TO {operator};
         GRANT USAGE ON SCHEMA job TO {quoted};
         GRANT SELECT, UPDATE ON job.jobs TO {quoted};",
        quoted = ident(&quoted)
    ));
    sqlx::raw_sql(&grants).execute(&as_owner).await.unwrap();
    // A job scheduled before the upgrade, by the worker.
    let as_worker = pool_as(&db, &worker).await;
    let early: i64 = sqlx::query_scalar(
        "INSERT INTO job.jobs (kind, payload, state, run_at)
         VALUES ('doors.ping', '{\"n\": 0}', 'scheduled', now() + interval '1 second')
         RETURNING id",
    )
    .fetch_one(&as_worker)
    .await
    .unwrap();

    // The upgrade, by the owner.
    PgStore::new(as_owner.clone()).migrate().await.unwrap();

    // The worker stages the job scheduled before the upgrade (stage.sql calls
    // job.ordering_wake_up and job.dependencies_resolve, of migrations 0012 and 0013) ...
    let store = PgStore::new(as_worker.clone());
    // ... and its own `migrate()` at startup, with nothing left to apply, reads the books
    // (migration 0038 granted that) ...
    store
        .migrate()
        .await
        .expect("a worker granted before the upgrade runs its migrate");
    let running = Worker::builder(store.clone())
        .register::<Ping>()
        .register::<FailsOnce>()
        .queue("default", 2)
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
        .start();
    crate::common::reaches(&store, early, JobState::Completed).await;
    // ... enqueues what uses the newer objects, and runs it all.
    let head = job::Enqueue::new(FailsOnce {})
        .ordering_key("account:1")
        .enqueue(&as_worker)
        .await
        .unwrap();
    let next = job::Enqueue::new(Ping { n: 1 })
        .ordering_key("account:1")
        .enqueue(&as_worker)
        .await
        .unwrap();
    let dependent = job::Enqueue::new(Ping { n: 2 })
        .depends_on([head])
        .enqueue(&as_worker)
        .await
        .unwrap();
    let scheduled = job::Enqueue::new(Ping { n: 3 })
        .schedule_in(Duration::from_secs(1))
        .rate_key("tenant:3")
        .enqueue(&as_worker)
        .await
        .unwrap();
    for id in [head, next, dependent, scheduled] {
        crate::common::reaches(&store, id, JobState::Completed).await;
    }
    running.shutdown().await;
    assert_eq!(
        Store::get(&store, head).await.unwrap().unwrap().attempt,
        2,
        "retried once"
    );
    let (starts, attempts): (i32, i64) = sqlx::query_as(
        "SELECT (SELECT sum(cardinality(starts))::integer FROM job.rate_windows
                 WHERE kind = 'doors.ping'),
                (SELECT attempts FROM job.breakers WHERE kind = 'doors.ping')",
    )
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!((starts, attempts), (4, 4));

    // The operator of then pauses (an INSERT … ON CONFLICT DO UPDATE) and resumes.
    let as_operator = pool_as(&db, &operator).await;
    let operator_store = PgStore::new(as_operator.clone());
    let queue = Pause::Queue("default".to_owned());
    assert!(operator_store.pause(&queue).await.unwrap());
    assert!(operator_store.resume(&queue).await.unwrap());

    // Who got what: every role holding UPDATE on job.jobs, the one whose name is quoted too;
    // not the enqueue-only role.
    let got: Vec<(bool, bool, bool)> = sqlx::query_as(
        "SELECT has_function_privilege(r, 'job.ordering_wake_up(integer)', 'EXECUTE'),
                has_table_privilege(r, 'job.rate_windows', 'INSERT'),
                has_table_privilege(r, 'job.pauses', 'UPDATE')
         FROM unnest($1::text[]) WITH ORDINALITY AS u(r, n) ORDER BY n",
    )
    .bind([&worker, &operator, &quoted, &producer])
    .fetch_all(&admin)
    .await
    .unwrap();
    assert_eq!(
        got,
        [
            (true, true, false),
            (true, true, true),
            (true, true, false),
            (false, false, false)
        ]
    );
    denied(
        &as_worker,
        "INSERT INTO job.pauses (scope, name) VALUES ('queue', 'x')",
    )
    .await;

    for pool in [as_owner, as_worker, as_operator] {
        pool.close().await;
    }
    db.close().await;
    roles.drop_all().await;
}

#[tokio::test]
async fn a_worker_that_may_not_vacuum_says_so_instead_of_doing_nothing() {
    let mut roles: Roles; // dropped after the database, which holds the roles' privileges
    let db = TestDb::new().await;
    roles = Roles::new(&db);
    let (owner, worker) = (roles.name("job_owner"), roles.name("job_worker"));
    let names = [
        ("job_owner", owner.as_str()),
        ("job_worker", worker.as_str()),
        ("job_enqueue", worker.as_str()),
    ];
    let admin = db.pool();
    sqlx::raw_sql("DROP SCHEMA job CASCADE")
        .execute(&admin)
        .await
        .unwrap();
    let create = readme_sql("roles-create", &names, db.name()).replace(
        &format!("CREATE ROLE {worker} LOGIN;\nCREATE ROLE {worker} LOGIN;"),
        &format!("CREATE ROLE {worker} LOGIN;"),
    );
    sqlx::raw_sql(&create).execute(&admin).await.unwrap();
    let as_owner = pool_as(&db, &owner).await;
    let owner_store = PgStore::new(as_owner.clone());
    owner_store.migrate().await.unwrap();
    sqlx::raw_sql(&readme_sql("roles-grants", &names, db.name()))
        .execute(&as_owner)
        .await
        .unwrap();
    let as_worker = pool_as(&db, &worker).await;
    let store = PgStore::new(as_worker.clone());
    // Autovacuum is off on this table (whatever the server says), and enough rows changed.
    sqlx::raw_sql(
        "ALTER TABLE job.jobs SET (autovacuum_enabled = false);
         SELECT count(*) FROM job.enqueue_many(
             (SELECT jsonb_agg(jsonb_build_object('kind', 'doors.ping', 'payload', '{}'::jsonb))
              FROM generate_series(1, 1500)));",
    )
    .execute(&as_owner)
    .await
    .unwrap();
    // The statistics reach the views within a second or so.
    let refused = crate::common::eventually("the vacuum to be needed", || async {
        store.vacuum().await.err()
    })
    .await;
    let message = refused.to_string();
    assert!(
        message.contains(&format!("role `{worker}` may not run"))
            && message.contains(&format!("only its owner `{owner}`")),
        "{message}"
    );
    // The pruner logs it at WARN once, not every interval.
    let lines = crate::support::captured();
    let running = Worker::builder(store.clone())
        .register::<Ping>()
        .queue("default", 1)
        .pruner(job::PrunerConfig {
            interval: Duration::from_millis(20),
            vacuum_interval: Some(Duration::from_millis(20)),
            ..job::PrunerConfig::default()
        })
        .build()
        .unwrap()
        .start();
    crate::common::eventually("the pruner to try again", || async {
        let tries = lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(&format!("role `{worker}` may not run")))
            .count();
        (tries >= 3).then_some(())
    })
    .await;
    running.shutdown().await;
    let warned: Vec<String> = lines
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.starts_with("WARN") && l.contains(&format!("role `{worker}`")))
        .cloned()
        .collect();
    assert_eq!(warned.len(), 1, "{warned:?}");
    assert!(warned[0].contains("vacuum failed"), "{warned:?}");

    assert!(owner_store.vacuum().await.unwrap(), "the owner vacuums");
    for pool in [as_owner, as_worker] {
        pool.close().await;
    }
    db.close().await;
    roles.drop_all().await;
}

/// Every function of the schema but a few has `EXECUTE` revoked from `PUBLIC`, as the README
/// says; the few give no role anything its own grants do not. A new function slips into that
/// list only through this test.
#[tokio::test]
async fn public_may_execute_only_the_functions_the_readme_names() {
    let db = TestDb::new().await;
    let public: Vec<String> = sqlx::query_scalar(
        "SELECT p.oid::regprocedure::text FROM pg_proc p
         WHERE p.pronamespace = 'job'::regnamespace
           AND (p.proacl IS NULL OR EXISTS (
                SELECT 1 FROM aclexplode(p.proacl) a
                WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE'))
         ORDER BY 1",
    )
    .fetch_all(&db.pool())
    .await
    .unwrap();
    assert_eq!(
        public,
        [
            "job.claim(text,text[],integer[],bigint[],integer,text,integer[],text[])",
            "job.enqueue_problem(text,jsonb,text,integer,integer,timestamp with time zone,integer,text,text,text,text[],text,timestamp with time zone)",
            "job.ordering_lock_keys(text[])",
            "job.push_error(jsonb,jsonb)",
            "job.refuse_deadline()",
            "job.rescue_expired(integer)",
            "job.server_started_at()",
            "job.shown(text)",
        ]
    );
    db.close().await;
}

/// An `=` on `job.job_state` defined in a schema on the caller's `search_path` (a role that may
/// create objects there: `public` in a database created before PostgreSQL 15) is not the one
/// the schema's functions compare states with: PostgreSQL prefers an operator of the exact
/// types over pg_catalog's operator of any enum, wherever on the path it is. The statement
/// trigger of every insert and the worker's keyed enqueue ran such an operator with their
/// caller's rights until migration 0063 pinned their paths. Every PL/pgSQL function pins its
/// path; the SQL functions that do not (the planner inlines only those without a SET clause)
/// compare built-in types only, whose exact operators pg_catalog, searched first, has.
#[tokio::test]
async fn an_operator_on_the_callers_path_does_not_run_in_the_schemas_functions() {
    let db = TestDb::new().await;
    let pool = db.pool();
    sqlx::raw_sql(
        "CREATE SCHEMA trap;
         CREATE FUNCTION trap.state_eq(a job.job_state, b job.job_state) RETURNS boolean
         LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'trap.state_eq ran as %', current_user; END $$;
         CREATE OPERATOR trap.= (LEFTARG = job.job_state, RIGHTARG = job.job_state,
                                 FUNCTION = trap.state_eq);",
    )
    .execute(&pool)
    .await
    .unwrap();
    let mut conn = pool.acquire().await.unwrap();
    sqlx::raw_sql("SET search_path = trap, public")
        .execute(&mut *conn)
        .await
        .unwrap();
    // The operator is found by a statement of this session…
    let error = sqlx::raw_sql("SELECT 'available'::job.job_state = 'running'::job.job_state")
        .execute(&mut *conn)
        .await
        .expect_err("the session's own comparison takes the trap");
    assert!(db_error(error).1.contains("trap.state_eq ran"));
    // …but not by the trigger of an insert, nor by the keyed enqueue, nor by the doors.
    sqlx::raw_sql("INSERT INTO job.jobs (kind, payload) VALUES ('doors.trap', '{}')")
        .execute(&mut *conn)
        .await
        .unwrap();
    let keyed = "SELECT outcome FROM job.enqueue_unique('doors.trap', 'default', 0::smallint,
                 '{}'::jsonb, 1, 25, now(), NULL, 'key:1', 'finished', false, '{}', NULL)";
    for expected in ["inserted", "duplicate"] {
        let outcome: String = sqlx::query_scalar(keyed)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!(outcome, expected);
    }
    sqlx::raw_sql(
        "SELECT job.enqueue('doors.trap', '{}', unique_key => 'key:2', ordering_key => 'k');
         SELECT job.enqueue_many('[{\"kind\": \"doors.trap\", \"payload\": {}}]')",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    drop(conn);
    let unpinned: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT p.oid::regprocedure::text, l.lanname::text, p.prosrc FROM pg_proc p
         JOIN pg_language l ON l.oid = p.prolang
         WHERE p.pronamespace = 'job'::regnamespace
           AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) c
                           WHERE c IN ('search_path=pg_catalog, pg_temp',
                                       'search_path=pg_catalog'))
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    for (function, language, source) in &unpinned {
        assert_eq!(
            language, "sql",
            "{function} runs with its caller's search_path"
        );
        assert!(
            !source.contains("state") && !source.contains("job_"),
            "{function} runs with its caller's search_path and may compare the schema's types"
        );
    }
    assert_eq!(unpinned.len(), 7, "{unpinned:?}");
    db.close().await;
}
