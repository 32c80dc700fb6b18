//! How results are printed: tables (comfy-table) for people, JSON (serde_json) for scripts.

use std::borrow::Cow;
use std::fmt::{Display, Write as _};
use std::io::Write;

use chrono::{DateTime, Utc};
use comfy_table::presets::UTF8_FULL_CONDENSED;
use comfy_table::{CellAlignment, ContentArrangement, Table};
use job::{AttemptError, JobRow};
use job_postgres::{JobSummary, StepRecord};
use serde::Serialize;
use serde_json::value::RawValue;

/// A table with the house style: condensed borders, wrapped to the terminal when it is one.
pub(crate) fn table<I, S>(header: I) -> Table
where
    I: IntoIterator<Item = S>,
    S: Into<comfy_table::Cell>,
{
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header);
    table
}

/// Adds a row to `table`, each cell through [`printable`] (before the table measures it, so
/// that an escaped cell keeps the columns aligned).
pub(crate) fn add_row<I>(table: &mut Table, cells: I)
where
    I: IntoIterator,
    I::Item: AsRef<str>,
{
    table.add_row(
        cells
            .into_iter()
            .map(|c| printable(c.as_ref()).into_owned()),
    );
}

/// `text` with every character a terminal acts on rather than shows written as a visible
/// escape (`\u{1b}`, `\r`, `\t`): the C0 controls but the newline, DEL, the C1 controls, and
/// the invisible formatting characters that make text read as other text (zero-width
/// characters, bidirectional marks, embeddings, overrides and isolates, the BOM). Everything
/// printed for people goes through it ([`print`], [`add_row`]); `--json` stays exact JSON.
pub(crate) fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(c,
            '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

/// Right-aligns the given columns (numbers).
pub(crate) fn numeric(table: &mut Table, columns: &[usize]) {
    for &c in columns {
        if let Some(column) = table.column_mut(c) {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
}

pub(crate) fn json<T: Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).expect("plain data serializes")
}

/// A time as the tables print it: in UTC, marked `Z` (an operator in another zone reads it
/// as what it is); empty when there is none.
pub(crate) fn when(at: Option<DateTime<Utc>>) -> String {
    at.map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// At most `max` characters of one line of `text`, with an ellipsis when cut.
pub(crate) fn clip(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None if line.len() < text.len() => format!("{line}…"),
        None => line.to_owned(),
    }
}

/// A JSON value of a job's row as the command prints it: the database's own text of it when
/// read (numbers as stored: a `serde_json::Value` keeps a number as an f64, an i64 or a u64,
/// so `1.50` came back as `1.5`, 2^64 as `1.8446744073709552e19` and
/// `0.1000000000000000000000001` as `0.1`), else the row's value (one nested past what
/// serde_json reads, say).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum Exact<'a> {
    Text(&'a RawValue),
    Value(&'a serde_json::Value),
}

impl<'a> Exact<'a> {
    /// The database's `text` of `value` where it reads as the same kind of value, else `value`:
    /// a value nested past what serde_json reads is in the row as its text, in a JSON string,
    /// and is kept so, as `get` and `list` give it, where the database's text is no string.
    fn of(text: Option<&'a RawValue>, value: &'a serde_json::Value) -> Self {
        match text {
            Some(text) if text.get().starts_with('"') == value.is_string() => Exact::Text(text),
            _ => Exact::Value(value),
        }
    }

    /// Pretty text, for people (the database's, laid out as serde_json lays out the value).
    pub(crate) fn pretty(&self) -> String {
        match self {
            Exact::Text(raw) => job_web::pretty_json(raw.get(), usize::MAX).0,
            Exact::Value(value) => json(value),
        }
    }

    /// On one line: the database's text as it wrote it, or the value's compact JSON.
    pub(crate) fn line(&self) -> String {
        match self {
            Exact::Text(raw) => raw.get().to_owned(),
            Exact::Value(value) => value.to_string(),
        }
    }
}

/// The database's text of a job's payload, progress and result (`jsonb`'s), where it is JSON
/// serde_json reads.
#[derive(Debug, Default)]
pub(crate) struct ExactTexts {
    pub(crate) payload: Option<Box<RawValue>>,
    pub(crate) progress: Option<Box<RawValue>>,
    pub(crate) result: Option<Box<RawValue>>,
}

impl ExactTexts {
    /// Its texts, each kept only when serde_json reads it.
    pub(crate) fn new(
        payload: Option<String>,
        progress: Option<String>,
        result: Option<String>,
    ) -> ExactTexts {
        let raw = |text: Option<String>| text.and_then(|t| RawValue::from_string(t).ok());
        ExactTexts {
            payload: raw(payload),
            progress: raw(progress),
            result: raw(result),
        }
    }
}

/// A job as JSON: every column of its row.
#[derive(Debug, Serialize)]
pub(crate) struct JobView<'a> {
    id: i64,
    kind: &'a str,
    queue: &'a str,
    priority: i16,
    state: &'static str,
    payload: Exact<'a>,
    payload_version: i32,
    attempt: i32,
    max_attempts: i32,
    run_at: DateTime<Utc>,
    locked_until: Option<DateTime<Utc>>,
    locked_by: Option<&'a str>,
    cancel_requested: bool,
    errors: &'a [AttemptError],
    created_at: DateTime<Utc>,
    finalized_at: Option<DateTime<Utc>>,
    deadline: Option<DateTime<Utc>>,
    unique_key: Option<&'a str>,
    tags: &'a [String],
    tenant: Option<&'a str>,
    stuck_since: Option<DateTime<Utc>>,
    progress: Option<Exact<'a>>,
    result: Option<Exact<'a>>,
}

impl<'a> JobView<'a> {
    /// Job `j`, its payload, progress and result as `exact` has them where it does.
    pub(crate) fn new(j: &'a JobRow, exact: Option<&'a ExactTexts>) -> Self {
        let shown = |text: Option<&'a Box<RawValue>>, value: &'a serde_json::Value| {
            Exact::of(text.map(|t| &**t), value)
        };
        let exact = exact.unwrap_or(&NO_TEXTS);
        JobView {
            id: j.id,
            kind: &j.kind,
            queue: &j.queue,
            priority: j.priority,
            state: j.state.as_str(),
            payload: shown(exact.payload.as_ref(), &j.payload),
            payload_version: j.payload_version,
            attempt: j.attempt,
            max_attempts: j.max_attempts,
            run_at: j.run_at,
            locked_until: j.locked_until,
            locked_by: j.locked_by.as_deref(),
            cancel_requested: j.cancel_requested,
            errors: &j.errors,
            created_at: j.created_at,
            finalized_at: j.finalized_at,
            deadline: j.deadline,
            unique_key: j.unique_key.as_deref(),
            tags: &j.tags,
            tenant: j.tenant.as_deref(),
            stuck_since: j.stuck_since,
            progress: j
                .progress
                .as_ref()
                .map(|v| shown(exact.progress.as_ref(), v)),
            result: j.result.as_ref().map(|v| shown(exact.result.as_ref(), v)),
        }
    }

    /// Its payload, progress and result, as [`new`](Self::new) chose them.
    pub(crate) fn values(&self) -> (&Exact<'a>, Option<&Exact<'a>>, Option<&Exact<'a>>) {
        (&self.payload, self.progress.as_ref(), self.result.as_ref())
    }
}

/// No text read: every value is the row's.
static NO_TEXTS: ExactTexts = ExactTexts {
    payload: None,
    progress: None,
    result: None,
};

/// A recorded step as JSON, its output as the database wrote it (see [`Exact`]).
#[derive(Debug, Serialize)]
pub(crate) struct StepView<'a> {
    name: &'a str,
    attempt: i32,
    recorded_at: DateTime<Utc>,
    pub(crate) output: Exact<'a>,
}

impl<'a> From<&'a StepRecord> for StepView<'a> {
    fn from(s: &'a StepRecord) -> Self {
        // Borrowed from the record's text; one serde_json does not read keeps the value.
        let text: Option<&'a RawValue> = serde_json::from_str(&s.output_text).ok();
        StepView {
            name: &s.name,
            attempt: s.attempt,
            recorded_at: s.recorded_at,
            output: Exact::of(text, &s.output),
        }
    }
}

/// The one-line table of jobs `list` prints.
/// `job list`'s table, from the jobs' summaries (no payload is read to print it).
pub(crate) fn jobs_table(jobs: &[JobSummary]) -> Table {
    let mut t = table([
        "id",
        "state",
        "kind",
        "queue",
        "tenant",
        "attempt",
        "run at / finished",
        "last error",
    ]);
    for j in jobs {
        let state = match j.stuck_since {
            Some(_) => format!("{} (stuck)", j.state),
            None => j.state.to_string(),
        };
        let last = j
            .last_error
            .as_ref()
            .map(|e| format!("{}: {}", e.class, clip(&e.message, 60)))
            .unwrap_or_default();
        add_row(
            &mut t,
            [
                j.id.to_string(),
                state,
                j.kind.clone(),
                j.queue.clone(),
                j.tenant.clone().unwrap_or_default(),
                format!("{}/{}", j.attempt, j.max_attempts),
                when(j.finalized_at.or(Some(j.run_at))),
                last,
            ],
        );
    }
    numeric(&mut t, &[0, 5]);
    t
}

/// Writing to stdout failed (a full disk, a closed file): the command stops and says so.
#[derive(Debug, thiserror::Error)]
#[error("cannot write to stdout: {0}")]
pub(crate) struct StdoutError(#[from] std::io::Error);

/// Writes `text` as it is to stdout (the schema script).
pub(crate) fn print_raw(text: &str) -> Result<(), StdoutError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Writes `text` and a newline to stdout, for people: through [`printable`], so stored text
/// cannot drive the terminal.
pub(crate) fn print(text: impl Display) -> Result<(), StdoutError> {
    let text = text.to_string();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", printable(&text))?;
    out.flush()?;
    Ok(())
}

/// A JSON array written to stdout an element at a time, as [`print_json`] writes a whole one
/// (pretty, then a newline), for listings too large to hold.
pub(crate) struct JsonArray {
    empty: bool,
}

impl JsonArray {
    pub(crate) fn start() -> Result<JsonArray, StdoutError> {
        Ok(JsonArray { empty: true })
    }

    pub(crate) fn push<T: Serialize>(&mut self, value: &T) -> Result<(), StdoutError> {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", if self.empty { "[" } else { "," })?;
        self.empty = false;
        let text = json(value);
        let mut lines = text.lines().peekable();
        while let Some(line) = lines.next() {
            write!(out, "  {line}")?;
            if lines.peek().is_some() {
                writeln!(out)?;
            }
        }
        Ok(())
    }

    pub(crate) fn finish(self) -> Result<(), StdoutError> {
        let mut out = std::io::stdout().lock();
        if self.empty {
            writeln!(out, "[]")?;
        } else {
            write!(out, "\n]\n")?;
        }
        out.flush()?;
        Ok(())
    }
}

/// Writes `value` as pretty JSON and a newline to stdout, for scripts.
pub(crate) fn print_json<T: Serialize>(value: &T) -> Result<(), StdoutError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", json(value))?;
    out.flush()?;
    Ok(())
}
