//! Reads for operator tools (a CLI, a dashboard): a job's recorded steps, listing pages that
//! read a bounded number of rows whatever their filter, the queues at a glance from the partial
//! indexes, and a reconcile check. On [`PgStore`] (every job) and [`TenantAdmin`] (one
//! tenant's jobs; no [`check`](PgStore::check), which is about the whole table).

use std::time::Duration;

use chrono::{DateTime, Utc};
use job_core::{JobFilter, JobId, JobState, StoreError};
use sqlx::{PgPool, Row};

use crate::error::Error;
use crate::summary::{self, JobSummary, SUMMARY_CLASS_CHARS, SUMMARY_MESSAGE_CHARS};
use crate::{sql, PgStore, TenantAdmin};

/// One recorded durable step of a job (`ctx.step`).
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    /// The step's name.
    pub name: String,
    /// Its recorded output, as the handler serialized it.
    pub output: serde_json::Value,
    /// The database's text of the output (`jsonb`'s): its numbers as stored, where `output`
    /// holds each as an f64, an i64 or a u64 (`1.50` reads back as `1.5`, 2^64 as
    /// `1.8446744073709552e19`). What an operator's view prints.
    pub output_text: String,
    /// The attempt that ran it.
    pub attempt: i32,
    /// When it was recorded (database time).
    pub recorded_at: DateTime<Utc>,
}

/// How much of a job's steps to read for a page: [`PgStore::steps_shown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShowSteps {
    /// Steps read at most (the first ones recorded).
    pub max_steps: u32,
    /// The largest output read, in bytes of its JSON text; a larger one is left out
    /// ([`ShownStep::output`] is `None`) and only its size is read.
    pub max_output_bytes: u32,
}

/// A job's first steps, as much as a page shows: [`PgStore::steps_shown`].
#[derive(Debug, Clone, PartialEq)]
pub struct ShownSteps {
    /// The first [`ShowSteps::max_steps`] steps, in the order they were recorded.
    pub steps: Vec<ShownStep>,
    /// Whether the job recorded more steps than these.
    pub more: bool,
}

/// One step of [`ShownSteps`].
#[derive(Debug, Clone, PartialEq)]
pub struct ShownStep {
    /// The step's name.
    pub name: String,
    /// Its recorded output, unless it is larger than [`ShowSteps::max_output_bytes`].
    pub output: Option<serde_json::Value>,
    /// The database's text of the output (`jsonb`'s, numbers as stored: see
    /// [`StepRecord::output_text`]), when `output` is read.
    pub output_text: Option<String>,
    /// The size of its output, in bytes of JSON text.
    pub output_bytes: u64,
    /// The attempt that ran it.
    pub attempt: i32,
    /// When it was recorded (database time).
    pub recorded_at: DateTime<Utc>,
}

/// Which listing page to read: [`PgStore::page`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    /// What to show. Its `states`, `kind`, `queue`, `tenant`, `tag` and `ids` apply; its
    /// `limit` and `finalized_*` do not (see `size`).
    pub filter: JobFilter,
    /// Only jobs with a lower id than this (the previous page's [`Page::next`]); `None`: from
    /// the newest.
    pub before: Option<JobId>,
    /// Jobs on a page at most. Defaults to 50.
    pub size: u32,
    /// Rows a page looks at, at most: the `scan` newest ids below `before`, whatever the
    /// filter matches among them. Defaults to 20,000.
    pub scan: u32,
}

impl Default for PageRequest {
    fn default() -> Self {
        PageRequest {
            filter: JobFilter::default(),
            before: None,
            size: 50,
            scan: 20_000,
        }
    }
}

/// A listing page, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page {
    /// The matching jobs, highest id first: what a listing shows of each, not its payload
    /// (read a whole job with [`Store::get`](job_core::Store::get)).
    pub jobs: Vec<JobSummary>,
    /// Where the next page starts (its [`PageRequest::before`]); `None` when the page reached
    /// the oldest row.
    pub next: Option<JobId>,
    /// The lowest id this page looked at: jobs below it were not looked at yet. Below
    /// [`Page::next`] only when the page filled up before its scan window ended.
    pub scanned_down_to: Option<JobId>,
    /// The database's clock when the page was read. A job finished after it was not on the
    /// page: an action confirmed from the page (the dashboard's bulk purge) passes it as
    /// [`JobFilter::finalized_to`] so that it leaves alone what its operator never saw.
    pub read_at: DateTime<Utc>,
}

/// How many jobs of a queue are in each state, from [`PgStore::overview`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueOverview {
    /// The queue.
    pub queue: String,
    /// Jobs due later (`scheduled`).
    pub scheduled: u64,
    /// Jobs ready to run (`available`).
    pub available: u64,
    /// Jobs waiting out a backoff (`retryable`).
    pub retryable: u64,
    /// Jobs running (holding a lease).
    pub running: u64,
    /// Running jobs reported stuck (`JobRow::stuck_since`).
    pub stuck: u64,
    /// Dead letters (`discarded`).
    pub discarded: u64,
    /// How long its oldest due waiting job has been due.
    pub oldest_due: Option<Duration>,
    /// Jobs completed within [`Overview::window`].
    pub recent_completed: u64,
    /// Jobs discarded within [`Overview::window`].
    pub recent_discarded: u64,
    /// Jobs cancelled within [`Overview::window`].
    pub recent_cancelled: u64,
    /// Whether the waiting jobs read of this queue reached [`Overview::queue_cap`] (its
    /// available ones, or its scheduled and retryable ones), whatever their tenant:
    /// `scheduled`, `available` and `retryable` (counted in claim order) are then lower bounds.
    pub waiting_capped: bool,
}

/// The queues at a glance: [`PgStore::overview`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overview {
    /// One entry per queue that has waiting, running or dead jobs or finished some within the
    /// window, by name.
    pub queues: Vec<QueueOverview>,
    /// The rows each part (running, dead letters, recently finished) reads at most, whatever
    /// the tenant; and the most the waiting jobs of one queue read, of each kind of state.
    pub cap: u32,
    /// The rows the waiting jobs of each queue read, of each kind of state (available; due
    /// later): `cap`, or less when many queues have waiting jobs (ten times `cap` in all).
    pub queue_cap: u32,
    /// On a tenant's overview: whether a queue is missing because the waiting jobs read of it
    /// (its first `queue_cap` in claim order) were all other tenants': this tenant's may
    /// wait behind them.
    pub waiting_unseen: bool,
    /// Parts that read `cap` rows (`running`, `discarded`, `recent`): their counts are lower
    /// bounds. Waiting jobs are capped per queue ([`QueueOverview::waiting_capped`]).
    pub capped: Vec<&'static str>,
    /// How far back "recent" reaches.
    pub window: Duration,
    /// Whether more queues had waiting jobs than [`OVERVIEW_QUEUES`]: only the first ones by
    /// name (and those with running, dead or recently finished jobs) are listed.
    pub queues_capped: bool,
}

/// The queues with waiting jobs that [`PgStore::overview`] looks at, at most (the first ones by
/// name): each costs an index probe and a bounded read, so that a table of many queues cannot
/// make the overview read one per queue.
pub const OVERVIEW_QUEUES: u32 = 1000;

impl Overview {
    /// Whether the counts of `part` are lower bounds.
    pub fn is_capped(&self, part: &str) -> bool {
        self.capped.contains(&part)
    }
}

/// What [`PgStore::check`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Check {
    /// Every job per state, exactly.
    pub counts: Vec<(JobState, u64)>,
    /// Rows holding a lease.
    pub leases_held: u64,
    /// Running rows whose lease has expired (the rescuer's to take).
    pub leases_expired: u64,
    /// Running rows whose lease expired more than one lease ago: no rescuer is taking them.
    pub leases_overdue: u64,
    /// The oldest lease expiry, if any lease is held.
    pub oldest_expiry: Option<DateTime<Utc>>,
    /// Running jobs reported stuck.
    pub stuck: u64,
    /// Rows holding a lease that are not running (the table's constraint forbids it).
    pub leases_not_running: u64,
    /// Recorded steps whose job row is gone.
    pub orphan_steps: u64,
    /// Jobs whose step count or bytes in `job.step_totals`, which a step's save reads for the
    /// job's limits, disagree with their recorded steps (triggers keep them; they drift only
    /// where the triggers did not run).
    pub step_totals_off: u64,
    /// Pending jobs that wait for nothing: no unresolved dependency, and no ordering key or a
    /// key without a head. Nothing runs them (but a keyed one whose head has just ended, which
    /// the stager's next pass promotes).
    pub pending_stranded: u64,
    /// Dead letters per class of their last error, most first.
    pub dead_letters_by_class: Vec<(String, u64)>,
    /// The migrations of this build the database has not recorded: workers of this build
    /// claim nothing until they are applied (see `Store::schema_lag`).
    pub schema_lag: Option<job_core::SchemaLag>,
}

impl Check {
    /// What is wrong, one line each: migrations of this build missing, leases expired for over
    /// a lease, leases on rows that are not running, steps without a job, step totals that
    /// disagree with the steps, pending jobs that wait for nothing. Empty when the queue
    /// reconciles.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(lag) = &self.schema_lag {
            out.push(format!(
                "{lag}: workers of this build claim nothing until it is applied (`job migrate`, \
                 as the role that owns the schema)"
            ));
        }
        if self.leases_overdue > 0 {
            out.push(format!(
                "{} running job(s) hold a lease that expired more than a lease ago: is any \
                 worker (rescuer) running?",
                self.leases_overdue
            ));
        }
        if self.leases_not_running > 0 {
            out.push(format!(
                "{} job(s) hold a lease without running",
                self.leases_not_running
            ));
        }
        if self.orphan_steps > 0 {
            out.push(format!(
                "{} recorded step(s) belong to no job",
                self.orphan_steps
            ));
        }
        if self.step_totals_off > 0 {
            out.push(format!(
                "{} job(s) have step totals (job.step_totals) that disagree with their recorded \
                 steps, which their next steps' limits read: count them again, as the owner, \
                 with `BEGIN; LOCK TABLE job.steps IN SHARE MODE; DELETE FROM job.step_totals; \
                 INSERT INTO job.step_totals SELECT job_id, count(*), \
                 sum(coalesce(output_bytes, octet_length(output::text))) FROM job.steps GROUP BY \
                 job_id; COMMIT;`",
                self.step_totals_off
            ));
        }
        if self.pending_stranded > 0 {
            out.push(format!(
                "{} pending job(s) wait for nothing (no unresolved dependency, no ordering key \
                 head): nothing will run them (a keyed one whose head has just ended waits for \
                 the stager's next pass: check again); writing them pending again (UPDATE \
                 job.jobs SET state = 'pending' WHERE ...) releases them (migration 0040)",
                self.pending_stranded
            ));
        }
        out
    }
}

/// The scope an operator read runs in: every job, or one tenant's.
#[derive(Clone, Copy)]
struct Reader<'a> {
    pool: &'a PgPool,
    tenant: Option<&'a str>,
}

impl Reader<'_> {
    async fn steps(self, id: JobId) -> Result<Vec<StepRecord>, Error> {
        let rows = sqlx::query(sql::INSPECT_STEPS)
            .bind(id)
            .bind(self.tenant)
            .fetch_all(self.pool)
            .await
            .map_err(Error::query("inspect_steps"))?;
        rows.iter()
            .map(|r| {
                Ok(StepRecord {
                    name: r.try_get("name")?,
                    output: crate::row::json(r, "output")?.unwrap_or_default(),
                    output_text: r.try_get("output_text")?,
                    attempt: r.try_get("attempt")?,
                    recorded_at: r.try_get("recorded_at")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Error::query("inspect_steps"))
    }

    async fn steps_shown(self, id: JobId, show: ShowSteps) -> Result<ShownSteps, Error> {
        let max_steps = usize::try_from(show.max_steps).unwrap_or(usize::MAX);
        let rows = sqlx::query(sql::INSPECT_STEPS_SHOWN)
            .bind(id)
            .bind(self.tenant)
            .bind(i32::try_from(show.max_output_bytes).unwrap_or(i32::MAX))
            .bind(i32::try_from(show.max_steps.saturating_add(1)).unwrap_or(i32::MAX))
            .fetch_all(self.pool)
            .await
            .map_err(Error::query("inspect_steps_shown"))?;
        let more = rows.len() > max_steps;
        let steps = rows
            .iter()
            .take(max_steps)
            .map(|r| {
                Ok(ShownStep {
                    name: r.try_get("name")?,
                    output: crate::row::json(r, "output")?,
                    output_text: r.try_get("output_text")?,
                    output_bytes: u64::try_from(r.try_get::<i64, _>("output_bytes")?).unwrap_or(0),
                    attempt: r.try_get("attempt")?,
                    recorded_at: r.try_get("recorded_at")?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Error::query("inspect_steps_shown"))?;
        Ok(ShownSteps { steps, more })
    }

    async fn summaries(self, filter: &JobFilter) -> Result<Vec<JobSummary>, Error> {
        let states = filter.states.iter().map(|s| s.as_str()).collect();
        let query = sqlx::query(sql::LIST_SUMMARY.as_str());
        let rows = crate::admin::bind_filter(query, filter, states, self.tenant)
            .bind(SUMMARY_CLASS_CHARS as i32)
            .bind(SUMMARY_MESSAGE_CHARS as i32)
            .fetch_all(self.pool)
            .await
            .map_err(Error::query("list_summary"))?;
        rows.iter().map(summary::decode).collect()
    }

    async fn page(self, request: &PageRequest) -> Result<Page, Error> {
        let size = request.size.max(1);
        let scan = request.scan.max(size);
        let (low, n, read_at): (Option<JobId>, i64, DateTime<Utc>) =
            sqlx::query_as(sql::INSPECT_WINDOW)
                .bind(request.before)
                .bind(i32::try_from(scan).unwrap_or(i32::MAX))
                .fetch_one(self.pool)
                .await
                .map_err(Error::query("inspect_window"))?;
        let Some(low) = low else {
            return Ok(Page {
                jobs: Vec::new(),
                next: None,
                scanned_down_to: None,
                read_at,
            });
        };
        let window_full = n >= i64::from(scan);
        let filter = &request.filter;
        let states: Vec<&str> = filter.states.iter().map(|s| s.as_str()).collect();
        // Not a prepared statement kept for reuse: a generic plan could not see which of the
        // optional filters are set.
        let rows = sqlx::query(sql::INSPECT_PAGE.as_str())
            .persistent(false)
            .bind(states)
            .bind(&filter.kind)
            .bind(&filter.queue)
            .bind(&filter.tenant)
            .bind(&filter.tag)
            .bind(&filter.ids)
            .bind(low)
            .bind(request.before)
            .bind(i32::try_from(size.saturating_add(1)).unwrap_or(i32::MAX))
            .bind(self.tenant)
            .bind(SUMMARY_CLASS_CHARS as i32)
            .bind(SUMMARY_MESSAGE_CHARS as i32)
            .fetch_all(self.pool)
            .await
            .map_err(Error::query("inspect_page"))?;
        let mut jobs = rows
            .iter()
            .map(summary::decode)
            .collect::<Result<Vec<_>, Error>>()?;
        let next = if jobs.len() > size as usize {
            jobs.truncate(size as usize);
            jobs.last().map(|j| j.id)
        } else if window_full {
            Some(low)
        } else {
            None
        };
        Ok(Page {
            jobs,
            next,
            scanned_down_to: Some(low),
            read_at,
        })
    }

    async fn overview(self, cap: u32, window: Duration) -> Result<Overview, Error> {
        // Further back than that, `now() - window` leaves the timestamps PostgreSQL has.
        let window = window.min(job_core::MAX_DURATION);
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(Error::query("inspect_overview"))?;
        sqlx::query(sql::JIT_OFF)
            .execute(&mut *tx)
            .await
            .map_err(Error::query("jit_off"))?;
        let rows: Vec<(String, String, String, i64, Option<i64>)> =
            sqlx::query_as(sql::INSPECT_OVERVIEW)
                .persistent(false)
                .bind(self.tenant)
                .bind(i32::try_from(cap).unwrap_or(i32::MAX))
                .bind(window.as_secs_f64())
                .bind(i32::try_from(OVERVIEW_QUEUES).unwrap_or(i32::MAX))
                .fetch_all(&mut *tx)
                .await
                .map_err(Error::query("inspect_overview"))?;
        tx.commit()
            .await
            .map_err(Error::query("inspect_overview"))?;
        let mut queues: Vec<QueueOverview> = Vec::new();
        let mut queues_capped = false;
        // What each part read whatever the tenant, and the rows each waiting part read per
        // queue at most: a part that read all it could has counts that are lower bounds.
        let mut read_waiting: Vec<(String, String, u64)> = Vec::new();
        let mut read = [0u64; 3];
        let (mut budget_available, mut budget_later) = (u64::from(cap), u64::from(cap));
        let mut waiting_unseen = false;
        for (section, queue, state, n, oldest_ms) in rows {
            let n = n.unsigned_abs();
            match (section.as_str(), state.as_str()) {
                ("capped", _) => {
                    queues_capped = true;
                    continue;
                }
                ("budget", "available") => budget_available = n,
                ("budget", "later") => budget_later = n,
                ("read", "running") => read[0] = n,
                ("read", "discarded") => read[1] = n,
                ("read", "recent") => read[2] = n,
                ("read", _) => read_waiting.push((queue.clone(), state.clone(), n)),
                _ => {}
            }
            if section != "now" && section != "recent" {
                continue;
            }
            let at = match queues.binary_search_by(|q| q.queue.as_str().cmp(&queue)) {
                Ok(at) => at,
                Err(at) => {
                    queues.insert(
                        at,
                        QueueOverview {
                            queue: queue.clone(),
                            ..QueueOverview::default()
                        },
                    );
                    at
                }
            };
            let q = &mut queues[at];
            match (section.as_str(), state.as_str()) {
                ("now", "scheduled") => q.scheduled = n,
                ("now", "available") => q.available = n,
                ("now", "retryable") => q.retryable = n,
                ("now", "running") => q.running = n,
                ("now", "stuck") => q.stuck = n,
                ("now", "discarded") => q.discarded = n,
                ("recent", "completed") => q.recent_completed = n,
                ("recent", "discarded") => q.recent_discarded = n,
                ("recent", "cancelled") => q.recent_cancelled = n,
                _ => {}
            }
            if let Some(ms) = oldest_ms {
                let age = Duration::from_millis(ms.unsigned_abs());
                q.oldest_due = Some(q.oldest_due.map_or(age, |a| a.max(age)));
            }
        }
        for (queue, part, n) in read_waiting {
            let budget = if part == "available" {
                budget_available
            } else {
                budget_later
            };
            if n >= budget {
                match queues.binary_search_by(|q| q.queue.as_str().cmp(&queue)) {
                    Ok(at) => queues[at].waiting_capped = true,
                    // On a tenant's overview: the jobs read were all other tenants'.
                    Err(_) => waiting_unseen = true,
                }
            }
        }
        let capped = ["running", "discarded", "recent"]
            .into_iter()
            .zip(read)
            .filter(|(_, n)| *n >= u64::from(cap))
            .map(|(part, _)| part)
            .collect();
        Ok(Overview {
            queues,
            cap,
            queue_cap: u32::try_from(budget_available.min(budget_later)).unwrap_or(cap),
            waiting_unseen,
            capped,
            window,
            queues_capped,
        })
    }
}

fn parse_state(state: &str) -> Result<JobState, Error> {
    state
        .parse()
        .map_err(|e: job_core::UnknownState| Error::Decode {
            id: 0,
            column: "state",
            reason: e.to_string(),
        })
}

impl PgStore {
    fn reader(&self) -> Reader<'_> {
        Reader {
            pool: self.pool(),
            tenant: None,
        }
    }

    /// The recorded durable steps of job `id`, in the order they were recorded (none when the
    /// job has none, or does not exist).
    pub async fn steps(&self, id: JobId) -> Result<Vec<StepRecord>, StoreError> {
        Ok(self.reader().steps(id).await?)
    }

    /// The first steps of job `id`, as much as a page shows: at most `show.max_steps` of
    /// them, each output only when it is at most `show.max_output_bytes` of JSON text. One
    /// statement by primary key, bounded in rows and bytes whatever the job recorded.
    pub async fn steps_shown(&self, id: JobId, show: ShowSteps) -> Result<ShownSteps, StoreError> {
        Ok(self.reader().steps_shown(id, show).await?)
    }

    /// One listing page, newest first, keyset-paginated by id. It reads at most
    /// [`PageRequest::scan`] rows, whatever its filter: a filter that matches few jobs gives
    /// short (even empty) pages with a [`Page::next`] to go on from. A filter field holding a
    /// NUL character is refused ([`JobFilter::check`](job_core::JobFilter::check)).
    pub async fn page(&self, request: &PageRequest) -> Result<Page, StoreError> {
        request.filter.check()?;
        Ok(self.reader().page(request).await?)
    }

    /// What a listing shows of the jobs [`Admin::list`](job_core::Admin::list) would return
    /// for `filter` (the same filter, order and limit): each job's [`JobSummary`], not its
    /// payload, result, progress or error history, so that listing many large jobs reads and
    /// holds little.
    pub async fn list_summaries(&self, filter: &JobFilter) -> Result<Vec<JobSummary>, StoreError> {
        filter.check()?;
        Ok(self.reader().summaries(filter).await?)
    }

    /// The queues at a glance, each part read through its partial index and capped at `cap`
    /// rows (counts at the cap are lower bounds: [`Overview::capped`]); "recent" is the last
    /// `window`, at most 100 years ([`MAX_DURATION`](job_core::MAX_DURATION); a longer one is
    /// taken as that). Never a count over the whole table.
    pub async fn overview(&self, cap: u32, window: Duration) -> Result<Overview, StoreError> {
        Ok(self.reader().overview(cap, window).await?)
    }

    /// Reconciles the queue: exact counts per state (one pass over the table), leases expired
    /// and expired for longer than `lease` (from the rescue index), leases on rows that do not
    /// run, steps without a job, pending jobs that wait for nothing, dead letters per class.
    /// [`Check::problems`] says what is wrong.
    pub async fn check(&self, lease: Duration) -> Result<Check, StoreError> {
        Ok(check(self.pool(), lease).await?)
    }
}

impl TenantAdmin {
    fn reader(&self) -> Reader<'_> {
        Reader {
            pool: self.store().pool(),
            tenant: Some(self.tenant()),
        }
    }

    /// The recorded steps of job `id` if it is this tenant's (see [`PgStore::steps`]).
    pub async fn steps(&self, id: JobId) -> Result<Vec<StepRecord>, StoreError> {
        Ok(self.reader().steps(id).await?)
    }

    /// The first steps of job `id` if it is this tenant's (see [`PgStore::steps_shown`]).
    pub async fn steps_shown(&self, id: JobId, show: ShowSteps) -> Result<ShownSteps, StoreError> {
        Ok(self.reader().steps_shown(id, show).await?)
    }

    /// A listing page of this tenant's jobs (see [`PgStore::page`]).
    pub async fn page(&self, request: &PageRequest) -> Result<Page, StoreError> {
        request.filter.check()?;
        Ok(self.reader().page(request).await?)
    }

    /// What a listing shows of this tenant's jobs matching `filter` (see
    /// [`PgStore::list_summaries`]).
    pub async fn list_summaries(&self, filter: &JobFilter) -> Result<Vec<JobSummary>, StoreError> {
        filter.check()?;
        Ok(self.reader().summaries(filter).await?)
    }

    /// The queues at a glance, counting this tenant's jobs only (see [`PgStore::overview`]).
    pub async fn overview(&self, cap: u32, window: Duration) -> Result<Overview, StoreError> {
        Ok(self.reader().overview(cap, window).await?)
    }
}

async fn check(pool: &PgPool, lease: Duration) -> Result<Check, Error> {
    let schema_lag = crate::migrate::schema_lag(pool).await?;
    let mut tx = pool.begin().await.map_err(Error::query("check_counts"))?;
    sqlx::query(sql::JIT_OFF)
        .execute(&mut *tx)
        .await
        .map_err(Error::query("jit_off"))?;
    let counts: Vec<(String, i64)> = sqlx::query_as(sql::CHECK_COUNTS)
        .fetch_all(&mut *tx)
        .await
        .map_err(Error::query("check_counts"))?;
    tx.commit().await.map_err(Error::query("check_counts"))?;
    let leases = sqlx::query(sql::CHECK_LEASES)
        .bind(i64::try_from(lease.as_millis()).unwrap_or(i64::MAX) as f64)
        .fetch_one(pool)
        .await
        .map_err(Error::query("check_leases"))?;
    let n = |column: &str| -> Result<u64, Error> {
        let v: i64 = leases
            .try_get(column)
            .map_err(Error::query("check_leases"))?;
        Ok(v.unsigned_abs())
    };
    let (orphan_steps, step_totals_off): (i64, i64) = sqlx::query_as(sql::CHECK_ORPHAN_STEPS)
        .fetch_one(pool)
        .await
        .map_err(Error::query("check_orphan_steps"))?;
    let pending_stranded: i64 = sqlx::query_scalar(sql::CHECK_PENDING_STRANDED)
        .fetch_one(pool)
        .await
        .map_err(Error::query("check_pending_stranded"))?;
    let classes: Vec<(String, i64)> = sqlx::query_as(sql::CHECK_DEAD_CLASSES)
        .fetch_all(pool)
        .await
        .map_err(Error::query("check_dead_classes"))?;
    Ok(Check {
        counts: counts
            .into_iter()
            .map(|(s, n)| Ok((parse_state(&s)?, n.unsigned_abs())))
            .collect::<Result<_, Error>>()?,
        leases_held: n("held")?,
        leases_expired: n("expired")?,
        leases_overdue: n("overdue")?,
        oldest_expiry: leases
            .try_get("oldest_expiry")
            .map_err(Error::query("check_leases"))?,
        stuck: n("stuck")?,
        leases_not_running: n("not_running")?,
        orphan_steps: orphan_steps.unsigned_abs(),
        step_totals_off: step_totals_off.unsigned_abs(),
        pending_stranded: pending_stranded.unsigned_abs(),
        dead_letters_by_class: classes
            .into_iter()
            .map(|(c, n)| (c, n.unsigned_abs()))
            .collect(),
        schema_lag,
    })
}
