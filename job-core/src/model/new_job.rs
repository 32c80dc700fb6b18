//! A job about to be enqueued: its payload serialized and its options checked.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::model::error::EnqueueError;
use crate::model::job::{Job, JobId, MAX_DURATION};

/// The default payload size limit: 1 MiB of JSON. The database's limit
/// (`job.settings.payload_limit`, which every enqueue obeys) starts at this value; a store may
/// also check a limit of its own before it sends a job.
pub const DEFAULT_PAYLOAD_LIMIT: usize = 1024 * 1024;

/// The longest queue or kind name accepted.
pub const MAX_NAME_LEN: usize = 128;

/// When a new job becomes claimable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunAt {
    /// As soon as the enqueue commits.
    #[default]
    Now,
    /// After this delay, measured from the database's clock at insert.
    In(Duration),
    /// At this instant.
    At(DateTime<Utc>),
}

/// The longest unique or ordering key accepted, in bytes.
pub const MAX_UNIQUE_KEY_LEN: usize = 512;

/// The most tags one job may carry.
pub const MAX_TAGS: usize = 32;

/// The characters no name may contain (kinds, queues, tags, tenants, pauses), as inclusive
/// ranges of code points: whitespace, control and format characters (Unicode White_Space, Cc,
/// Cf, Zs, Zl and Zp), which make names that look alike and are not, or that a log line or a
/// terminal shows as something else (zero-width spaces, bidirectional overrides). The SQL side
/// checks the very same list (`job.name_problem`, migration 0005); a test compares the two
/// over every code point, and another this list with the Unicode database.
pub const FORBIDDEN_IN_NAMES: &[(u32, u32)] = &[
    (0x0000, 0x0020),
    (0x007F, 0x00A0),
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x1680, 0x1680),
    (0x180E, 0x180E),
    (0x2000, 0x200F),
    (0x2028, 0x202F),
    (0x205F, 0x206F),
    (0x3000, 0x3000),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
];

/// Whether `c` may appear in a name (see [`FORBIDDEN_IN_NAMES`]).
pub fn allowed_in_name(c: char) -> bool {
    let c = u32::from(c);
    !FORBIDDEN_IN_NAMES
        .iter()
        .any(|&(from, to)| (from..=to).contains(&c))
}

/// What is wrong with a kind, queue, tag or tenant name, in the words the SQL side uses
/// (`job.name_problem`), or `None`: 1 to [`MAX_NAME_LEN`] bytes, no character refused by
/// [`allowed_in_name`].
pub fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("must not be empty".into());
    }
    if name.len() > MAX_NAME_LEN {
        return Some(format!(
            "must be at most {MAX_NAME_LEN} bytes, got {}",
            name.len()
        ));
    }
    let (at, c) = name
        .chars()
        .enumerate()
        .find(|&(_, c)| !allowed_in_name(c))?;
    Some(format!(
        "must not contain whitespace, control or format characters (U+{:04X} at character {})",
        u32::from(c),
        at + 1
    ))
}

/// The earliest time a job may carry (`run_at`, `deadline`): 0001-01-01 UTC. With
/// [`LATEST_TIME`], the range PostgreSQL, chrono, Python's `datetime` and JavaScript's `Date`
/// all represent; the table's constraints refuse anything outside it, infinities included.
pub const EARLIEST_TIME: &str = "0001-01-01T00:00:00Z";

/// The latest time a job may carry: 9999-12-31 23:59:59.999999 UTC.
pub const LATEST_TIME: &str = "9999-12-31T23:59:59.999999Z";

fn time_problem(at: DateTime<Utc>) -> Option<String> {
    use chrono::Datelike;
    (!(1..=9999).contains(&at.year()))
        .then(|| format!("must be between 0001-01-01 and 9999-12-31 UTC, got {at}"))
}

/// The latest instant a job may start; past it the job is never claimed and is discarded
/// with class `expired`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// At this instant.
    At(DateTime<Utc>),
    /// This long after the insert, measured on the database's clock.
    In(Duration),
}

/// While which states a job's unique key keeps out other jobs with the same kind and key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum UniqueScope {
    /// While scheduled, available, running or retryable: one at a time, from enqueue to its
    /// end. The default.
    #[default]
    UntilFinished,
    /// While scheduled, available or retryable, until its first claim: a new job may be
    /// enqueued as soon as the first has started. A started job never holds its key again,
    /// even when it is retried.
    UntilStarted,
    /// In every state, until the row is pruned: a key is used once. Periodic jobs use it so
    /// that a period that already ran never fires again.
    UntilPruned,
}

impl UniqueScope {
    /// The name stored in `unique_scope`.
    pub const fn as_str(self) -> &'static str {
        match self {
            UniqueScope::UntilFinished => "finished",
            UniqueScope::UntilStarted => "started",
            UniqueScope::UntilPruned => "pruned",
        }
    }
}

/// The most jobs one job may depend on.
pub const MAX_DEPENDENCIES: usize = 10_000;

/// A job another job waits for (see the README's dependencies and batches).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dependency {
    /// Which job.
    pub on: DependsOn,
    /// What it must end as.
    pub mode: DependencyMode,
}

/// Which job a [`Dependency`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DependsOn {
    /// A job already enqueued.
    Job(JobId),
    /// The job at this index of the same bulk enqueue (a [`Batch`](crate::Batch)'s members).
    Batch(usize),
}

/// What a dependency must end as for its dependent to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum DependencyMode {
    /// Completed: when it ends cancelled or discarded (or is deleted) instead, the dependent
    /// is discarded with class `dependency`, never run. The default.
    #[default]
    Completed,
    /// Finished in any way: completed, cancelled or discarded (a batch's callback).
    Finished,
}

impl DependencyMode {
    /// The name stored in `job.dependencies.mode`.
    pub const fn as_str(self) -> &'static str {
        match self {
            DependencyMode::Completed => "completed",
            DependencyMode::Finished => "finished",
        }
    }
}

/// What an enqueue does when a job with the same kind and unique key is active.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum OnDuplicate {
    /// Keep the existing job and refuse the new one with [`EnqueueError::Duplicate`]. The
    /// default.
    #[default]
    Keep,
    /// Replace the existing job's payload, run time and deadline when it is waiting
    /// (scheduled, available, retryable) and return its id; refuse with
    /// [`EnqueueError::Duplicate`] when it is running.
    Replace,
}

/// A unique key and how it is enforced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unique {
    /// The key, unique per kind among the jobs its scope counts.
    pub key: String,
    /// Which states count.
    pub scope: UniqueScope,
    /// What a duplicate enqueue does.
    pub on_duplicate: OnDuplicate,
}

/// Overrides an enqueue can apply to a job's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EnqueueOptions {
    /// Queue instead of the job's default.
    pub queue: Option<String>,
    /// Priority instead of the job's default (lower runs first).
    pub priority: Option<i16>,
    /// Attempts in all instead of the job's default.
    pub max_attempts: Option<i32>,
    /// When the job may start.
    pub run_at: RunAt,
    /// A unique key instead of the one [`Job::unique_key`] derives from the payload.
    pub unique_key: Option<String>,
    /// Which states the unique key counts. Defaults to [`UniqueScope::UntilFinished`].
    pub unique_scope: UniqueScope,
    /// What a duplicate does. Defaults to [`OnDuplicate::Keep`].
    pub on_duplicate: OnDuplicate,
    /// The latest start; none by default.
    pub deadline: Option<Deadline>,
    /// Labels stored with the job, for listings and stats.
    pub tags: Vec<String>,
    /// The tenant the job belongs to, for listings and stats.
    pub tenant: Option<String>,
    /// The W3C `traceparent` the job's attempts join. Defaults to `None`: the trace of the
    /// enqueuing code ([`current_traceparent`](crate::current_traceparent)), if any.
    pub traceparent: Option<String>,
    /// An ordering key instead of the one [`Job::ordering_key`] derives from the payload.
    pub ordering_key: Option<String>,
    /// A rate key instead of the one [`Job::rate_key`] derives from the payload.
    pub rate_key: Option<String>,
    /// Jobs this one waits for; it is `pending` until they have ended.
    pub depends_on: Vec<Dependency>,
}

/// A validated job row to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewJob {
    /// The job's kind.
    pub kind: String,
    /// Its queue.
    pub queue: String,
    /// Lower runs first.
    pub priority: i16,
    /// The payload as JSON text.
    pub payload: String,
    /// The payload's version.
    pub payload_version: i32,
    /// Attempts in all.
    pub max_attempts: i32,
    /// When it may start.
    pub run_at: RunAt,
    /// Its unique key, if any.
    pub unique: Option<Unique>,
    /// The latest start, if any.
    pub deadline: Option<Deadline>,
    /// Its tags.
    pub tags: Vec<String>,
    /// Its tenant.
    pub tenant: Option<String>,
    /// The W3C `traceparent` of the code that enqueued it, which its attempts' spans join.
    pub traceparent: Option<String>,
    /// Its ordering key, if any: jobs with the same key run one at a time, in enqueue order.
    pub ordering_key: Option<String>,
    /// Its rate key, if any: with its kind's rate limit ([`JobOptions::rate`](crate::JobOptions::rate)),
    /// each key has a window of its own; jobs without one share the kind's.
    pub rate_key: Option<String>,
    /// Jobs it waits for: it is `pending` until they have ended as each one's mode asks.
    pub depends_on: Vec<Dependency>,
}

impl NewJob {
    /// A job of `kind` with `payload` (JSON text) and the framework's defaults: queue
    /// `default`, priority 0, version 1, 25 attempts, due now, no unique key, deadline, tags
    /// or tenant. Checked only by [`NewJob::validate`] (stores call it).
    pub fn new(kind: impl Into<String>, payload: impl Into<String>) -> Self {
        NewJob {
            kind: kind.into(),
            queue: "default".into(),
            priority: 0,
            payload: payload.into(),
            payload_version: 1,
            max_attempts: 25,
            run_at: RunAt::Now,
            unique: None,
            deadline: None,
            tags: Vec::new(),
            tenant: None,
            traceparent: None,
            ordering_key: None,
            rate_key: None,
            depends_on: Vec::new(),
        }
    }

    /// Serializes `job` and applies `options` over its defaults, rejecting any value the store
    /// would not accept, with an error naming the option.
    pub fn build<J: Job>(
        job: &J,
        options: EnqueueOptions,
        payload_limit: usize,
    ) -> Result<NewJob, EnqueueError> {
        let payload = serde_json::to_string(job).map_err(|source| EnqueueError::Serialize {
            kind: J::KIND.to_owned(),
            source,
        })?;
        // serde_json wrote a NaN or an infinity as `null`: stored, the job would decode as
        // something else, or not at all.
        if let Some((path, value)) = crate::model::finite::non_finite(job) {
            return Err(EnqueueError::Serialize {
                kind: J::KIND.to_owned(),
                source: <serde_json::Error as serde::ser::Error>::custom(
                    crate::model::finite::describe(&path, value),
                ),
            });
        }
        let unique_key = options.unique_key.or_else(|| job.unique_key());
        // A scope or a replace with no key to apply them to would be dropped without a word.
        if unique_key.is_none() {
            let asked = if options.unique_scope != UniqueScope::default() {
                Some("unique_scope")
            } else if options.on_duplicate != OnDuplicate::Keep {
                Some("on_duplicate")
            } else {
                None
            };
            if let Some(option) = asked {
                return Err(invalid(
                    option,
                    format!(
                        "applies to a unique key, and this job of `{}` has none: give it one \
                         (`unique_key`, or `#[job(unique = ..)]`)",
                        J::KIND
                    ),
                ));
            }
        }
        let mut new = NewJob {
            kind: J::KIND.to_owned(),
            queue: options.queue.unwrap_or_else(|| J::OPTIONS.queue.to_owned()),
            priority: options.priority.unwrap_or(J::OPTIONS.priority),
            payload,
            payload_version: J::VERSION,
            max_attempts: options.max_attempts.unwrap_or(J::OPTIONS.max_attempts),
            run_at: options.run_at,
            unique: unique_key.map(|key| Unique {
                key,
                scope: options.unique_scope,
                on_duplicate: options.on_duplicate,
            }),
            deadline: options.deadline,
            tags: options.tags,
            tenant: options.tenant,
            traceparent: options
                .traceparent
                .or_else(crate::telemetry::current_traceparent),
            ordering_key: options.ordering_key.or_else(|| job.ordering_key()),
            rate_key: options.rate_key.or_else(|| job.rate_key()),
            depends_on: options.depends_on,
        };
        // The same job named twice with the same mode is one edge (validate refuses it named
        // with two modes).
        let mut seen = std::collections::HashSet::with_capacity(new.depends_on.len());
        new.depends_on.retain(|d| seen.insert(*d));
        if new.rate_key.is_some() && J::OPTIONS.rate.is_none() {
            return Err(invalid(
                "rate_key",
                format!(
                    "`{}` has no rate limit (`#[job(rate = \"N/period\")]`): a rate key would \
                     limit nothing",
                    J::KIND
                ),
            ));
        }
        new.validate(payload_limit)?;
        Ok(new)
    }

    /// Checks every job of a bulk enqueue ([`validate`](Self::validate)); a refused option's
    /// reason then says which job of the list it is, by its index from 0 (`the job at index 3
    /// of 500 (kind `billing.send`): …`).
    pub fn validate_all(jobs: &[NewJob], payload_limit: usize) -> Result<(), EnqueueError> {
        for (i, job) in jobs.iter().enumerate() {
            job.validate(payload_limit).map_err(|e| match e {
                EnqueueError::InvalidOption { option, reason } if jobs.len() > 1 => {
                    EnqueueError::InvalidOption {
                        option,
                        reason: format!(
                            "the job at index {i} of {} (kind `{}`): {reason}",
                            jobs.len(),
                            crate::model::text::storable_text(&job.kind, 128)
                        ),
                    }
                }
                e => e,
            })?;
        }
        Ok(())
    }

    /// Checks every field; used by [`NewJob::build`] and by stores for rows built by hand.
    pub fn validate(&self, payload_limit: usize) -> Result<(), EnqueueError> {
        check_name("kind", &self.kind)?;
        check_name("queue", &self.queue)?;
        if self.priority < 0 {
            return Err(invalid(
                "priority",
                format!("must be 0 or more, got {}", self.priority),
            ));
        }
        if self.max_attempts < 1 {
            return Err(invalid(
                "max_attempts",
                format!("must be at least 1, got {}", self.max_attempts),
            ));
        }
        if self.payload_version < 1 {
            return Err(invalid(
                "payload_version",
                format!("must be at least 1, got {}", self.payload_version),
            ));
        }
        match self.run_at {
            RunAt::In(delay) if delay > MAX_DURATION => {
                return Err(invalid("schedule_in", "must be under 100 years".into()));
            }
            RunAt::At(at) => {
                if let Some(reason) = time_problem(at) {
                    return Err(invalid("run_at", reason));
                }
            }
            _ => {}
        }
        match self.deadline {
            Some(Deadline::In(delay)) if delay > MAX_DURATION => {
                return Err(invalid("deadline_in", "must be under 100 years".into()));
            }
            Some(Deadline::At(at)) => {
                if let Some(reason) = time_problem(at) {
                    return Err(invalid("deadline", reason));
                }
            }
            _ => {}
        }
        // A deadline at or before the run time: the claim takes a job only before its
        // deadline and from its run time, so it could only expire. Comparable when both are
        // instants, or both delays from the insert.
        let expires_first = match (self.run_at, self.deadline) {
            (RunAt::At(run), Some(Deadline::At(deadline))) => deadline <= run,
            (RunAt::In(run), Some(Deadline::In(deadline))) => deadline <= run,
            _ => false,
        };
        if expires_first {
            return Err(invalid(
                "deadline",
                "is not after the job's run time: it could never start, only expire".into(),
            ));
        }
        if let Some(unique) = &self.unique {
            check_key("unique_key", &unique.key)?;
        }
        if let Some(key) = &self.ordering_key {
            check_key("ordering_key", key)?;
        }
        if let Some(key) = &self.rate_key {
            check_key("rate_key", key)?;
        }
        if !self.depends_on.is_empty() {
            if self.depends_on.len() > MAX_DEPENDENCIES {
                return Err(invalid(
                    "depends_on",
                    format!(
                        "at most {MAX_DEPENDENCIES} dependencies, got {}",
                        self.depends_on.len()
                    ),
                ));
            }
            if let Some(bad) = self.depends_on.iter().find_map(|d| match d.on {
                DependsOn::Job(id) if id < 1 => Some(id),
                _ => None,
            }) {
                return Err(invalid(
                    "depends_on",
                    format!("job ids are 1 or more, got {bad}"),
                ));
            }
            if self.unique.is_some() || self.ordering_key.is_some() {
                return Err(invalid(
                    "depends_on",
                    "cannot be combined with a unique or ordering key yet".into(),
                ));
            }
            if let Some(reason) = mode_conflict(&self.depends_on) {
                return Err(invalid("depends_on", reason));
            }
        }
        if self.tags.len() > MAX_TAGS {
            return Err(invalid(
                "tags",
                format!("at most {MAX_TAGS} tags, got {}", self.tags.len()),
            ));
        }
        for (n, tag) in self.tags.iter().enumerate() {
            if let Some(problem) = name_problem(tag) {
                return Err(invalid("tags", format!("tag {} {problem}", n + 1)));
            }
        }
        if let Some(tenant) = &self.tenant {
            check_name("tenant", tenant)?;
        }
        if let Some(tp) = &self.traceparent {
            if !crate::telemetry::valid_traceparent(tp) {
                return Err(invalid(
                    "traceparent",
                    "must be a W3C traceparent of version 00 (`00-<32 hex>-<16 hex>-<2 hex>`, \
                     lower case, ids not all zeros)"
                        .into(),
                ));
            }
        }
        if let Some(reason) = payload_problem(&self.payload) {
            return Err(invalid("payload", reason));
        }
        if self.payload.len() > payload_limit {
            return Err(EnqueueError::PayloadTooLarge {
                kind: self.kind.clone(),
                size: self.payload.len(),
                limit: payload_limit,
            });
        }
        Ok(())
    }
}

/// A job named twice among `depends_on` with two modes (`depends_on` and `after_all` of the
/// same id), which the store would otherwise settle silently by keeping the first: the job,
/// and both modes.
fn mode_conflict(depends_on: &[Dependency]) -> Option<String> {
    if depends_on.len() < 2 {
        return None;
    }
    let mut modes = std::collections::HashMap::with_capacity(depends_on.len());
    let (on, first, second) = depends_on.iter().find_map(|d| {
        let first = *modes.entry(d.on).or_insert(d.mode);
        (first != d.mode).then_some((d.on, first, d.mode))
    })?;
    let job = match on {
        DependsOn::Job(id) => format!("job {id}"),
        DependsOn::Batch(index) => format!("job {index} of the batch"),
    };
    let name = |mode: DependencyMode| match mode {
        DependencyMode::Completed => "`depends_on` (run once it has completed)",
        DependencyMode::Finished => "`after_all` (run once it has finished, however it ended)",
    };
    Some(format!(
        "{job} is waited for with two modes, {} and {}: name it once, with the mode meant",
        name(first),
        name(second)
    ))
}

fn invalid(option: &'static str, reason: String) -> EnqueueError {
    EnqueueError::InvalidOption { option, reason }
}

/// A unique or ordering key: 1 to [`MAX_UNIQUE_KEY_LEN`] bytes, no NUL.
fn check_key(option: &'static str, key: &str) -> Result<(), EnqueueError> {
    if key.is_empty() || key.len() > MAX_UNIQUE_KEY_LEN {
        return Err(invalid(
            option,
            format!("must be 1 to {MAX_UNIQUE_KEY_LEN} bytes, got {}", key.len()),
        ));
    }
    if key.contains('\0') {
        return Err(invalid(
            option,
            "must not contain a NUL character (PostgreSQL text cannot hold one)".into(),
        ));
    }
    Ok(())
}

fn check_name(option: &'static str, name: &str) -> Result<(), EnqueueError> {
    match name_problem(name) {
        Some(reason) => Err(invalid(option, reason)),
        None => Ok(()),
    }
}

/// What is wrong with a payload's JSON text, or `None`. Every payload is a JSON object (what a
/// `#[job]` payload, a struct with named fields, serializes to; a hand-written [`Job`] must
/// serialize to one too: a struct with named fields or a map, not a tuple, a newtype around a
/// scalar, a unit struct or an enum), so that fields can be added and read by name, and no
/// payload holds a NUL character (`\u0000`), which PostgreSQL's `jsonb` cannot store, or nests
/// deeper than [`MAX_JSON_DEPTH`](crate::MAX_JSON_DEPTH) levels, which its handler could not
/// read back (serde_json reads 128 at most), and that it is JSON every reader reads alike:
/// well formed, its strings Unicode (no lone surrogate escape), its numbers within an `f64`,
/// and no object holding a key twice (a `#[serde(flatten)]` map beside a field of the same
/// name writes one; PostgreSQL would keep the last value, SQLite the text, whose handler
/// refuses the duplicate).
pub fn payload_problem(payload: &str) -> Option<String> {
    let first = payload.trim_start().chars().next();
    let got = match first {
        Some('{') => None,
        Some('[') => Some("an array"),
        Some('"') => Some("a string"),
        Some('t' | 'f') => Some("a boolean"),
        Some('n') => Some("null"),
        Some('-' | '0'..='9') => Some("a number"),
        Some(_) => Some("not JSON"),
        None => Some("nothing"),
    };
    if let Some(got) = got {
        return Some(format!("must be a JSON object, got {got}"));
    }
    if payload.contains('\0') || has_nul_escape(payload) {
        return Some(
            "must not contain a NUL character (\\u0000): PostgreSQL's jsonb cannot store one"
                .into(),
        );
    }
    if let Some(p) = crate::model::json_size::depth_problem(payload) {
        return Some(format!("{p} by its handler"));
    }
    crate::model::json_size::json_problem(payload)
}

/// Whether JSON text holds the escape `\u0000`: a backslash that is not itself escaped,
/// followed by `u0000`.
pub(crate) fn has_nul_escape(json: &str) -> bool {
    let bytes = json.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' {
            if bytes[i + 1..].starts_with(b"u0000") {
                return true;
            }
            i += 2; // the escaped character, whatever it is
        } else {
            i += 1;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{JobContext, JobError};
    use serde::{Deserialize, Serialize};

    #[derive(Serialize, Deserialize)]
    struct Noop {
        n: u32,
    }

    impl Job for Noop {
        const KIND: &'static str = "noop";
        async fn perform(self, _: JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }

    fn build(options: EnqueueOptions) -> Result<NewJob, EnqueueError> {
        NewJob::build(&Noop { n: 1 }, options, DEFAULT_PAYLOAD_LIMIT)
    }

    fn rejected_option(result: Result<NewJob, EnqueueError>) -> &'static str {
        match result {
            Err(EnqueueError::InvalidOption { option, .. }) => option,
            other => panic!("expected an invalid option, got {other:?}"),
        }
    }

    #[test]
    fn a_deadline_not_after_the_run_time_is_refused() {
        let t = Utc::now() + chrono::Duration::hours(1);
        let at = |run: DateTime<Utc>, deadline: DateTime<Utc>| EnqueueOptions {
            run_at: RunAt::At(run),
            deadline: Some(Deadline::At(deadline)),
            ..EnqueueOptions::default()
        };
        assert_eq!(rejected_option(build(at(t, t))), "deadline");
        assert_eq!(
            rejected_option(build(at(t, t - chrono::Duration::seconds(1)))),
            "deadline"
        );
        assert!(build(at(t, t + chrono::Duration::seconds(1))).is_ok());
        let delays = |run: u64, deadline: u64| EnqueueOptions {
            run_at: RunAt::In(Duration::from_secs(run)),
            deadline: Some(Deadline::In(Duration::from_secs(deadline))),
            ..EnqueueOptions::default()
        };
        assert_eq!(rejected_option(build(delays(60, 30))), "deadline");
        assert!(build(delays(30, 60)).is_ok());
    }

    #[test]
    fn a_unique_scope_or_a_replace_without_a_unique_key_is_refused() {
        let scope = EnqueueOptions {
            unique_scope: UniqueScope::UntilStarted,
            ..EnqueueOptions::default()
        };
        assert_eq!(rejected_option(build(scope)), "unique_scope");
        let replace = EnqueueOptions {
            on_duplicate: OnDuplicate::Replace,
            ..EnqueueOptions::default()
        };
        assert_eq!(rejected_option(build(replace)), "on_duplicate");
        let keyed = EnqueueOptions {
            unique_key: Some("k".into()),
            unique_scope: UniqueScope::UntilStarted,
            on_duplicate: OnDuplicate::Replace,
            ..EnqueueOptions::default()
        };
        assert!(build(keyed).is_ok());
    }

    #[test]
    fn applies_the_jobs_defaults() {
        let new = build(EnqueueOptions::default()).unwrap();
        assert_eq!(new.kind, "noop");
        assert_eq!(new.queue, "default");
        assert_eq!(new.payload, r#"{"n":1}"#);
        assert_eq!(new.max_attempts, 25);
        assert_eq!(new.payload_version, 1);
    }

    #[test]
    fn bad_options_are_rejected_by_name() {
        let queue = |q: &str| EnqueueOptions {
            queue: Some(q.into()),
            ..Default::default()
        };
        assert_eq!(rejected_option(build(queue(""))), "queue");
        assert_eq!(rejected_option(build(queue("has space"))), "queue");
        assert_eq!(rejected_option(build(queue(&"q".repeat(200)))), "queue");
        let priority = EnqueueOptions {
            priority: Some(-1),
            ..Default::default()
        };
        assert_eq!(rejected_option(build(priority)), "priority");
        let attempts = EnqueueOptions {
            max_attempts: Some(0),
            ..Default::default()
        };
        assert_eq!(rejected_option(build(attempts)), "max_attempts");
    }

    #[test]
    fn the_forbidden_characters_are_unicode_whitespace_control_and_format_characters() {
        use unicode_properties::{GeneralCategory as G, UnicodeGeneralCategory};
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            let category = c.general_category();
            let unicode = c.is_whitespace()
                || matches!(
                    category,
                    G::Control
                        | G::Format
                        | G::SpaceSeparator
                        | G::LineSeparator
                        | G::ParagraphSeparator
                );
            // U+2065 is unassigned, kept inside its block of format characters.
            let expected = unicode || c == '\u{2065}';
            assert_eq!(
                !allowed_in_name(c),
                expected,
                "U+{:04X} ({category:?})",
                u32::from(c)
            );
        }
    }

    #[test]
    fn name_problems_name_the_character_and_its_place() {
        assert_eq!(name_problem("mail.send"), None);
        assert_eq!(name_problem("очередь"), None);
        assert_eq!(
            name_problem("a\u{a0}b").as_deref(),
            Some(
                "must not contain whitespace, control or format characters (U+00A0 at character 2)"
            )
        );
        assert_eq!(
            name_problem("ab\u{e0041}").as_deref(),
            Some("must not contain whitespace, control or format characters (U+E0041 at character 3)")
        );
        assert_eq!(name_problem("").as_deref(), Some("must not be empty"));
    }

    #[test]
    fn payloads_are_json_objects_without_nul() {
        assert_eq!(payload_problem(r#"{"a":1}"#), None);
        assert_eq!(
            payload_problem(r#" {"a":"\\u0000"}"#),
            None,
            "an escaped backslash"
        );
        for (json, got) in [
            ("[77,true]", "an array"),
            (r#""sk""#, "a string"),
            ("null", "null"),
            ("-1", "a number"),
            ("true", "a boolean"),
        ] {
            assert_eq!(
                payload_problem(json),
                Some(format!("must be a JSON object, got {got}"))
            );
        }
        assert!(payload_problem(r#"{"a":"\u0000"}"#)
            .unwrap()
            .contains("NUL"));
        assert!(payload_problem(r#"{"a":"\\\u0000"}"#)
            .unwrap()
            .contains("NUL"));
    }

    #[test]
    fn a_bulk_enqueue_names_the_job_it_refuses() {
        let jobs = [
            NewJob::new("mail.send", r#"{"to":1}"#),
            NewJob::new("mail.send", r#"{"to":1,"to":2}"#),
        ];
        let e = NewJob::validate_all(&jobs, DEFAULT_PAYLOAD_LIMIT).unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with(
                "invalid enqueue option `payload`: the job at index 1 of 2 (kind `mail.send`): "
            ) && text.contains("the key `to` twice"),
            "{text}"
        );
        // One job alone is named by its error as before.
        let e = NewJob::validate_all(&jobs[1..], DEFAULT_PAYLOAD_LIMIT).unwrap_err();
        assert!(!e.to_string().contains("of 1"), "{e}");
    }

    #[test]
    fn payloads_every_reader_reads_alike() {
        for json in [
            r#"{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}"#,
            r#"{"\u00e9":1,"é2":2,"big":18446744073709551615,"neg":-9223372036854775808}"#,
            r#"{"f":1.5e300,"s":"\ud83d\ude00"}"#,
        ] {
            assert_eq!(payload_problem(json), None, "{json}");
        }
        for (json, says) in [
            (r#"{"amount":5,"amount":999}"#, "the key `amount` twice"),
            (r#"{"a":{"x":1,"x":2}}"#, "the key `x` twice"),
            (r#"{"a":[{"y":1,"\u0079":2}]}"#, "the key `y` twice"),
            (r#"{"a":"\ud800"}"#, "hex escape"),
            (r#"{"a":"\udc00x"}"#, "hex escape"),
            (r#"{"\ud800":1}"#, "hex escape"),
            (r#"{"a":1e400}"#, "out of range"),
            (r#"{"a":1,}"#, "trailing comma"),
            (r#"{"a":1} {}"#, "trailing characters"),
        ] {
            let problem = payload_problem(json).unwrap_or_default();
            assert!(problem.contains(says), "{json}: {problem}");
        }
        let long = "k".repeat(200);
        let problem = payload_problem(&format!(r#"{{"{long}":1,"{long}":2}}"#)).unwrap();
        assert!(problem.len() < 200, "{problem}");
    }

    #[test]
    fn a_job_waited_for_with_two_modes_is_refused_naming_it_and_both_modes() {
        let on = |on, mode| Dependency { on, mode };
        let both = EnqueueOptions {
            depends_on: vec![
                on(DependsOn::Job(41), DependencyMode::Completed),
                on(DependsOn::Job(7), DependencyMode::Finished),
                on(DependsOn::Job(41), DependencyMode::Finished),
            ],
            ..Default::default()
        };
        match build(both) {
            Err(EnqueueError::InvalidOption { option, reason }) => {
                assert_eq!(option, "depends_on");
                assert_eq!(
                    reason,
                    "job 41 is waited for with two modes, `depends_on` (run once it has \
                     completed) and `after_all` (run once it has finished, however it ended): \
                     name it once, with the mode meant"
                );
            }
            other => panic!("expected depends_on refused, got {other:?}"),
        }
        // A row built by hand, waiting for a job of its own bulk enqueue.
        let mut row = NewJob::new("noop", "{}");
        row.depends_on = vec![
            on(DependsOn::Batch(2), DependencyMode::Finished),
            on(DependsOn::Batch(2), DependencyMode::Completed),
        ];
        let err = row.validate(DEFAULT_PAYLOAD_LIMIT).unwrap_err().to_string();
        assert!(
            err.contains("job 2 of the batch is waited for with two modes, `after_all`"),
            "{err}"
        );
    }

    #[test]
    fn a_job_waited_for_twice_with_one_mode_is_waited_for_once() {
        let on = |id| Dependency {
            on: DependsOn::Job(id),
            mode: DependencyMode::Completed,
        };
        let twice = EnqueueOptions {
            depends_on: vec![on(3), on(5), on(3)],
            ..Default::default()
        };
        assert_eq!(build(twice).unwrap().depends_on, [on(3), on(5)]);
        let mut row = NewJob::new("noop", "{}");
        row.depends_on = vec![on(3), on(3)];
        assert!(row.validate(DEFAULT_PAYLOAD_LIMIT).is_ok());
    }

    #[test]
    fn oversized_payloads_are_rejected_with_their_size() {
        let err = NewJob::build(&Noop { n: 1 }, EnqueueOptions::default(), 4).unwrap_err();
        assert!(matches!(
            err,
            EnqueueError::PayloadTooLarge {
                size: 7,
                limit: 4,
                ..
            }
        ));
        assert_eq!(
            err.to_string(),
            "payload of `noop` is 7 bytes, over the limit of 4 bytes"
        );
    }

    #[derive(Serialize, Deserialize)]
    struct Measure {
        x: f64,
        limit: Option<f64>,
    }

    impl Job for Measure {
        const KIND: &'static str = "measure";
        async fn perform(self, _: JobContext) -> Result<(), JobError> {
            Ok(())
        }
    }

    /// serde_json writes NaN and the infinities as `null`: a payload holding one is refused,
    /// naming the field, rather than stored as a job that decodes as something else (an
    /// `Option` as `None`) or not at all.
    #[test]
    fn a_payload_float_json_cannot_hold_is_refused_naming_it() {
        let build = |x: f64, limit: Option<f64>| {
            NewJob::build(
                &Measure { x, limit },
                EnqueueOptions::default(),
                DEFAULT_PAYLOAD_LIMIT,
            )
        };
        assert!(build(1.5, None).is_ok());
        for (x, limit, said) in [
            (f64::NAN, None, "`x` is NaN"),
            (f64::INFINITY, None, "`x` is an infinity"),
            (0.0, Some(f64::NAN), "`limit` is NaN"),
        ] {
            let err = build(x, limit).expect_err("refused");
            assert!(matches!(err, EnqueueError::Serialize { .. }), "{err:?}");
            let text = err.to_string();
            assert!(
                text.starts_with("payload of `measure` could not be serialized: ")
                    && text.contains(said),
                "{text}"
            );
        }
    }
}
