//! What the door tests share: the three doors, and what each says when it refuses.
#![allow(dead_code)]

use job::{EnqueueError, Job, JobContext, JobError, JobId, PgStore, Store};
use job_core::NewJob;
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgDatabaseError;
use sqlx::PgPool;
use std::sync::{Arc, Mutex, OnceLock};

/// A job whose payload is whatever JSON value it holds: what a hand-written `Job` with any
/// `Serialize` can send.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct AnyPayload(pub(crate) serde_json::Value);

impl Job for AnyPayload {
    const KIND: &'static str = "doors.any";
    async fn perform(self, _: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

/// Rows in `job.jobs`.
pub(crate) async fn rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM job.jobs")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The option an enqueue refusal names: `InvalidOption`'s, or `payload` for a payload too
/// large. Panics on success or on any other error.
pub(crate) fn named(result: Result<JobId, EnqueueError>) -> String {
    match result {
        Err(EnqueueError::InvalidOption { option, .. }) => option.to_owned(),
        Err(EnqueueError::PayloadTooLarge { .. }) => "payload".to_owned(),
        other => panic!("expected a refusal naming an option, got {other:?}"),
    }
}

/// The same, through `Store::enqueue`.
pub(crate) async fn named_by_store(store: &PgStore, job: NewJob) -> String {
    named(store.enqueue(job).await)
}

/// A database error: its SQLSTATE and message.
pub(crate) fn db_error(error: sqlx::Error) -> (String, String) {
    let db = error
        .as_database_error()
        .unwrap_or_else(|| panic!("expected a database error, got {error}"));
    let pg = db.downcast_ref::<PgDatabaseError>();
    (pg.code().to_owned(), pg.message().to_owned())
}

/// Asserts that `statement` fails with `code` and a message or constraint naming `argument`.
pub(crate) async fn refused_by_sql(pool: &PgPool, statement: &str, code: &str, argument: &str) {
    let error = sqlx::raw_sql(statement)
        .execute(pool)
        .await
        .map(|_| ())
        .expect_err(statement);
    let db = error.as_database_error().expect("a database error");
    let pg = db.downcast_ref::<PgDatabaseError>();
    let names = pg.message().contains(&format!("`{argument}`"))
        || pg.column() == Some(argument)
        || pg.constraint() == Some(&format!("jobs_{argument}_check"));
    assert_eq!(pg.code(), code, "{statement}: {}", pg.message());
    assert!(
        names,
        "{statement}: expected the error to name `{argument}`, got {:?} (column {:?}, constraint {:?})",
        pg.message(),
        pg.column(),
        pg.constraint()
    );
}

/// `text` as a SQL string literal (E'' with every character escaped that needs it).
pub(crate) fn literal(text: &str) -> String {
    let mut out = String::from("E'");
    for c in text.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c if c.is_ascii_graphic() || c == ' ' => out.push(c),
            c if u32::from(c) <= 0xFFFF => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push_str(&format!("\\U{:08X}", u32::from(c))),
        }
    }
    out.push('\'');
    out
}

/// The fenced code block right after the line `<!-- test: NAME -->` in the README, so that
/// what the README shows is what the tests run.
pub(crate) fn readme_block(name: &str) -> String {
    let readme = include_str!("../../README.md");
    let marker = format!("<!-- test: {name} -->");
    let after = readme
        .split_once(&marker)
        .unwrap_or_else(|| panic!("the README has no {marker}"))
        .1;
    let fence = after.find("```").expect("a code block after the marker");
    let body = &after[fence..];
    let start = body.find('\n').expect("a fence line") + 1;
    let end = body[start..].find("\n```").expect("a closing fence") + start;
    body[start..end].to_owned()
}

/// Roles made for one test, with names of its own (roles are cluster-wide and tests run in
/// parallel), dropped by [`Roles::drop_all`] or, on a panic, when dropped.
pub(crate) struct Roles {
    admin: sqlx::postgres::PgConnectOptions,
    names: Vec<String>,
    dropped: bool,
}

impl Roles {
    /// Connects as the test database's (super)user, to the server's `postgres` database.
    pub(crate) fn new(db: &job_testkit::TestDb) -> Roles {
        Roles {
            admin: db.connect_options().database("postgres"),
            names: Vec::new(),
            dropped: false,
        }
    }

    /// A unique name starting with `base`, remembered for dropping.
    pub(crate) fn name(&mut self, base: &str) -> String {
        let name = format!(
            "{base}_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        self.names.push(name.clone());
        name
    }

    /// A unique name starting with `base` that SQL must quote (`"base; …"`), remembered for
    /// dropping: for statements that build SQL from role names.
    pub(crate) fn name_to_quote(&mut self, base: &str) -> String {
        let name = format!(
            "{base}; {}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        self.names.push(name.clone());
        name
    }

    /// Drops every role; call after the test database is gone, so no privilege holds them.
    pub(crate) async fn drop_all(mut self) {
        self.dropped = true;
        drop_roles(&self.admin, &self.names).await.unwrap();
    }
}

async fn drop_roles(
    admin: &sqlx::postgres::PgConnectOptions,
    names: &[String],
) -> Result<(), sqlx::Error> {
    use sqlx::{ConnectOptions, Connection};
    let mut conn = admin.connect().await?;
    for name in names {
        sqlx::raw_sql(&format!("DROP ROLE IF EXISTS {}", ident(name)))
            .execute(&mut conn)
            .await?;
    }
    conn.close().await
}

/// `name` as a quoted SQL identifier.
pub(crate) fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Drop for Roles {
    fn drop(&mut self) {
        if self.dropped || self.names.is_empty() {
            return;
        }
        let admin = self.admin.clone();
        let names = std::mem::take(&mut self.names);
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(drop_roles(&admin, &names)).err()
        })
        .join();
    }
}

/// Every event logged in this process, as text: its target, level and fields.
pub(crate) fn captured() -> &'static Arc<Mutex<Vec<String>>> {
    static LINES: OnceLock<Arc<Mutex<Vec<String>>>> = OnceLock::new();
    LINES.get_or_init(|| {
        let lines = Arc::new(Mutex::new(Vec::new()));
        tracing::subscriber::set_global_default(Capture(lines.clone()))
            .expect("no other subscriber in this test binary");
        lines
    })
}

/// A subscriber that keeps each event's text (no maintained crate of this workspace does, and
/// tracing-subscriber would be a dependency for this one test).
pub(crate) struct Capture(Arc<Mutex<Vec<String>>>);

pub(crate) struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        let mut fields = Fields(String::new());
        span.record(&mut fields);
        self.0
            .lock()
            .unwrap()
            .push(format!("span {}{}", span.metadata().name(), fields.0));
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        let mut fields = Fields(String::new());
        values.record(&mut fields);
        self.0.lock().unwrap().push(format!("record{}", fields.0));
    }
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let m = event.metadata();
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {}{}", m.level(), m.target(), fields.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The path of a command-line tool the tests need, or a failure that says how to get it: a
/// missing tool fails the test, it never skips it.
pub(crate) fn tool(name: &str) -> String {
    let found = std::process::Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    found.unwrap_or_else(|| {
        panic!(
            "`{name}` is not installed, and this test needs it: install it (PostgreSQL's client \
             tools: `apt-get install postgresql-client`; Python 3; Node.js) or run .ci/run, \
             which installs what a fresh machine lacks"
        )
    })
}

/// The test database's URL as libpq (psql, psycopg, node-postgres) reads it: sqlx's own
/// query parameters dropped.
pub(crate) fn libpq_url(db: &job_testkit::TestDb) -> String {
    let url = db.url();
    url.split('?').next().unwrap_or(&url).to_owned()
}
