//! Assertions on what an application enqueued, read straight from the job table through any
//! executor of either backend ([`ReadJobs`]): the pool, or the test's own open transaction.

use std::any::type_name;
use std::panic::Location;

use chrono::{DateTime, Utc};
use job_core::{Job, JobId};
use serde_json::Value;
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Sqlite, SqliteConnection, SqlitePool};

/// A job of kind `J` as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct EnqueuedJob<J> {
    /// Its id.
    pub id: JobId,
    /// Its state (`scheduled`, `available`, ... as text).
    pub state: String,
    /// Its queue.
    pub queue: String,
    /// Its priority.
    pub priority: i16,
    /// When it may run.
    pub run_at: DateTime<Utc>,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its payload, decoded (through `Job::upgrade` for older versions).
    pub job: J,
    /// Its payload as stored.
    pub payload: Value,
}

/// Whether a job in `state` waits to run: `pending` (behind its ordering key or its
/// dependencies), `scheduled`, `available` or `retryable`.
fn waiting(state: &str) -> bool {
    matches!(state, "pending" | "scheduled" | "available" | "retryable")
}

/// A job of the kind as read, its payload not yet decoded: the assertions match on the
/// payload's JSON and decode only what they return, so a row of the kind that does not decode
/// (a poison payload, a newer version) fails only the assertions it would answer.
struct Row {
    id: JobId,
    state: String,
    queue: String,
    priority: i16,
    run_at: DateTime<Utc>,
    tags: Vec<String>,
    /// The payload as JSON (a string holding the text, if the text is not JSON).
    payload: Value,
    text: String,
    version: i32,
}

impl Row {
    fn new((id, state, queue, priority, run_at, tags, text, version): StoredJob) -> Self {
        let payload = serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone()));
        Row {
            id,
            state,
            queue,
            priority,
            run_at,
            tags,
            payload,
            text,
            version,
        }
    }

    fn waiting(&self) -> bool {
        waiting(&self.state)
    }

    /// The job, decoded as `J` (through `Job::upgrade` for older versions).
    fn decode<J: Job>(&self) -> Result<EnqueuedJob<J>, job_core::Poison> {
        Ok(EnqueuedJob {
            id: self.id,
            state: self.state.clone(),
            queue: self.queue.clone(),
            priority: self.priority,
            run_at: self.run_at,
            tags: self.tags.clone(),
            job: job_core::decode::<J>(&self.text, self.version)?,
            payload: self.payload.clone(),
        })
    }
}

/// Where the enqueue assertions read jobs: a pool or a connection (`&mut *tx` of an open
/// transaction) of PostgreSQL (`&PgPool`, `&mut PgConnection`, `&mut PoolConnection<Postgres>`)
/// or SQLite (the same of `Sqlite`).
pub trait ReadJobs: Send {
    /// Every job of `kind`, in any state, oldest first, as the assertions read it.
    fn jobs_of_kind(
        self,
        kind: &'static str,
    ) -> impl std::future::Future<Output = Result<Vec<StoredJob>, sqlx::Error>> + Send;
}

/// A stored job as [`ReadJobs`] returns it: id, state, queue, priority, run time, tags,
/// payload text and payload version.
pub type StoredJob = (
    JobId,
    String,
    String,
    i16,
    DateTime<Utc>,
    Vec<String>,
    String,
    i32,
);

const PG_JOBS: &str = "SELECT id, state::text, queue, priority, run_at, coalesce(tags, '{}'), \
                       payload::text, payload_version FROM job.jobs WHERE kind = $1 ORDER BY id";

const SQLITE_JOBS: &str = "SELECT id, state, queue, priority, run_at, tags, payload, \
                           payload_version FROM job_jobs WHERE kind = ?1 ORDER BY id";

type SqliteRow = (JobId, String, String, i16, i64, String, String, i32);

fn from_sqlite(rows: Vec<SqliteRow>) -> Vec<StoredJob> {
    rows.into_iter()
        .map(
            |(id, state, queue, priority, run_at, tags, payload, version)| {
                let run_at = DateTime::from_timestamp_micros(run_at).unwrap_or_default();
                let tags = serde_json::from_str(&tags).unwrap_or_default();
                (id, state, queue, priority, run_at, tags, payload, version)
            },
        )
        .collect()
}

macro_rules! read_jobs {
    (postgres: $($ty:ty => $conn:ident => $exec:expr),*) => {$(
        impl ReadJobs for $ty {
            async fn jobs_of_kind(self, kind: &'static str) -> Result<Vec<StoredJob>, sqlx::Error> {
                let $conn = self;
                sqlx::query_as(PG_JOBS).bind(kind).fetch_all($exec).await
            }
        }
    )*};
    (sqlite: $($ty:ty => $conn:ident => $exec:expr),*) => {$(
        impl ReadJobs for $ty {
            async fn jobs_of_kind(self, kind: &'static str) -> Result<Vec<StoredJob>, sqlx::Error> {
                let $conn = self;
                let rows: Vec<SqliteRow> =
                    sqlx::query_as(SQLITE_JOBS).bind(kind).fetch_all($exec).await?;
                Ok(from_sqlite(rows))
            }
        }
    )*};
}

read_jobs!(postgres:
    &PgPool => c => c,
    &mut PgConnection => c => c,
    &mut PoolConnection<Postgres> => c => &mut **c
);
read_jobs!(sqlite:
    &SqlitePool => c => c,
    &mut SqliteConnection => c => c,
    &mut PoolConnection<Sqlite> => c => &mut **c
);

/// Every job of kind `J`, in any state, oldest first, undecoded.
async fn all<J: Job>(executor: impl ReadJobs, at: &Location<'_>) -> Vec<Row> {
    let rows: Vec<StoredJob> = executor
        .jobs_of_kind(J::KIND)
        .await
        .unwrap_or_else(|e| panic!("{at}: cannot read `{}` jobs: {e}", J::KIND));
    rows.into_iter().map(Row::new).collect()
}

/// Every job of kind `J` waiting to run (`pending`, `scheduled`, `available` or
/// `retryable`), oldest first, as `executor` sees them (`&pool`, or `&mut *tx` to look inside
/// an open transaction).
///
/// # Panics
/// When the query fails or the payload of a waiting job does not decode: a test should hear
/// about either. Jobs of the kind in other states are not decoded.
#[track_caller]
pub fn enqueued<'e, J: Job>(
    executor: impl ReadJobs + 'e,
) -> impl std::future::Future<Output = Vec<EnqueuedJob<J>>> + 'e {
    let at = Location::caller();
    async move {
        let rows = all::<J>(executor, at).await;
        rows.iter()
            .filter(|r| r.waiting())
            .map(|r| {
                r.decode::<J>().unwrap_or_else(|e| {
                    panic!(
                        "{at}: waiting job {} ({}) does not decode as `{}`: {e}; {}",
                        r.id,
                        r.state,
                        type_name::<J>(),
                        undecodable::<J>(&rows)
                    )
                })
            })
            .collect()
    }
}

/// What a waiting job must be like: payload fields, and optionally its queue, priority, run
/// time and tags (Oban.Testing's `assert_enqueued` options).
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) {
/// # #[derive(serde::Serialize, serde::Deserialize)] struct SendInvoice { invoice_id: i64 }
/// # impl job_core::Job for SendInvoice { const KIND: &'static str = "send_invoice";
/// #   async fn perform(self, _: job_core::JobContext) -> Result<(), job_core::JobError> { Ok(()) } }
/// use job_testkit::{assert_enqueued_with, Expect};
/// use serde_json::json;
///
/// let expected = Expect::args(json!({ "invoice_id": 42 })).queue("mail").tags(["billing"]);
/// let id = assert_enqueued_with::<SendInvoice>(&pool, expected).await;
/// # let _ = id; }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Expect {
    fields: Option<Value>,
    queue: Option<String>,
    priority: Option<i16>,
    run_at: Option<(DateTime<Utc>, chrono::Duration)>,
    tags: Option<Vec<String>>,
}

impl Expect {
    /// A job whose payload contains `fields` (every key present with an equal value,
    /// recursively; other keys are ignored).
    pub fn args(fields: Value) -> Self {
        Expect {
            fields: Some(fields),
            ..Expect::default()
        }
    }

    /// ... on `queue`.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// ... with `priority`.
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// ... due at `at`, give or take a second (the database's clock set it).
    pub fn scheduled_at(mut self, at: DateTime<Utc>) -> Self {
        self.run_at = Some((at, chrono::Duration::seconds(1)));
        self
    }

    /// ... carrying every one of `tags` (others may be there too).
    pub fn tags<T: Into<String>>(mut self, tags: impl IntoIterator<Item = T>) -> Self {
        self.tags = Some(tags.into_iter().map(Into::into).collect());
        self
    }

    fn matches(&self, job: &Row) -> bool {
        self.fields
            .as_ref()
            .is_none_or(|f| contains(&job.payload, f))
            && self.queue.as_ref().is_none_or(|q| *q == job.queue)
            && self.priority.is_none_or(|p| p == job.priority)
            && self
                .run_at
                .is_none_or(|(at, slack)| (job.run_at - at).abs() <= slack)
            && self
                .tags
                .as_ref()
                .is_none_or(|tags| tags.iter().all(|t| job.tags.contains(t)))
    }
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(fields) = &self.fields {
            parts.push(format!("args {fields}"));
        }
        if let Some(q) = &self.queue {
            parts.push(format!("queue `{q}`"));
        }
        if let Some(p) = self.priority {
            parts.push(format!("priority {p}"));
        }
        if let Some((at, _)) = self.run_at {
            parts.push(format!("scheduled at {at}"));
        }
        if let Some(tags) = &self.tags {
            parts.push(format!("tags {tags:?}"));
        }
        if parts.is_empty() {
            parts.push("anything".into());
        }
        f.write_str(&parts.join(", "))
    }
}

/// Asserts that a job of kind `J` waits whose payload contains `fields` (every key of `fields`
/// present with an equal value; other keys are ignored), and returns its id. Reads through
/// `executor`: `&pool`, or `&mut *tx` to look inside the test's open transaction.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool) {
/// # #[derive(serde::Serialize, serde::Deserialize)] struct SendInvoice { invoice_id: i64 }
/// # impl job_core::Job for SendInvoice { const KIND: &'static str = "send_invoice";
/// #   async fn perform(self, _: job_core::JobContext) -> Result<(), job_core::JobError> { Ok(()) } }
/// use job_testkit::{assert_enqueued, refute_enqueued};
/// use serde_json::json;
///
/// // ... the code under test enqueues SendInvoice { invoice_id: 42 } ...
/// let id = assert_enqueued::<SendInvoice>(&pool, json!({ "invoice_id": 42 })).await;
/// refute_enqueued::<SendInvoice>(&pool, json!({ "invoice_id": 43 })).await;
/// # let _ = id; }
/// ```
///
/// A waiting job is one that is `pending` (behind its ordering key or its dependencies),
/// `scheduled`, `available` or `retryable`. Only the jobs that match are decoded as `J`: a job
/// of the kind that does not decode (a poison payload, a newer version) is no match.
///
/// # Panics
/// At the caller's line, when no such job waits, or when the only ones that do do not decode
/// as `J`; the message lists the waiting jobs of the kind, those in other states, and those
/// that do not decode.
#[track_caller]
pub fn assert_enqueued<'e, J: Job>(
    executor: impl ReadJobs + 'e,
    fields: Value,
) -> impl std::future::Future<Output = JobId> + 'e {
    assert_enqueued_at::<J>(executor, Expect::args(fields), Location::caller())
}

/// Asserts that a job of kind `J` waits as `expected` says (see [`Expect`]), and returns its
/// id; see [`assert_enqueued`].
#[track_caller]
pub fn assert_enqueued_with<'e, J: Job>(
    executor: impl ReadJobs + 'e,
    expected: Expect,
) -> impl std::future::Future<Output = JobId> + 'e {
    assert_enqueued_at::<J>(executor, expected, Location::caller())
}

async fn assert_enqueued_at<J: Job>(
    executor: impl ReadJobs,
    expected: Expect,
    at: &'static Location<'static>,
) -> JobId {
    let rows = all::<J>(executor, at).await;
    let mut matching = rows.iter().filter(|r| r.waiting() && expected.matches(r));
    let Some(first) = matching.next() else {
        panic!(
            "{at}: expected a `{}` job enqueued with {expected}; {}",
            J::KIND,
            describe::<J>(&rows)
        );
    };
    match std::iter::once(first)
        .chain(matching)
        .find(|r| r.decode::<J>().is_ok())
    {
        Some(found) => found.id,
        None => panic!(
            "{at}: expected a `{}` job enqueued with {expected}: job {} matches, but its \
             payload does not decode as `{}`: {}; {}",
            J::KIND,
            first.id,
            type_name::<J>(),
            first
                .decode::<J>()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default(),
            describe::<J>(&rows)
        ),
    }
}

/// Asserts that no job of kind `J` waits whose payload contains `fields`; see
/// [`assert_enqueued`].
///
/// Payloads are not decoded: a job of the kind that does not decode as `J` still matches by
/// its payload's JSON.
///
/// A refute that could never fail panics saying so instead of passing: a top-level field
/// `J` does not have (a misspelled key; `J`'s fields are read from its `Deserialize`, so a
/// field it serializes but never reads, `#[serde(skip_deserializing)]`, counts as one it does
/// not have; not checked for a `J` of payload version 2 or more, whose older payloads may hold
/// other fields), or a field every job of the kind holding it holds as another JSON type
/// (`"1"` for `1`; null fits any).
///
/// # Panics
/// At the caller's line, when one does, or when `fields` does not fit the kind's payloads;
/// the message shows it.
#[track_caller]
pub fn refute_enqueued<'e, J: Job>(
    executor: impl ReadJobs + 'e,
    fields: Value,
) -> impl std::future::Future<Output = ()> + 'e {
    let at = Location::caller();
    async move {
        if let Some(problem) = unknown_field::<J>(&fields) {
            panic!(
                "{at}: refute_enqueued::<{}> with {fields} could never fail: {problem}",
                J::KIND
            );
        }
        let expected = Expect::args(fields.clone());
        let rows = all::<J>(executor, at).await;
        if let Some(found) = rows.iter().find(|r| r.waiting() && expected.matches(r)) {
            panic!(
                "{at}: expected no `{}` job enqueued with {expected}, found job {} ({}, queue \
                 `{}`) with {}; {}",
                J::KIND,
                found.id,
                found.state,
                found.queue,
                found.payload,
                undecodable::<J>(&rows)
            );
        }
        if let Some(problem) = misfit(&rows, &fields, "") {
            panic!(
                "{at}: refute_enqueued::<{}> with {expected} could never fail: {problem}; {}",
                J::KIND,
                describe::<J>(&rows)
            );
        }
    }
}

/// A top-level field of `fields` that `J` does not have, by the names its `Deserialize` asks
/// for (a struct's fields, with their renames and aliases); nothing when those are not known
/// (not a plain struct: a `#[serde(flatten)]`, a hand-written `Deserialize`).
fn unknown_field<J: Job>(fields: &Value) -> Option<String> {
    let Value::Object(fields) = fields else {
        return None;
    };
    // A payload of an older version (upgraded when a worker decodes it) may hold fields the
    // current type does not.
    if J::VERSION > 1 {
        return None;
    }
    let known = serde_aux::serde_introspection::serde_introspect::<J>();
    if known.is_empty() {
        return None;
    }
    let unknown: Vec<&str> = fields
        .keys()
        .map(String::as_str)
        .filter(|k| !known.contains(k))
        .collect();
    (!unknown.is_empty()).then(|| {
        format!(
            "`{}` has no field {} (its fields: {})",
            type_name::<J>(),
            unknown
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", "),
            known.join(", ")
        )
    })
}

/// Why `expected` fits none of the payloads of `rows` (there being some): a field (at `path`)
/// that every one holding it holds as another JSON type (null, what an `Option` holds when it
/// has nothing, fits any type).
fn misfit(rows: &[Row], expected: &Value, path: &str) -> Option<String> {
    let Value::Object(fields) = expected else {
        return None;
    };
    let payloads: Vec<&Value> = rows.iter().map(|r| &r.payload).collect();
    misfit_in(&payloads, fields, path)
}

fn misfit_in(
    payloads: &[&Value],
    fields: &serde_json::Map<String, Value>,
    path: &str,
) -> Option<String> {
    if payloads.is_empty() {
        return None;
    }
    for (key, want) in fields {
        let at = if path.is_empty() {
            format!("`{key}`")
        } else {
            format!("{path}.`{key}`")
        };
        // A field no payload holds may be one skipped when empty: nothing to compare.
        let held: Vec<&Value> = payloads.iter().filter_map(|p| p.get(key)).collect();
        if held.is_empty() || want.is_null() || held.iter().any(|v| v.is_null()) {
            continue;
        }
        let same: Vec<&Value> = held
            .iter()
            .copied()
            .filter(|v| json_type(v) == json_type(want))
            .collect();
        if same.is_empty() {
            return Some(format!(
                "field {at} is {} here, and {} in every job of the kind that has it",
                json_type(want),
                json_type(held[0])
            ));
        }
        if let Value::Object(inner) = want {
            if let Some(problem) = misfit_in(&same, inner, &at) {
                return Some(problem);
            }
        }
    }
    None
}

/// A JSON value's type, as a refute's message names it.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The jobs of a kind, waiting ones first, then the others with their states, then those
/// that do not decode as `J`.
fn describe<J: Job>(jobs: &[Row]) -> String {
    let line = |j: &Row| {
        format!(
            "job {} ({}, queue `{}`, priority {}, run at {}, tags {:?}): {}",
            j.id, j.state, j.queue, j.priority, j.run_at, j.tags, j.payload
        )
    };
    let waiting: Vec<String> = jobs.iter().filter(|j| j.waiting()).map(line).collect();
    let others: Vec<String> = jobs.iter().filter(|j| !j.waiting()).map(line).collect();
    let list = |v: &[String]| {
        if v.is_empty() {
            "none".to_owned()
        } else {
            v.join("; ")
        }
    };
    format!(
        "waiting: {}; in other states: {}; {}",
        list(&waiting),
        list(&others),
        undecodable::<J>(jobs)
    )
}

/// How many of the kind's jobs do not decode as `J`, and why.
fn undecodable<J: Job>(jobs: &[Row]) -> String {
    let failed: Vec<String> = jobs
        .iter()
        .filter_map(|j| {
            let e = j.decode::<J>().err()?;
            Some(format!("job {} ({}): {e}", j.id, j.state))
        })
        .collect();
    let what = format!(
        "of the kind's {} jobs, {} do not decode as `{}`",
        jobs.len(),
        failed.len(),
        type_name::<J>()
    );
    if failed.is_empty() {
        what
    } else {
        format!("{what}: {}", failed.join("; "))
    }
}

/// Whether `actual` holds every key of `expected` (recursively for objects) with equal values.
fn contains(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e
            .iter()
            .all(|(k, ev)| a.get(k).is_some_and(|av| contains(av, ev))),
        _ => actual == expected,
    }
}

#[cfg(test)]
mod tests {
    use super::contains;
    use serde_json::json;

    #[test]
    fn a_partial_payload_matches_a_fuller_one() {
        let actual = json!({"invoice_id": 42, "resend": false, "to": {"name": "Ada", "id": 1}});
        assert!(contains(&actual, &json!({"invoice_id": 42})));
        assert!(contains(&actual, &json!({"to": {"name": "Ada"}})));
        assert!(contains(&actual, &json!({})));
        assert!(!contains(&actual, &json!({"invoice_id": 43})));
        assert!(!contains(&actual, &json!({"missing": 1})));
    }
}
