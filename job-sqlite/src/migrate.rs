//! Embedded, numbered, append-only migrations, each applied in an immediate transaction that
//! also records it, so concurrent processes opening one file apply each exactly once.

use sqlx::SqlitePool;

use crate::error::Error;
use crate::sql;

/// One schema migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Its number; applied in ascending order.
    pub version: i64,
    /// Its name.
    pub name: &'static str,
    /// Its SQL.
    pub sql: &'static str,
}

/// Every migration, in order.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../migrations/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "results",
        sql: include_str!("../migrations/0002_results.sql"),
    },
    Migration {
        version: 3,
        name: "compensation",
        sql: include_str!("../migrations/0003_compensation.sql"),
    },
    Migration {
        version: 4,
        name: "flow_control",
        sql: include_str!("../migrations/0004_flow_control.sql"),
    },
    Migration {
        version: 5,
        name: "payload_limit",
        sql: include_str!("../migrations/0005_payload_limit.sql"),
    },
    Migration {
        version: 6,
        name: "counters_and_times",
        sql: include_str!("../migrations/0006_counters_and_times.sql"),
    },
    Migration {
        version: 7,
        name: "names",
        sql: include_str!("../migrations/0007_names.sql"),
    },
    Migration {
        version: 8,
        name: "error_history",
        sql: include_str!("../migrations/0008_error_history.sql"),
    },
    Migration {
        version: 9,
        name: "lease_token",
        sql: include_str!("../migrations/0009_lease_token.sql"),
    },
    Migration {
        version: 10,
        name: "running_scope",
        sql: include_str!("../migrations/0010_running_scope.sql"),
    },
    Migration {
        version: 11,
        name: "prune_by_state",
        sql: include_str!("../migrations/0011_prune_by_state.sql"),
    },
    Migration {
        version: 12,
        name: "deep_payloads",
        sql: include_str!("../migrations/0012_deep_payloads.sql"),
    },
    Migration {
        version: 13,
        name: "settings_row",
        sql: include_str!("../migrations/0013_settings_row.sql"),
    },
    Migration {
        version: 14,
        name: "deadline_door",
        sql: include_str!("../migrations/0014_deadline_door.sql"),
    },
    Migration {
        version: 15,
        name: "step_bounds",
        sql: include_str!("../migrations/0015_step_bounds.sql"),
    },
    Migration {
        version: 16,
        name: "compensating_options",
        sql: include_str!("../migrations/0016_compensating_options.sql"),
    },
    Migration {
        version: 17,
        name: "last_attempt_start",
        sql: include_str!("../migrations/0017_last_attempt_start.sql"),
    },
    Migration {
        version: 18,
        name: "interruptions",
        sql: include_str!("../migrations/0018_interruptions.sql"),
    },
    Migration {
        version: 19,
        name: "claim_by_kind",
        sql: include_str!("../migrations/0019_claim_by_kind.sql"),
    },
    Migration {
        version: 20,
        name: "claim_by_version",
        sql: include_str!("../migrations/0020_claim_by_version.sql"),
    },
    Migration {
        version: 21,
        name: "step_totals",
        sql: include_str!("../migrations/0021_step_totals.sql"),
    },
    Migration {
        version: 22,
        name: "pause_names",
        sql: include_str!("../migrations/0022_pause_names.sql"),
    },
];

/// The migrations the file has recorded, with their names; none before the books exist.
async fn recorded(pool: &SqlitePool) -> Result<Vec<(i64, String)>, Error> {
    let books: bool = sqlx::query_scalar(sql::MIGRATE_BOOKS_MADE)
        .fetch_one(pool)
        .await
        .map_err(Error::query("migrate_books_made"))?;
    if !books {
        return Ok(Vec::new());
    }
    sqlx::query_as(sql::MIGRATE_RECORDED)
        .fetch_all(pool)
        .await
        .map_err(Error::query("migrate_recorded"))
}

/// Which of this build's migrations the file has not recorded (see
/// [`Store::schema_lag`](job_core::Store::schema_lag)): a store opened with
/// [`SqliteStore::connect_with`](crate::SqliteStore::connect_with), which does not migrate.
pub(crate) async fn schema_lag(pool: &SqlitePool) -> Result<Option<job_core::SchemaLag>, Error> {
    let recorded = recorded(pool).await?;
    let recorded: Vec<u32> = recorded
        .iter()
        .filter_map(|(v, _)| u32::try_from(*v).ok())
        .collect();
    Ok(job_core::SchemaLag::between(
        MIGRATIONS
            .iter()
            .filter_map(|m| Some((u32::try_from(m.version).ok()?, m.name))),
        &recorded,
    ))
}

/// Brings the schema in `pool`'s database up to date: applies every migration not recorded
/// in `job_schema_migrations`, in order, each in its own immediate transaction (which waits
/// for another process migrating the same file, then finds its work done). A file already up
/// to date is only read: it does not wait for the file's write lock, which another process
/// may hold for long (a bulk enqueue), so a worker restarting then still opens it. A
/// migration recorded under another name than this build's is refused
/// ([`Error::MigrationRenamed`]).
pub async fn migrate(pool: &SqlitePool) -> Result<(), Error> {
    let recorded = recorded(pool).await?;
    for (version, name) in &recorded {
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
                "the job schema of this file has a migration this build does not know: a newer \
                 release migrated it; this build runs on it, but not with what the newer one \
                 added"
            ),
        }
    }
    let pending: Vec<&Migration> = MIGRATIONS
        .iter()
        .filter(|m| !recorded.iter().any(|(v, _)| *v == m.version))
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    sqlx::query(sql::MIGRATE_BOOKS)
        .execute(pool)
        .await
        .map_err(Error::query("migrate_books"))?;
    for migration in pending {
        let mut tx = pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(Error::query("migrate_begin"))?;
        let applied: Option<i64> = sqlx::query_scalar(sql::MIGRATE_APPLIED)
            .bind(migration.version)
            .fetch_optional(&mut *tx)
            .await
            .map_err(Error::query("migrate_applied"))?;
        if applied.is_some() {
            continue;
        }
        let failed = |source| Error::Migration {
            version: migration.version,
            name: migration.name,
            source,
        };
        // Unprepared and without arguments: every statement of the file runs.
        sqlx::Executor::execute(&mut *tx, migration.sql)
            .await
            .map_err(failed)?;
        sqlx::query(sql::MIGRATE_RECORD)
            .bind(migration.version)
            .bind(migration.name)
            .execute(&mut *tx)
            .await
            .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
    }
    Ok(())
}
