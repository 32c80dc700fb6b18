//! The errors of the PostgreSQL store.

/// What went wrong in `job-postgres`. Store methods return it inside a
/// [`job_core::StoreError`]; downcast [`job_core::StoreError::inner`] to read it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Could not open a connection pool to the database.
    #[error("could not connect to postgres: {0}")]
    Connect(#[source] sqlx::Error),
    /// A statement failed (connection lost, constraint violated, ...).
    #[error("statement `{statement}` failed: {source}{}", hint(statement, source))]
    Query {
        /// The statement's name, as its file under `src/sql/`.
        statement: &'static str,
        /// sqlx's error.
        #[source]
        source: sqlx::Error,
    },
    /// A migration could not be applied; its transaction was rolled back.
    #[error("migration {version} `{name}` failed: {source}")]
    Migration {
        /// The migration's number.
        version: i32,
        /// The migration's name.
        name: &'static str,
        /// sqlx's error.
        #[source]
        source: sqlx::Error,
    },
    /// A migration was not applied because one before it is not recorded in
    /// `job.schema_migrations`: migrations apply in order, each after the one before. Nothing
    /// was applied.
    #[error(
        "job migration {version} `{name}` was not applied: migration {missing} \
         `{missing_name}`, which comes before it, is not recorded in job.schema_migrations \
         (migrations apply in order, each after the one before)"
    )]
    MigrationMissing {
        /// The migration refused.
        version: i32,
        /// Its name.
        name: &'static str,
        /// The first migration before it that is not recorded.
        missing: i32,
        /// That one's name.
        missing_name: &'static str,
    },
    /// A migration was not applied because one after it is recorded already: the database
    /// was migrated out of order (a run of `schema.sql` that went on past a failed migration),
    /// and the older migration applied now could undo what the later ones changed. Nothing
    /// was applied.
    #[error(
        "job migration {version} `{name}` was not applied: it is not recorded in \
         job.schema_migrations, but migration {later}, which comes after it, is: the schema was \
         migrated out of order, and {version} applied now could undo what later migrations \
         changed. Apply what migration {version} lacks by hand and record it, or restore the \
         database from a backup"
    )]
    MigrationOutOfOrder {
        /// The migration refused.
        version: i32,
        /// Its name.
        name: &'static str,
        /// The first migration after it that is recorded.
        later: i32,
    },
    /// A migration this build has is recorded in `job.schema_migrations` under another name:
    /// the database was migrated by a build whose migrations differ from this one's (one
    /// renumbered or replaced), so the schema is not the one this build's statements were
    /// written for. Nothing was applied.
    #[error(
        "job migration {version} is recorded in job.schema_migrations as `{recorded}`, but this \
         build's migration {version} is `{name}`: the database was migrated by a build whose \
         migrations differ from this one's, and its schema may lack what this build needs. \
         Nothing was applied: restore the database from a backup, or apply migration \
         {version} `{name}` by hand and record it under that name"
    )]
    MigrationRenamed {
        /// The migration's version.
        version: i32,
        /// The name recorded for it.
        recorded: String,
        /// This build's name for it.
        name: &'static str,
    },
    /// A guarded write found the lease it was made under gone (the job was rescued, released
    /// or finalized elsewhere): it wrote nothing.
    #[error("the lease on job {id} was lost: nothing was written")]
    LeaseLost {
        /// The job's id.
        id: i64,
    },
    /// A tenant-scoped handle ([`TenantAdmin`](crate::TenantAdmin)) was asked for an action
    /// on whole queues or kinds, which would reach other tenants' jobs.
    #[error("`{action}` acts on every tenant's jobs; a handle scoped to tenant `{tenant}` cannot")]
    TenantScope {
        /// The action refused (`pause`, `resume`).
        action: &'static str,
        /// The handle's tenant.
        tenant: String,
    },
    /// The job tables need a VACUUM that autovacuum will not run (it is off), and this role
    /// may not run it: only the tables' owner (or the database's) may. Nothing was vacuumed.
    #[error(
        "job.jobs needs a VACUUM (autovacuum is off) that role `{role}` may not run: only its \
         owner `{owner}` may. Run `VACUUM (ANALYZE) job.jobs, job.steps, job.step_totals, \
         job.dependencies, job.ordering_wake, job.rate_windows, job.rate_cursors, job.leaders` \
         as `{owner}` regularly, turn autovacuum on, or run the workers as `{owner}`"
    )]
    VacuumNotOwner {
        /// The role the store connects as.
        role: String,
        /// The tables' owner.
        owner: String,
    },
    /// The database stores text unchecked (`SQL_ASCII`), so a row written by another client
    /// could hold bytes that are not UTF-8, which no worker can read back. Nothing was
    /// migrated.
    #[error(
        "database `{database}` has encoding SQL_ASCII, which stores text without checking it: \
         job needs an encoding PostgreSQL checks, such as UTF8 (CREATE DATABASE … ENCODING \
         'UTF8' TEMPLATE template0)"
    )]
    Encoding {
        /// The database's name.
        database: String,
    },
    /// The migration was given up: the database stopped answering, or its answer was lost on
    /// the way, while the migration's session waited for this process (see
    /// [`PgStore::migrate`](crate::PgStore::migrate)). The migration it was in was rolled back
    /// unless its commit had been sent; those before it stay applied.
    #[error(
        "the job migration gave up: {0}. The migration it was in was rolled back unless its \
         commit had been sent: migrate again, which applies only the migrations the database \
         lacks"
    )]
    MigrateGaveUp(crate::migrate_watch::MigrationGaveUp),
    /// The second connection, which watches the migration's session, could not be opened (a
    /// server at `max_connections`, a role's connection limit): nothing was migrated.
    #[error(
        "the job migration cannot open its second connection, which watches the migration's \
         session, so nothing was migrated: {0}"
    )]
    MigrateWatch(String),
    /// A stored job row could not be read back into its Rust type.
    #[error("job {id} has an undecodable `{column}`: {reason}")]
    Decode {
        /// The job's id.
        id: i64,
        /// The column.
        column: &'static str,
        /// Why it does not decode.
        reason: String,
    },
}

/// What a statement failing for an object it names being missing (3F000 undefined schema,
/// 42883 undefined function, 42P01 undefined table, 42703 undefined column) most often means:
/// a database never migrated, or whose `job` schema is older than this build (a deploy that
/// runs the new workers before the migration); and where the grants a role lacks (42501) are
/// listed.
fn hint(statement: &str, source: &sqlx::Error) -> &'static str {
    match source {
        sqlx::Error::Database(db)
            if statement == "complete_in" && db.code().as_deref() == Some("40001") =>
        {
            " (complete_in needs a READ COMMITTED transaction, PostgreSQL's default: under \
             REPEATABLE READ or SERIALIZABLE, the lease the worker renewed on the job's row \
             after the transaction's first statement is a concurrent update)"
        }
        sqlx::Error::Database(db) if db.code().as_deref() == Some("3F000") => {
            " (the database has no job schema: it was never migrated. Apply the migrations: \
             `PgStore::migrate`, `job migrate`, or `psql -f schema.sql`)"
        }
        sqlx::Error::Database(db)
            if matches!(db.code().as_deref(), Some("42883" | "42P01" | "42703")) =>
        {
            " (is the database's job schema older than this build, or not installed? Apply \
             its migrations: `PgStore::migrate`, `job migrate`, or `psql -f schema.sql`)"
        }
        // insufficient_privilege: a worker or producer role without the grants a later
        // migration added, or a role given the wrong block of grants.
        sqlx::Error::Database(db) if db.code().as_deref() == Some("42501") => {
            " (the role this store connects as lacks a privilege on the job schema: grant it \
             what its part needs, as the README's \"Roles and privileges\" lists for the \
             owner, a worker and an operator)"
        }
        _ => "",
    }
}

impl Error {
    pub(crate) fn query(statement: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
        move |source| Error::Query { statement, source }
    }
}

impl Error {
    /// Whether the database refused what a statement was given, so that the same statement
    /// with the same input fails again: a data exception (an invalid byte sequence such as a
    /// NUL, a value out of range), an integrity or limit violation, an exception raised by a
    /// trigger, any error of a class not known to pass. A refusal makes callers give an
    /// outcome up (store it without its error text, then as a dead letter) within a fraction
    /// of a second, so every class that says something about the server, the session or the
    /// deploy rather than the input passes and is tried again: a lost connection, a deadlock,
    /// a shutdown, a shortage, a lock not available, and also a server read-only after a
    /// failover (25006), a session ended by the DBA's timeouts (25P03), a login refused while
    /// passwords rotate (28xxx), a database missing (3D000), a privilege revoked or a function
    /// missing during a deploy (42xxx), a snapshot too old (72000).
    pub fn is_refusal(&self) -> bool {
        let Error::Query { source, .. } = self else {
            return false;
        };
        match source {
            sqlx::Error::Encode(_) => true,
            // A full NOTIFY queue (a listener left in an open transaction holds it) refuses
            // every transaction that notifies, whatever it writes: the server's state, which
            // passes once the listener moves on. As a refusal, the completer made a
            // completion storable, then a dead letter, then left it to the rescuer.
            sqlx::Error::Database(db) if full_notify_queue(db.code().as_deref(), db.message()) => {
                false
            }
            sqlx::Error::Database(db) => db.code().is_some_and(|code| refused(&code)),
            _ => false,
        }
    }
}

/// SQLSTATE classes (and one code) of errors that pass: connection exception (08), invalid
/// transaction state (25), invalid SQL statement name (26: a prepared statement gone, behind a
/// pooler), invalid authorization (28), invalid catalog name (3D), invalid schema name (3F: a
/// schema missing during a deploy), transaction rollback (40), syntax error or access rule
/// violation (42), insufficient resources (53), object not in prerequisite state (55),
/// operator intervention (57), system error (58), snapshot too old (72), internal error (XX),
/// and 0A000 (among others "cached plan must not change result type", after a migration).
const PASSING_CLASSES: &[&str] = &[
    "08", "25", "26", "28", "3D", "3F", "40", "42", "53", "55", "57", "58", "72", "XX", "0A000",
];

/// Whether an error is PostgreSQL's "too many notifications in the NOTIFY queue" (54000, a
/// program limit like a too-large row, told apart by its message).
fn full_notify_queue(code: Option<&str>, message: &str) -> bool {
    code == Some("54000") && message.starts_with("too many notifications in the NOTIFY queue")
}

/// Whether SQLSTATE `code` refuses the input: of no [`PASSING_CLASSES`] class.
fn refused(code: &str) -> bool {
    !PASSING_CLASSES.iter().any(|c| code.starts_with(c))
}

impl From<Error> for job_core::StoreError {
    fn from(error: Error) -> Self {
        if error.is_refusal() {
            job_core::StoreError::refused(error)
        } else {
            job_core::StoreError::new(error)
        }
    }
}

impl From<Error> for job_core::EnqueueError {
    fn from(error: Error) -> Self {
        job_core::EnqueueError::Store(error.into())
    }
}

/// Whether `error` is the server's `unique_violation` (23505).
pub(crate) fn is_unique_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}

/// Whether `error` is the server's `deadlock_detected` (40P01): this side was chosen to fail,
/// and the statement can run again.
pub(crate) fn is_deadlock(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some("40P01"))
}

#[cfg(test)]
mod tests {
    use super::{full_notify_queue, refused};

    #[test]
    fn a_full_notify_queue_passes_and_other_program_limits_refuse() {
        assert!(full_notify_queue(
            Some("54000"),
            "too many notifications in the NOTIFY queue"
        ));
        assert!(!full_notify_queue(
            Some("54000"),
            "index row size 3000 exceeds btree version 4 maximum 2704"
        ));
        assert!(!full_notify_queue(
            Some("55000"),
            "too many notifications in the NOTIFY queue"
        ));
    }

    #[test]
    fn only_errors_about_the_input_refuse_it() {
        // The input: a NUL byte, a value out of range, a check, an index row too large, a
        // trigger's refusal, and any class not known to pass (an application trigger's
        // subquery returning two rows, a PL/Python error, a function without RETURN).
        for code in [
            "22021", "22003", "23514", "23505", "54000", "P0001", "21000", "38000", "2F005",
        ] {
            assert!(refused(code), "{code}");
        }
        // The server, the session or the deploy: read-only after a failover, idle-in-
        // transaction timeout, idle session timeout, a cancelled statement, a lost
        // connection, a deadlock, too many connections, a login refused, a database missing,
        // a privilege revoked, a function not yet migrated, a snapshot too old, an internal
        // error.
        for code in [
            "25006", "25P03", "57P05", "57014", "08006", "40P01", "53300", "28P01", "3D000",
            "42501", "42883", "72000", "XX000", "26000", "3F000", "0A000",
        ] {
            assert!(!refused(code), "{code}");
        }
    }
}
