//! Operating on jobs from outside the runtime: cancel, pause and resume, list, redrive and
//! purge dead letters, and stats. A backend implements [`Admin`] next to [`Store`]; the
//! worker runtime does not use it.
//!
//! [`Store`]: crate::Store

use std::future::Future;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::contract::store::JobRow;
use crate::model::error::StoreError;
use crate::model::job::JobId;
use crate::model::state::JobState;

/// What [`Admin::cancel`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cancelled {
    /// The job was waiting: it is `cancelled` now, with a `cancelled` entry in its history.
    Now,
    /// The job is running: cancellation was requested. The handler sees it at the worker's
    /// next heartbeat (`ctx.cancelled()`, `ctx.is_cancelled()`), and the job ends
    /// `cancelled`, never retried.
    Requested,
    /// The job had already finished in this state: nothing changed.
    AlreadyFinished(JobState),
    /// No job has this id.
    NotFound,
}

/// What to pause: every job of a queue, or every job of a kind in any queue.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pause {
    /// A queue by name.
    Queue(String),
    /// A kind by name.
    Kind(String),
}

impl Pause {
    /// The scope name stored (`queue` or `kind`).
    pub fn scope(&self) -> &'static str {
        match self {
            Pause::Queue(_) => "queue",
            Pause::Kind(_) => "kind",
        }
    }

    /// The queue's or kind's name.
    pub fn name(&self) -> &str {
        match self {
            Pause::Queue(n) | Pause::Kind(n) => n,
        }
    }

    /// Refused (naming the name) when no queue or kind can have the name
    /// ([`name_problem`](crate::name_problem)): [`Admin::pause`] checks it first, so that a
    /// pause that could match nothing is never reported done.
    pub fn check(&self) -> Result<(), StoreError> {
        match crate::model::new_job::name_problem(self.name()) {
            None => Ok(()),
            Some(problem) => Err(StoreError::refused(format!(
                "the {} name to pause or resume {problem}",
                self.scope()
            ))),
        }
    }

    /// [`Admin::resume`]'s check. `Ok(None)`: the name passes [`check`](Self::check).
    /// `Ok(Some(refusal))`: it does not, but a pause could still be stored under it (1 to
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN) bytes, no NUL): the stores' tables refuse such
    /// names since job-postgres's migration 0065 and job-sqlite's 22, but a pause written by
    /// hand before may hold one, and resuming deletes it; the refusal is the answer only when
    /// no pause held the name. `Err`: no pause can hold the name.
    pub fn check_resume(&self) -> Result<Option<StoreError>, StoreError> {
        let Err(refusal) = self.check() else {
            return Ok(None);
        };
        let name = self.name();
        let storable = !name.is_empty()
            && name.len() <= crate::model::new_job::MAX_NAME_LEN
            && !name.contains('\0');
        if storable {
            Ok(Some(refusal))
        } else {
            Err(refusal)
        }
    }
}

/// Who paused a queue or kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PausedBy {
    /// An operator ([`Admin::pause`]): paused until resumed.
    Operator,
    /// The kind's circuit breaker ([`JobOptions::breaker`](crate::JobOptions::breaker)):
    /// paused until resumed or until its cool-down ends.
    Breaker,
}

impl PausedBy {
    /// The name stored and shown (`operator` or `breaker`).
    pub fn as_str(self) -> &'static str {
        match self {
            PausedBy::Operator => "operator",
            PausedBy::Breaker => "breaker",
        }
    }

    /// Parses [`as_str`](Self::as_str)'s names.
    pub fn parse(name: &str) -> Option<PausedBy> {
        match name {
            "operator" => Some(PausedBy::Operator),
            "breaker" => Some(PausedBy::Breaker),
            _ => None,
        }
    }
}

/// One pause in force, with who made it, why and until when ([`Admin::pauses`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseEntry {
    /// What is paused.
    pub what: Pause,
    /// Who paused it.
    pub paused_by: PausedBy,
    /// Why, when the pause says (a breaker says what it counted).
    pub reason: Option<String>,
    /// Since when.
    pub paused_at: DateTime<Utc>,
    /// When it ends by itself (a breaker's cool-down); `None`: when resumed.
    pub resume_at: Option<DateTime<Utc>>,
}

/// Which jobs a listing, redrive or purge is about. Every field set must match; unset fields
/// match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only these ids.
    pub ids: Vec<JobId>,
    /// Only these states (listings; redrive and purge act on `discarded` jobs only).
    pub states: Vec<JobState>,
    /// Only this kind.
    pub kind: Option<String>,
    /// Only this queue.
    pub queue: Option<String>,
    /// Only this tenant.
    pub tenant: Option<String>,
    /// Only jobs carrying this tag.
    pub tag: Option<String>,
    /// Only jobs finished at or after this instant.
    pub finalized_from: Option<DateTime<Utc>>,
    /// Only jobs finished before this instant.
    pub finalized_to: Option<DateTime<Utc>>,
    /// At most this many jobs, oldest first. Defaults to 1,000 when `None`.
    pub limit: Option<u32>,
}

impl JobFilter {
    /// Dead letters (`discarded` jobs), all of them up to the default limit.
    pub fn dead_letters() -> Self {
        JobFilter {
            states: vec![JobState::Discarded],
            ..JobFilter::default()
        }
    }

    /// Only these ids.
    pub fn ids(ids: impl IntoIterator<Item = JobId>) -> Self {
        JobFilter {
            ids: ids.into_iter().collect(),
            ..JobFilter::default()
        }
    }

    /// The limit applied.
    pub fn effective_limit(&self) -> u32 {
        self.limit.unwrap_or(1000)
    }

    /// Refused (naming the field) when `kind`, `queue`, `tenant` or `tag` holds a NUL
    /// character, which no name can hold and PostgreSQL cannot take as text, or when
    /// `finalized_from` or `finalized_to` is outside [`EARLIEST_TIME`](crate::EARLIEST_TIME)
    /// to [`LATEST_TIME`](crate::LATEST_TIME) (no job carries such a time, and PostgreSQL
    /// cannot take some: `timestamp out of range`): [`Admin::list`],
    /// [`redrive`](Admin::redrive), [`purge`](Admin::purge) and [`stats`](Admin::stats) check
    /// it first, so such a filter is an error saying so rather than the database's.
    pub fn check(&self) -> Result<(), StoreError> {
        use chrono::Datelike;
        let times = [
            ("finalized_from", self.finalized_from),
            ("finalized_to", self.finalized_to),
        ];
        for (field, at) in times {
            if let Some(at) = at.filter(|at| !(1..=9999).contains(&at.year())) {
                return Err(StoreError::refused(format!(
                    "the filter's `{field}` must be between {} and {} (EARLIEST_TIME and \
                     LATEST_TIME), got {at}",
                    crate::EARLIEST_TIME,
                    crate::LATEST_TIME
                )));
            }
        }
        let fields = [
            ("kind", &self.kind),
            ("queue", &self.queue),
            ("tenant", &self.tenant),
            ("tag", &self.tag),
        ];
        match fields
            .into_iter()
            .find(|(_, value)| value.as_deref().is_some_and(|v| v.contains('\0')))
        {
            None => Ok(()),
            Some((field, _)) => Err(StoreError::refused(format!(
                "the filter's `{field}` holds a NUL character, which no {field} can hold"
            ))),
        }
    }
}

/// What a redrive did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redriven {
    /// Dead letters now `available` again with fresh attempts.
    pub redriven: Vec<JobId>,
    /// Dead letters left alone because an active job holds their unique key:
    /// `(dead letter, active job)`.
    pub skipped: Vec<(JobId, JobId)>,
}

/// Jobs of one queue in one state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateCount {
    /// The queue.
    pub queue: String,
    /// The state.
    pub state: JobState,
    /// How many jobs.
    pub count: u64,
}

/// Counts from the database, for dashboards and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Jobs per queue and state (pairs with no job are left out), by queue then state.
    pub counts: Vec<StateCount>,
    /// How long the oldest due waiting job (available, or scheduled/retryable past its run
    /// time) has been due.
    pub oldest_available_age: Option<Duration>,
    /// Discarded jobs.
    pub dead_letters: u64,
    /// Running jobs whose execution is reported stuck (`JobRow::stuck_since` is set): its
    /// code outlived its timeout, or being told to stop, by the worker's `stuck_after`.
    pub stuck: u64,
}

impl Stats {
    /// Jobs in `state` across all queues.
    pub fn in_state(&self, state: JobState) -> u64 {
        self.counts
            .iter()
            .filter(|c| c.state == state)
            .map(|c| c.count)
            .sum()
    }
}

/// Operator actions on stored jobs. Every method is one or two statements, decided by the
/// database.
pub trait Admin: Send + Sync {
    /// Cancels job `id` in whatever state it is (see [`Cancelled`]).
    fn cancel(&self, id: JobId) -> impl Future<Output = Result<Cancelled, StoreError>> + Send;

    /// Stops claims of a queue or kind on every worker; waiting jobs stay as they are.
    /// Returns false when it was paused already.
    fn pause(&self, what: &Pause) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Lets claims of a paused queue or kind resume. Returns false when it was not paused.
    /// A pause stored under a name no queue or kind can have (written by hand) is resumed
    /// too; such a name with no pause is refused as [`pause`](Self::pause) refuses it
    /// ([`Pause::check_resume`]).
    fn resume(&self, what: &Pause) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Everything paused now (by an operator, or by a breaker whose cool-down has not ended).
    /// A handle scoped to one tenant shows only what concerns that tenant's jobs (see the
    /// backend's tenant handle).
    fn paused(&self) -> impl Future<Output = Result<Vec<Pause>, StoreError>> + Send;

    /// Every pause in force, with who made it, why and until when (on a handle scoped to one
    /// tenant, those that concern its jobs, as [`paused`](Admin::paused)).
    fn pauses(&self) -> impl Future<Output = Result<Vec<PauseEntry>, StoreError>> + Send;

    /// Jobs matching `filter`, oldest first (by id), with their whole error history.
    fn list(
        &self,
        filter: &JobFilter,
    ) -> impl Future<Output = Result<Vec<JobRow>, StoreError>> + Send;

    /// Puts matching dead letters back to `available` with fresh attempts (attempt 0, due
    /// now, no deadline; the error history kept), through the unique guard: a dead letter
    /// whose key an active job holds is skipped and reported.
    fn redrive(
        &self,
        filter: &JobFilter,
    ) -> impl Future<Output = Result<Redriven, StoreError>> + Send;

    /// Deletes matching dead letters. Returns how many.
    fn purge(&self, filter: &JobFilter) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Counts per queue and state, the age of the oldest due job and the dead letters, of the
    /// jobs matching `filter`'s kind, queue, tenant and tag.
    fn stats(&self, filter: &JobFilter) -> impl Future<Output = Result<Stats, StoreError>> + Send;
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeZone, Utc};

    use super::JobFilter;

    #[test]
    fn a_filter_time_outside_the_jobs_range_is_refused_naming_the_field() {
        let too_early = DateTime::<Utc>::MIN_UTC;
        let too_late = Utc.with_ymd_and_hms(10_000, 1, 1, 0, 0, 0).unwrap();
        for (at, field) in [
            (too_early, "finalized_from"),
            (too_late, "finalized_from"),
            (too_early, "finalized_to"),
            (too_late, "finalized_to"),
        ] {
            let filter = if field == "finalized_from" {
                JobFilter {
                    finalized_from: Some(at),
                    ..JobFilter::default()
                }
            } else {
                JobFilter {
                    finalized_to: Some(at),
                    ..JobFilter::default()
                }
            };
            let said = filter.check().unwrap_err().to_string();
            assert!(said.contains(&format!("`{field}`")), "{said}");
            assert!(said.contains("0001-01-01T00:00:00Z"), "{said}");
        }
        let bounds = JobFilter {
            finalized_from: Some(crate::EARLIEST_TIME.parse().unwrap()),
            finalized_to: Some(crate::LATEST_TIME.parse().unwrap()),
            ..JobFilter::default()
        };
        bounds.check().expect("the bounds themselves are allowed");
    }
}
