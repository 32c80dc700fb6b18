//! The errors of the SQLite store.

/// What went wrong in `job-sqlite`. Store methods return it inside a
/// [`job_core::StoreError`]; downcast [`job_core::StoreError::inner`] to read it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Could not open the database file.
    #[error("could not open sqlite database: {0}")]
    Connect(#[source] sqlx::Error),
    /// Opening or migrating the database file at `path` failed (a missing directory, a file
    /// that is not a database, a read-only file, ...): the error names the file, which
    /// SQLite's own words ("unable to open database file") do not.
    #[error("sqlite database `{}`: {source}", path.display())]
    File {
        /// The database file.
        path: std::path::PathBuf,
        /// What failed.
        #[source]
        source: Box<Error>,
    },
    /// A statement failed (the database busy past the busy timeout, a constraint, ...).
    #[error("statement `{statement}` failed: {source}")]
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
        version: i64,
        /// The migration's name.
        name: &'static str,
        /// sqlx's error.
        #[source]
        source: sqlx::Error,
    },
    /// A migration this build has is recorded in `job_schema_migrations` under another name:
    /// the file was migrated by a build whose migrations differ from this one's (one
    /// renumbered or replaced), so its schema is not the one this build was written for.
    /// Nothing was applied.
    #[error(
        "job migration {version} is recorded in job_schema_migrations as `{recorded}`, but this \
         build's migration {version} is `{name}`: the file was migrated by a build whose \
         migrations differ from this one's, and its schema may lack what this build needs. \
         Nothing was applied"
    )]
    MigrationRenamed {
        /// The migration's number.
        version: i64,
        /// The name recorded for it.
        recorded: String,
        /// This build's name for it.
        name: &'static str,
    },
    /// The store's writer thread, where its write transactions run, could not be started.
    #[error("could not start the SQLite store's writer thread: {0}")]
    Writer(#[source] std::io::Error),
    /// A guarded write found the lease it was made under gone (the job was rescued, released
    /// or finalized elsewhere): it wrote nothing.
    #[error("the lease on job {id} was lost: nothing was written")]
    LeaseLost {
        /// The job's id.
        id: i64,
    },
    /// [`Store::record_breakers`](job_core::Store::record_breakers) was given counts or
    /// settings no worker sends (a breaker [`Breaker::problem`](job_core::Breaker::problem)
    /// refuses, more failures than attempts, a kind the name rule refuses), as PostgreSQL's
    /// `job.breaker_record` refuses them: nothing of the call was recorded.
    #[error("invalid breaker counts for kind {kind:?}: {problem}; nothing was recorded")]
    Breaker {
        /// The kind.
        kind: String,
        /// What is wrong.
        problem: String,
    },
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

impl Error {
    /// `self`, which happened opening or migrating the file at `path`, naming it.
    pub(crate) fn in_file(self, path: &std::path::Path) -> Error {
        Error::File {
            path: path.to_path_buf(),
            source: Box::new(self),
        }
    }

    pub(crate) fn query(statement: &'static str) -> impl FnOnce(sqlx::Error) -> Error {
        move |source| Error::Query { statement, source }
    }

    /// Whether the database refused what a statement was given, so that the same statement
    /// with the same input fails again: a constraint (CHECK, NOT NULL, UNIQUE, foreign key),
    /// a value too big, a type mismatch. A busy or locked database, an I/O error or a closed
    /// pool is not a refusal: it passes.
    pub fn is_refusal(&self) -> bool {
        if let Error::File { source, .. } = self {
            return source.is_refusal();
        }
        if let Error::Breaker { .. } = self {
            return true;
        }
        let Error::Query { source, .. } = self else {
            return false;
        };
        match source {
            sqlx::Error::Encode(_) => true,
            sqlx::Error::Database(db) => {
                // Primary result codes (the low byte of an extended code): SQLITE_CONSTRAINT
                // (19), SQLITE_TOOBIG (18), SQLITE_MISMATCH (20), SQLITE_RANGE (25).
                let code = db.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0);
                matches!(code & 0xff, 18 | 19 | 20 | 25)
            }
            _ => false,
        }
    }
}

impl Error {
    /// Whether a maintenance pass's write of one row failed on what that row holds, so that
    /// the pass can go on without it: a [refusal](Self::is_refusal), or an SQL error raised
    /// evaluating the row's values (a trigger's JSON function on them, SQLite's primary code
    /// SQLITE_ERROR). A busy or locked database, an I/O error, a full disk or a closed pool
    /// fails every row alike: it is not.
    pub(crate) fn is_row_failure(&self) -> bool {
        if self.is_refusal() {
            return true;
        }
        match self {
            Error::Query {
                source: sqlx::Error::Database(db),
                ..
            } => db.code().and_then(|c| c.parse::<i32>().ok()).unwrap_or(0) & 0xff == 1,
            _ => false,
        }
    }
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
