//! The migration runner: numbered, append-only SQL files embedded in the binary, applied into
//! the `job` schema and recorded in `job.schema_migrations`.
//!
//! Not sqlx's migrator: that one keeps its books in `_sqlx_migrations`, which belongs to the
//! application's own migrations.

use std::time::Duration;

use sqlx::postgres::PgConnection;
use sqlx::{Connection, Executor, PgPool};

use crate::error::Error;
use crate::{migrate_watch, sql};

/// One embedded migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its number; migrations apply in this order.
    pub version: i32,
    /// Its name, as in its file name.
    pub name: &'static str,
    /// Its SQL, run as one multi-statement script in its own transaction.
    pub sql: &'static str,
}

/// Every migration this build knows, oldest first.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "lifecycle",
        sql: include_str!("../migrations/0002_lifecycle.sql"),
    },
    Migration {
        version: 3,
        name: "steps",
        sql: include_str!("../migrations/0003_steps.sql"),
    },
    Migration {
        version: 4,
        name: "isolation",
        sql: include_str!("../migrations/0004_isolation.sql"),
    },
    Migration {
        version: 5,
        name: "rules",
        sql: include_str!("../migrations/0005_rules.sql"),
    },
    Migration {
        version: 6,
        name: "validate_rules",
        sql: include_str!("../migrations/0006_validate_rules.sql"),
    },
    Migration {
        version: 7,
        name: "sql_interface",
        sql: include_str!("../migrations/0007_sql_interface.sql"),
    },
    Migration {
        version: 8,
        name: "staging",
        sql: include_str!("../migrations/0008_staging.sql"),
    },
    Migration {
        version: 9,
        name: "telemetry",
        sql: include_str!("../migrations/0009_telemetry.sql"),
    },
    Migration {
        version: 10,
        name: "results",
        sql: include_str!("../migrations/0010_results.sql"),
    },
    Migration {
        version: 11,
        name: "pending",
        sql: include_str!("../migrations/0011_pending.sql"),
    },
    Migration {
        version: 12,
        name: "ordering",
        sql: include_str!("../migrations/0012_ordering.sql"),
    },
    Migration {
        version: 13,
        name: "dependencies",
        sql: include_str!("../migrations/0013_dependencies.sql"),
    },
    Migration {
        version: 14,
        name: "compensation",
        sql: include_str!("../migrations/0014_compensation.sql"),
    },
    Migration {
        version: 15,
        name: "flow_control",
        sql: include_str!("../migrations/0015_flow_control.sql"),
    },
    Migration {
        version: 16,
        name: "pending_unique",
        sql: include_str!("../migrations/0016_pending_unique.sql"),
    },
    Migration {
        version: 17,
        name: "finished_indexes",
        sql: include_str!("../migrations/0017_finished_indexes.sql"),
    },
    Migration {
        version: 18,
        name: "step_output_bound",
        sql: include_str!("../migrations/0018_step_output_bound.sql"),
    },
    Migration {
        version: 19,
        name: "dependency_hold",
        sql: include_str!("../migrations/0019_dependency_hold.sql"),
    },
    Migration {
        version: 20,
        name: "sql_keys",
        sql: include_str!("../migrations/0020_sql_keys.sql"),
    },
    Migration {
        version: 21,
        name: "claim_function",
        sql: include_str!("../migrations/0021_claim_function.sql"),
    },
    Migration {
        version: 22,
        name: "door_bounds",
        sql: include_str!("../migrations/0022_door_bounds.sql"),
    },
    Migration {
        version: 23,
        name: "dependency_wake",
        sql: include_str!("../migrations/0023_dependency_wake.sql"),
    },
    Migration {
        version: 24,
        name: "jit_off",
        sql: include_str!("../migrations/0024_jit_off.sql"),
    },
    Migration {
        version: 25,
        name: "raw_bounds",
        sql: include_str!("../migrations/0025_raw_bounds.sql"),
    },
    Migration {
        version: 26,
        name: "running_by_kind",
        sql: include_str!("../migrations/0026_running_by_kind.sql"),
    },
    Migration {
        version: 27,
        name: "stopping_rows",
        sql: include_str!("../migrations/0027_stopping_rows.sql"),
    },
    Migration {
        version: 28,
        name: "legacy_rows",
        sql: include_str!("../migrations/0028_legacy_rows.sql"),
    },
    Migration {
        version: 29,
        name: "operator_races",
        sql: include_str!("../migrations/0029_operator_races.sql"),
    },
    Migration {
        version: 30,
        name: "rate_window_limit",
        sql: include_str!("../migrations/0030_rate_window_limit.sql"),
    },
    Migration {
        version: 31,
        name: "dependency_outcomes",
        sql: include_str!("../migrations/0031_dependency_outcomes.sql"),
    },
    Migration {
        version: 32,
        name: "worker_grants",
        sql: include_str!("../migrations/0032_worker_grants.sql"),
    },
    Migration {
        version: 33,
        name: "deadline_door",
        sql: include_str!("../migrations/0033_deadline_door.sql"),
    },
    Migration {
        version: 34,
        name: "ordering_snapshots",
        sql: include_str!("../migrations/0034_ordering_snapshots.sql"),
    },
    Migration {
        version: 35,
        name: "pending_deadlines",
        sql: include_str!("../migrations/0035_pending_deadlines.sql"),
    },
    Migration {
        version: 36,
        name: "compensation_passing_errors",
        sql: include_str!("../migrations/0036_compensation_passing_errors.sql"),
    },
    Migration {
        version: 37,
        name: "dependency_owner",
        sql: include_str!("../migrations/0037_dependency_owner.sql"),
    },
    Migration {
        version: 38,
        name: "worker_reads_migrations",
        sql: include_str!("../migrations/0038_worker_reads_migrations.sql"),
    },
    Migration {
        version: 39,
        name: "compensating_options",
        sql: include_str!("../migrations/0039_compensating_options.sql"),
    },
    Migration {
        version: 40,
        name: "pending_door",
        sql: include_str!("../migrations/0040_pending_door.sql"),
    },
    Migration {
        version: 41,
        name: "rescue_after_restart",
        sql: include_str!("../migrations/0041_rescue_after_restart.sql"),
    },
    Migration {
        version: 42,
        name: "door_echoes",
        sql: include_str!("../migrations/0042_door_echoes.sql"),
    },
    Migration {
        version: 43,
        name: "crash_restart_hold",
        sql: include_str!("../migrations/0043_crash_restart_hold.sql"),
    },
    Migration {
        version: 44,
        name: "last_attempt_start",
        sql: include_str!("../migrations/0044_last_attempt_start.sql"),
    },
    Migration {
        version: 45,
        name: "interruptions",
        sql: include_str!("../migrations/0045_interruptions.sql"),
    },
    Migration {
        version: 46,
        name: "breaker_counts",
        sql: include_str!("../migrations/0046_breaker_counts.sql"),
    },
    Migration {
        version: 47,
        name: "staging_by_time",
        sql: include_str!("../migrations/0047_staging_by_time.sql"),
    },
    Migration {
        version: 48,
        name: "rescue_names",
        sql: include_str!("../migrations/0048_rescue_names.sql"),
    },
    Migration {
        version: 49,
        name: "step_output_bytes",
        sql: include_str!("../migrations/0049_step_output_bytes.sql"),
    },
    Migration {
        version: 50,
        name: "claim_by_version",
        sql: include_str!("../migrations/0050_claim_by_version.sql"),
    },
    Migration {
        version: 51,
        name: "rate_claim_by_version",
        sql: include_str!("../migrations/0051_rate_claim_by_version.sql"),
    },
    Migration {
        version: 52,
        name: "door_arguments",
        sql: include_str!("../migrations/0052_door_arguments.sql"),
    },
    Migration {
        version: 53,
        name: "enqueue_problem_for_workers",
        sql: include_str!("../migrations/0053_enqueue_problem_for_workers.sql"),
    },
    Migration {
        version: 54,
        name: "rescue_limit",
        sql: include_str!("../migrations/0054_rescue_limit.sql"),
    },
    Migration {
        version: 55,
        name: "claim_arguments",
        sql: include_str!("../migrations/0055_claim_arguments.sql"),
    },
    Migration {
        version: 56,
        name: "key_arguments",
        sql: include_str!("../migrations/0056_key_arguments.sql"),
    },
    Migration {
        version: 57,
        name: "set_based_cascades",
        sql: include_str!("../migrations/0057_set_based_cascades.sql"),
    },
    Migration {
        version: 58,
        name: "ordering_admit_by_index",
        sql: include_str!("../migrations/0058_ordering_admit_by_index.sql"),
    },
    Migration {
        version: 59,
        name: "door_echoes_shown",
        sql: include_str!("../migrations/0059_door_echoes_shown.sql"),
    },
    Migration {
        version: 60,
        name: "claim_items",
        sql: include_str!("../migrations/0060_claim_items.sql"),
    },
    Migration {
        version: 61,
        name: "dead_letters_by_id",
        sql: include_str!("../migrations/0061_dead_letters_by_id.sql"),
    },
    Migration {
        version: 62,
        name: "step_totals",
        sql: include_str!("../migrations/0062_step_totals.sql"),
    },
    Migration {
        version: 63,
        name: "paths_pinned",
        sql: include_str!("../migrations/0063_paths_pinned.sql"),
    },
    Migration {
        version: 64,
        name: "claim_never_seq_scans",
        sql: include_str!("../migrations/0064_claim_never_seq_scans.sql"),
    },
    Migration {
        version: 65,
        name: "pause_names",
        sql: include_str!("../migrations/0065_pause_names.sql"),
    },
    Migration {
        version: 66,
        name: "passes_never_seq_scan",
        sql: include_str!("../migrations/0066_passes_never_seq_scan.sql"),
    },
];

/// The whole schema as one plain SQL script, for a DBA or a team without Rust:
/// `psql -v ON_ERROR_STOP=1 -f job-postgres/schema.sql` installs it, and run again after an
/// upgrade applies only the migrations a database lacks. It keeps the same books as
/// [`migrate`] (`job.schema_migrations`, the same advisory lock, one transaction per
/// migration), so either may follow the other, and refuses what it refuses: a migration
/// whose predecessor is not recorded, or whose successor is ([`Error::MigrationMissing`],
/// [`Error::MigrationOutOfOrder`]). Its first line is psql's `\set ON_ERROR_STOP on`, so
/// psql stops at the first error however it was started (a client other than psql must drop
/// that line). `job-postgres/schema.sql` is this text; a test fails when the two differ
/// (`JOB_SCHEMA_OVERWRITE=1 cargo test -p job-postgres --lib` rewrites the file).
pub fn script() -> String {
    // The migrator's lock (sql/migrate_lock.sql), taken without printing a row.
    let lock = "DO $lock$ BEGIN PERFORM pg_advisory_xact_lock(\
                hashtextextended('job.schema_migrations', 0)); END $lock$;";
    let mut out = String::from(
        "\\set ON_ERROR_STOP on\n\
         -- The `job` schema, generated from job-postgres/migrations/ by\n\
         -- job_postgres::schema_script(): do not edit; change a migration and regenerate\n\
         -- (JOB_SCHEMA_OVERWRITE=1 cargo test -p job-postgres --lib).\n\
         --\n\
         -- Install or upgrade: psql -v ON_ERROR_STOP=1 -f schema.sql (as the role that is to\n\
         -- own the schema). Each migration not yet recorded in job.schema_migrations is applied\n\
         -- in a transaction of its own and recorded, as the Rust migrator does.\n\
         --\n\
         -- psql stops at the first error (the first line sets ON_ERROR_STOP whatever psql was\n\
         -- told): a migration that failed is not followed by later ones. And each migration\n\
         -- refuses to apply when one before it is not recorded or one after it is, as the Rust\n\
         -- migrator does, so a client that goes on past an error applies nothing out of order.\n\n",
    );
    // What `migrate` refuses first (`Error::Encoding`), refused here too.
    out.push_str(
        "DO $encoding$\nBEGIN\n    \
         IF (SELECT pg_encoding_to_char(encoding) FROM pg_catalog.pg_database\n        \
         WHERE datname = current_database()) = 'SQL_ASCII' THEN\n        \
         RAISE EXCEPTION 'database % has encoding SQL_ASCII, which stores text without \
         checking it: job needs an encoding PostgreSQL checks, such as UTF8', \
         current_database();\n    \
         END IF;\nEND\n$encoding$;\n",
    );
    out.push_str(&format!("BEGIN;\n{lock}\n"));
    out.push_str(sql::MIGRATE_BOOTSTRAP);
    out.push_str("COMMIT;\n");
    for (i, m) in MIGRATIONS.iter().enumerate() {
        let tag = format!("$job_migration_{:04}$", m.version);
        assert!(
            !m.sql.contains(&tag),
            "migration {} contains {tag}",
            m.version
        );
        // What `out_of_order` refuses: a migration before this one not recorded (the first
        // needs none), or one after it recorded.
        let before: Vec<String> = MIGRATIONS[..i]
            .iter()
            .map(|m| m.version.to_string())
            .collect();
        let earlier = if before.is_empty() {
            String::new()
        } else {
            format!(
                "SELECT min(v) INTO missing FROM pg_catalog.unnest('{{{before}}}'::integer[]) v\n            \
                 WHERE NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = v);\n        \
                 IF missing IS NOT NULL THEN\n            \
                 RAISE EXCEPTION 'job migration {version} `{name}` was not applied: migration %, \
                 which comes before it, is not recorded in job.schema_migrations (migrations \
                 apply in order, each after the one before)', missing;\n        \
                 END IF;\n        ",
                before = before.join(","),
                version = m.version,
                name = m.name,
            )
        };
        out.push_str(&format!(
            "\n-- {version:04} {name}\nBEGIN;\n{lock}\nDO $apply$\nDECLARE\n    \
             missing integer;\n    later integer;\nBEGIN\n    \
             IF NOT EXISTS (SELECT 1 FROM job.schema_migrations WHERE version = {version}) THEN\n        \
             {earlier}\
             SELECT min(version) INTO later FROM job.schema_migrations WHERE version > {version};\n        \
             IF later IS NOT NULL THEN\n            \
             RAISE EXCEPTION 'job migration {version} `{name}` was not applied: it is not \
             recorded in job.schema_migrations, but migration %, which comes after it, is: the \
             schema was migrated out of order, and {version} applied now could undo what later \
             migrations changed. Apply what migration {version} lacks by hand and record it, or \
             restore the database from a backup', later;\n        \
             END IF;\n\
        EXECUTE {tag}\n{sql}{tag};\n        \
             INSERT INTO job.schema_migrations (version, name) VALUES ({version}, '{name}');\n    \
             ELSIF NOT EXISTS (SELECT 1 FROM job.schema_migrations\n                      \
             WHERE version = {version} AND name = '{name}') THEN\n        \
             RAISE EXCEPTION 'job migration {version} is recorded in job.schema_migrations as \
             `%`, but this script''s migration {version} is `{name}`: the database was migrated \
             by a build whose migrations differ from this one''s', (SELECT name FROM \
             job.schema_migrations WHERE version = {version});\n    \
             END IF;\nEND\n$apply$;\nCOMMIT;\n",
            version = m.version,
            name = m.name,
            sql = m.sql,
        ));
    }
    out
}

/// How long a migration's session may wait for this process before [`migrate`] gives up on
/// it: 30 seconds. A migration's statements run as long as they take (the server working on
/// one, or waiting for a lock, is not waiting for the process); between them the session
/// waits for the process's next statement for microseconds. A session that has waited longer
/// had its answer lost on the way (a dropped connection, a proxy), or its process was stalled
/// that long; see [`migrate_with_idle_limit`].
pub const MIGRATE_IDLE_LIMIT: Duration = Duration::from_secs(30);

/// The shortest idle limit taken by [`migrate_with_idle_limit`]: a shorter one is raised to
/// it, since the watch looks only every half second.
pub const MIN_MIGRATE_IDLE_LIMIT: Duration = Duration::from_secs(1);

/// The longest idle limit taken by [`migrate_with_idle_limit`], 24 days: a longer one is
/// lowered to it, since the session's `idle_in_transaction_session_timeout`, a second past the
/// limit, is at most 2,147,483,647 ms (24.8 days).
pub const MAX_MIGRATE_IDLE_LIMIT: Duration = Duration::from_secs(24 * 24 * 60 * 60);

/// Brings the `job` schema up to date. Safe to run from many processes at once (an advisory
/// lock serializes them) and again and again (a second run only reads). Each migration runs in
/// its own transaction, recorded with it. Gives up after [`MIGRATE_IDLE_LIMIT`] on an answer
/// lost on the way, and when the database stops answering: see [`migrate_with_idle_limit`].
pub async fn migrate(pool: &PgPool) -> Result<(), Error> {
    migrate_with_idle_limit(pool, MIGRATE_IDLE_LIMIT).await
}

/// [`migrate`], giving up once the migration's session has waited for this process for
/// longer than `idle_limit` ([`MIN_MIGRATE_IDLE_LIMIT`] to [`MAX_MIGRATE_IDLE_LIMIT`]; one
/// outside is brought to the nearer bound).
///
/// The migration runs on one connection taken from `pool` (and closed afterwards), tagged
/// `job migrate <pid>.<time>.<n>` in `application_name`, with the server's
/// `idle_in_transaction_session_timeout` a second past `idle_limit`. A second connection,
/// opened with the pool's options before anything is migrated, looks at that session in
/// `pg_stat_activity` every 500 ms. While the server works on a statement of the migration
/// (one may run for minutes on a large table, or wait for a lock) the migration waits as long
/// as that takes. It gives up with [`Error::MigrateGaveUp`], saying which
/// ([`MigrationGaveUp`](crate::MigrationGaveUp)), when the session has had nothing to do for this process for
/// longer than `idle_limit` (its answer was lost on the way: the server is asked to end the
/// session, so no lock of the migration stays held), when the session has ended on the server,
/// or when the second connection has had no answer, or only errors, for 10 s (or `idle_limit`,
/// when longer). Before 2026-12-07 it waited for ever on such a connection: the kernel calls
/// a silent connection dead after a quarter of an hour or more, and never one with nothing
/// unacknowledged. Migrating again after any of these applies only what the database lacks.
/// A second connection the server refuses is [`Error::MigrateWatch`], before anything is
/// migrated.
///
/// What the watch cannot see it logs once at WARN and goes on: with `track_activities` off or
/// a role that may not read the session's activity, or through a connection pooler that
/// hides the session, only a database that stops answering is noticed; and a statement the
/// server works on for ever (a commit waiting for a synchronous standby that never answers)
/// is waited for. Migrate against the server, not through a pooler in transaction mode.
pub async fn migrate_with_idle_limit(pool: &PgPool, idle_limit: Duration) -> Result<(), Error> {
    let idle_limit = idle_limit.clamp(MIN_MIGRATE_IDLE_LIMIT, MAX_MIGRATE_IDLE_LIMIT);
    let watch = migrate_watch::open(&pool.connect_options(), idle_limit).await?;
    // Out of the pool for good: its session's settings are the migration's, and it is closed
    // at the end instead of going back.
    let mut conn = pool.acquire().await.map_err(Error::Connect)?.detach();
    let tag = migrate_watch::tag();
    // One round trip, bounded as the watch's looks are: the watch cannot tell this session
    // from another until it is tagged, so an answer lost here is given up on by this bound.
    let tagged = sqlx::query(
        "SELECT pg_catalog.set_config('application_name', $1, false), \
                pg_catalog.set_config('idle_in_transaction_session_timeout', $2, false)",
    )
    .bind(&tag)
    .bind(format!(
        "{}ms",
        idle_limit
            .saturating_add(Duration::from_secs(1))
            .as_millis()
    ))
    .execute(&mut conn);
    let waited = migrate_watch::silent_after(idle_limit);
    match tokio::time::timeout(waited, tagged).await {
        Ok(tagged) => tagged.map_err(Error::query("migrate_session")).map(drop)?,
        Err(_) => {
            return Err(Error::MigrateGaveUp(
                migrate_watch::MigrationGaveUp::Silent { waited },
            ))
        }
    }
    let migrated = migrate_watch::migration(migrate_on(&mut conn), watch, &tag, idle_limit).await;
    if !matches!(migrated, Err(Error::MigrateGaveUp(_))) {
        // The settings given back, then a goodbye, each bounded (the session is the server's to
        // end otherwise), after a migration that went through or failed on its own (its
        // transaction rolled back): a connection pooler in between keeps its server session
        // for others. A session given up on is the server's to end.
        for reset in [
            "RESET application_name",
            "RESET idle_in_transaction_session_timeout",
        ] {
            let reset = sqlx::query(reset).execute(&mut conn);
            let _ = tokio::time::timeout(crate::POOL_CHECK_TIMEOUT, reset).await;
        }
        let _ = tokio::time::timeout(crate::POOL_CHECK_TIMEOUT, conn.close()).await;
    }
    migrated
}

/// The migration itself, on `conn`.
async fn migrate_on(conn: &mut PgConnection) -> Result<(), Error> {
    // SQL_ASCII is the one server encoding under which PostgreSQL stores any bytes as text
    // (every other one is checked, and converted to the client's UTF8 on the way out): a row
    // written raw there could hold text that no worker reads back, stalling its claims.
    let (encoding, database): (String, String) = sqlx::query_as(sql::MIGRATE_ENCODING)
        .fetch_one(&mut *conn)
        .await
        .map_err(Error::query("migrate_encoding"))?;
    if encoding == "SQL_ASCII" {
        return Err(Error::Encoding { database });
    }
    for migration in pending(conn).await? {
        apply(conn, migration).await?;
    }
    Ok(())
}

/// Which of this build's migrations the database has not recorded (see
/// [`Store::schema_lag`](job_core::Store::schema_lag)); read only, on any role that may read
/// `job.schema_migrations` (the worker's since migration 38). A role that may not is answered
/// no lag, with a WARN: it cannot tell, and must not be held for ever.
pub(crate) async fn schema_lag(pool: &PgPool) -> Result<Option<job_core::SchemaLag>, Error> {
    let installed: bool = sqlx::query_scalar(sql::MIGRATE_INSTALLED)
        .fetch_one(pool)
        .await
        .map_err(Error::query("migrate_installed"))?;
    if !installed {
        return Ok(lag(&[]));
    }
    match sqlx::query_as(sql::MIGRATE_RECORDED).fetch_all(pool).await {
        Ok(recorded) => Ok(lag(&recorded)),
        // A role granted without migration 38's SELECT cannot tell: said, and not held.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("42501") => {
            tracing::warn!(
                error = %e,
                "this role may not read job.schema_migrations (granted before migration 38?): \
                 the worker starts without knowing whether the database has its migrations"
            );
            Ok(None)
        }
        Err(e) => Err(Error::query("migrate_recorded")(e)),
    }
}

/// This build's migrations missing from `recorded`, as a lag; `None` when none is.
fn lag(recorded: &[(i32, String)]) -> Option<job_core::SchemaLag> {
    let recorded: Vec<u32> = recorded.iter().map(|(v, _)| v.unsigned_abs()).collect();
    job_core::SchemaLag::between(
        MIGRATIONS
            .iter()
            .map(|m| (m.version.unsigned_abs(), m.name)),
        &recorded,
    )
}

/// Creates the bookkeeping table when missing and returns the migrations not yet applied.
async fn pending(conn: &mut PgConnection) -> Result<Vec<&'static Migration>, Error> {
    let mut tx = conn.begin().await.map_err(Error::Connect)?;
    sqlx::query(sql::MIGRATE_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(Error::query("migrate_lock"))?;
    let installed: bool = sqlx::query_scalar(sql::MIGRATE_INSTALLED)
        .fetch_one(&mut *tx)
        .await
        .map_err(Error::query("migrate_installed"))?;
    if !installed {
        tx.execute(sqlx::raw_sql(sql::MIGRATE_BOOTSTRAP))
            .await
            .map_err(Error::query("migrate_bootstrap"))?;
    }
    let recorded: Vec<(i32, String)> = sqlx::query_as(sql::MIGRATE_RECORDED)
        .fetch_all(&mut *tx)
        .await
        .map_err(Error::query("migrate_recorded"))?;
    tx.commit().await.map_err(Error::query("commit"))?;
    check_recorded(&recorded)?;
    Ok(MIGRATIONS
        .iter()
        .filter(|m| !recorded.iter().any(|(v, _)| *v == m.version))
        .collect())
}

/// Refuses a database whose recorded migrations are not this build's: one of this build's
/// versions recorded under another name (a migration renumbered or replaced: its version was
/// all that was compared, and the one this build has was never applied). Versions this build
/// does not know (a newer release migrated the database) are said at WARN: this build's
/// statements still run on a schema its migrations are part of, which rolling deploys and
/// rollbacks rely on.
fn check_recorded(recorded: &[(i32, String)]) -> Result<(), Error> {
    for (version, name) in recorded {
        match MIGRATIONS.iter().find(|m| m.version == *version) {
            Some(m) if m.name != name => {
                return Err(Error::MigrationRenamed {
                    version: *version,
                    recorded: name.clone(),
                    name: m.name,
                })
            }
            Some(_) => {}
            None => tracing::warn!(
                version,
                name = %name,
                known = MIGRATIONS.last().map_or(0, |m| m.version),
                "the job schema has a migration this build does not know: a newer release \
                 migrated it; this build runs on it, but not with what the newer one added"
            ),
        }
    }
    Ok(())
}

/// Applies one migration in its own transaction, unless a concurrent migrator got there first.
async fn apply(conn: &mut PgConnection, migration: &'static Migration) -> Result<(), Error> {
    let failed = |source| Error::Migration {
        version: migration.version,
        name: migration.name,
        source,
    };
    let mut tx = conn.begin().await.map_err(failed)?;
    sqlx::query(sql::MIGRATE_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
    let applied: Vec<i32> = sqlx::query_scalar(sql::MIGRATE_APPLIED)
        .fetch_all(&mut *tx)
        .await
        .map_err(failed)?;
    if applied.contains(&migration.version) {
        return Ok(());
    }
    if let Some(refused) = out_of_order(migration, &applied) {
        return Err(refused);
    }
    tx.execute(sqlx::raw_sql(migration.sql))
        .await
        .map_err(failed)?;
    sqlx::query(sql::MIGRATE_RECORD)
        .bind(migration.version)
        .bind(migration.name)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
    tx.commit().await.map_err(failed)?;
    tracing::info!(
        version = migration.version,
        name = migration.name,
        "applied job migration"
    );
    Ok(())
}

/// Why `migration`, not recorded, may not be applied to a database that has recorded
/// `applied`: a migration before it is not recorded, or one after it is. Applied out of order,
/// a migration runs on a schema it was not written for, and an older one undoes what newer
/// ones changed (an older function body over a newer one).
fn out_of_order(migration: &'static Migration, applied: &[i32]) -> Option<Error> {
    let missing = MIGRATIONS
        .iter()
        .take_while(|m| m.version < migration.version)
        .find(|m| !applied.contains(&m.version));
    if let Some(missing) = missing {
        return Some(Error::MigrationMissing {
            version: migration.version,
            name: migration.name,
            missing: missing.version,
            missing_name: missing.name,
        });
    }
    let later = applied
        .iter()
        .copied()
        .filter(|&v| v > migration.version)
        .min();
    later.map(|later| Error::MigrationOutOfOrder {
        version: migration.version,
        name: migration.name,
        later,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_script_is_generated_from_the_migrations() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema.sql");
        if std::env::var_os("JOB_SCHEMA_OVERWRITE").is_some() {
            std::fs::write(&path, script()).unwrap();
        }
        let file = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            file == script(),
            "{} is not the script of the migrations: regenerate it with \
             `JOB_SCHEMA_OVERWRITE=1 cargo test -p job-postgres --lib` and commit it",
            path.display()
        );
    }

    #[test]
    fn a_migration_applies_after_every_one_before_it_and_before_any_after_it() {
        let third = &MIGRATIONS[2];
        let versions =
            |n: usize| -> Vec<i32> { MIGRATIONS[..n].iter().map(|m| m.version).collect() };
        assert!(out_of_order(&MIGRATIONS[0], &[]).is_none());
        assert!(out_of_order(third, &versions(2)).is_none());
        let missing = MIGRATIONS[1];
        match out_of_order(third, &[MIGRATIONS[0].version]) {
            Some(e @ Error::MigrationMissing { .. }) => {
                let message = e.to_string();
                let expected = format!(
                    "job migration {} `{}` was not applied: migration {} `{}`, which comes \
                     before it, is not recorded",
                    third.version, third.name, missing.version, missing.name
                );
                assert!(message.contains(&expected), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let later = MIGRATIONS[3].version;
        let mut applied = versions(2);
        applied.push(later);
        match out_of_order(third, &applied) {
            Some(e @ Error::MigrationOutOfOrder { .. }) => {
                let message = e.to_string();
                let expected = format!(
                    "job migration {} `{}` was not applied: it is not recorded in \
                     job.schema_migrations, but migration {later}, which comes after it, is",
                    third.version, third.name
                );
                assert!(message.contains(&expected), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // The first needs none before it, and refuses any after it.
        assert!(matches!(
            out_of_order(&MIGRATIONS[0], &[later]),
            Some(Error::MigrationOutOfOrder { later: l, .. }) if l == later
        ));
    }

    #[test]
    fn a_lag_names_the_first_migration_missing_and_counts_the_rest() {
        let all: Vec<(i32, String)> = MIGRATIONS
            .iter()
            .map(|m| (m.version, m.name.to_owned()))
            .collect();
        assert_eq!(lag(&all), None);
        let last = MIGRATIONS.last().unwrap();
        let behind = lag(&all[..all.len() - 2]).unwrap();
        let before = &MIGRATIONS[MIGRATIONS.len() - 2];
        assert_eq!(behind.first_missing, before.version.unsigned_abs());
        assert_eq!(behind.missing, 2);
        assert_eq!(behind.recorded, (last.version - 2).unsigned_abs());
        assert!(
            behind.to_string().starts_with(&format!(
                "the job schema lacks migration {} `{}` and 1 after it (latest recorded: {})",
                before.version,
                before.name,
                last.version - 2
            )),
            "{behind}"
        );
        let none = lag(&[]).unwrap();
        assert_eq!(
            (none.first_missing, none.missing, none.recorded),
            (1, MIGRATIONS.len(), 0)
        );
    }

    #[test]
    fn the_schema_script_stops_at_its_first_error_in_psql() {
        assert!(script().starts_with("\\set ON_ERROR_STOP on\n"));
    }

    #[test]
    fn migrations_are_numbered_from_one_without_gaps_and_match_their_files() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        let listed: Vec<String> = MIGRATIONS
            .iter()
            .map(|m| format!("{:04}_{}.sql", m.version, m.name))
            .collect();
        assert_eq!(listed, files);
        for (m, expected) in MIGRATIONS.iter().zip(1..) {
            assert_eq!(
                m.version, expected,
                "migrations are numbered from 1 without gaps"
            );
        }
    }
}
