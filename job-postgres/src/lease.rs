//! The lease protocol's statements: claim, heartbeat, guarded finalize, rescue and release.
//! Each takes any executor, so a caller can run one inside its own transaction.

use std::collections::HashSet;
use std::time::Duration;

use job_core::duration_millis;
use job_core::{
    storable_text, ClaimKind, ClaimRequest, ClaimedJob, Finalize, Finalized, HeartbeatReport,
    JobId, JobState, Lease, Outcome, Release, Renewal, Rescued, RescuedJob, MAX_ERROR_MESSAGE,
};
use sqlx::{PgExecutor, PgPool, Row};
use uuid::Uuid;

use crate::error::Error;
use crate::sql;

/// Claims due jobs; when a requested kind has a concurrency or a rate limit, inside a
/// transaction that first takes the advisory lock of each limited kind
/// (`sql/claim_lock.sql`), so that concurrent claimers never count the same free room twice.
/// Each rate-limited kind is claimed by a statement of its own (`sql/claim_rated.sql`, which
/// records its starts). So that claim order holds across them and the other kinds, the other
/// kinds' jobs ahead of the rate-limited kinds' first waiting job are claimed first
/// (`sql/claim.sql` with the bound), then the rate-limited kinds, then the other kinds again
/// with what is left of the limit: a limited kind with room to spare takes no job of another
/// kind's place, and one at its limit holds back none. Only the limited kinds with a job
/// available in the queue are locked and claimed (`sql/claim_limited_due.sql`): the others have
/// nothing to give, and locking them would make the claims of every queue wait for each other.
pub(crate) async fn claim_from_pool(
    pool: &PgPool,
    request: &ClaimRequest,
) -> Result<Vec<ClaimedJob>, Error> {
    let is_limited = |k: &ClaimKind| k.concurrency.is_some() || k.rate.is_some();
    let limited: Vec<&str> = request
        .kinds
        .iter()
        .filter(|k| is_limited(k))
        .map(|k| k.kind.as_str())
        .collect();
    if limited.is_empty() || request.limit == 0 {
        return claim(pool, request, &[]).await;
    }
    let due: Vec<String> = sqlx::query_scalar(sql::CLAIM_LIMITED_DUE)
        .bind(&request.queue)
        .bind(&limited)
        .fetch_all(pool)
        .await
        .map_err(Error::query("claim_limited_due"))?;
    // The limited kinds with jobs, in the order of their first job (the rate-limited ones are
    // claimed in this order), then the others.
    let mut kinds: Vec<ClaimKind> = due
        .iter()
        .filter_map(|d| request.kinds.iter().find(|k| &k.kind == d).cloned())
        .collect();
    kinds.extend(request.kinds.iter().filter(|k| !is_limited(k)).cloned());
    let request = ClaimRequest {
        kinds,
        ..request.clone()
    };
    if due.is_empty() {
        return claim(pool, &request, &[]).await;
    }
    claim_limited(pool, &request, due.iter().map(String::as_str).collect()).await
}

/// [`claim_from_pool`] when `limited` (kinds of `request` with a limit) have jobs available.
async fn claim_limited(
    pool: &PgPool,
    request: &ClaimRequest,
    limited: Vec<&str>,
) -> Result<Vec<ClaimedJob>, Error> {
    let mut tx = pool.begin().await.map_err(Error::query("begin"))?;
    sqlx::query(sql::CLAIM_LOCK)
        .bind(limited)
        .execute(&mut *tx)
        .await
        .map_err(Error::query("claim_lock"))?;
    let rated: Vec<&str> = request
        .kinds
        .iter()
        .filter(|k| k.rate.is_some())
        .map(|k| k.kind.as_str())
        .collect();
    let others = |limit: u32| ClaimRequest {
        queue: request.queue.clone(),
        kinds: request
            .kinds
            .iter()
            .filter(|k| k.rate.is_none())
            .cloned()
            .collect(),
        limit,
        worker_id: request.worker_id.clone(),
    };
    let mut claimed = Vec::new();
    if !rated.is_empty() && rated.len() < request.kinds.len() {
        claimed.extend(claim(&mut *tx, &others(request.limit), &rated).await?);
    }
    for kind in request.kinds.iter() {
        let Some(rate) = kind.rate else { continue };
        let left = request.limit.saturating_sub(claimed.len() as u32);
        if left == 0 {
            break;
        }
        let rows = sqlx::query(sql::CLAIM_RATED)
            .bind(&request.queue)
            .bind(&kind.kind)
            .bind(kind.max_version)
            .bind(duration_millis(kind.lease))
            .bind(i32::try_from(left).unwrap_or(i32::MAX))
            .bind(&request.worker_id)
            .bind(i32::try_from(rate.starts).unwrap_or(i32::MAX))
            .bind(window_millis(rate.per))
            .bind(
                kind.concurrency
                    .map(|c| i32::try_from(c).unwrap_or(i32::MAX)),
            )
            .fetch_all(&mut *tx)
            .await
            .map_err(Error::query("claim_rated"))?;
        claimed.extend(claimed_jobs(&rows).map_err(Error::query("claim_rated"))?);
    }
    let rest = others(request.limit.saturating_sub(claimed.len() as u32));
    claimed.extend(claim(&mut *tx, &rest, &[]).await?);
    tx.commit().await.map_err(Error::query("commit"))?;
    Ok(claimed)
}

/// A rate limit's window in whole milliseconds, as claim_rated.sql takes it: rounded up, since
/// a window cut short would let more starts in (SQLite keeps microseconds).
fn window_millis(per: Duration) -> i64 {
    i64::try_from(per.as_micros().div_ceil(1000)).unwrap_or(i64::MAX)
}

/// Claims due jobs of the requested kinds in one statement (see `sql/claim.sql`). A kind with a
/// concurrency limit is only safe under its advisory lock, and a rate-limited kind is claimed
/// by `sql/claim_rated.sql`: see [`claim_from_pool`], which leaves such kinds out of this one.
/// With `ahead_of` (rate-limited kinds of the queue), only jobs ahead of those kinds' first
/// waiting job in claim order are taken.
pub(crate) async fn claim<'e, E: PgExecutor<'e>>(
    executor: E,
    request: &ClaimRequest,
    ahead_of: &[&str],
) -> Result<Vec<ClaimedJob>, Error> {
    if request.kinds.is_empty() || request.limit == 0 {
        return Ok(Vec::new());
    }
    let kinds: Vec<&str> = request.kinds.iter().map(|k| k.kind.as_str()).collect();
    let versions: Vec<i32> = request.kinds.iter().map(|k| k.max_version).collect();
    let leases: Vec<i64> = request
        .kinds
        .iter()
        .map(|k| duration_millis(k.lease))
        .collect();
    let caps: Vec<Option<i32>> = request
        .kinds
        .iter()
        .map(|k| k.concurrency.map(|c| i32::try_from(c).unwrap_or(i32::MAX)))
        .collect();
    let limit = i32::try_from(request.limit).unwrap_or(i32::MAX);
    let rows = sqlx::query(sql::CLAIM)
        .bind(&request.queue)
        .bind(kinds)
        .bind(versions)
        .bind(leases)
        .bind(limit)
        .bind(&request.worker_id)
        .bind(caps)
        .bind(ahead_of)
        .fetch_all(executor)
        .await
        .map_err(Error::query("claim"))?;
    claimed_jobs(&rows).map_err(Error::query("claim"))
}

/// The jobs a claim statement returned.
fn claimed_jobs(rows: &[sqlx::postgres::PgRow]) -> Result<Vec<ClaimedJob>, sqlx::Error> {
    use sqlx::Column;
    let Some(first) = rows.first() else {
        return Ok(Vec::new());
    };
    // Every row of one statement has the same columns: each is found by its name once, not
    // once per row (a hash lookup each, a dozen per job).
    let at = |name: &str| first.try_column(name).map(|c| c.ordinal());
    let (id, token, kind, queue, priority, payload) = (
        at("id")?,
        at("lock_token")?,
        at("kind")?,
        at("queue")?,
        at("priority")?,
        at("payload")?,
    );
    let (payload_version, attempt, max_attempts, snoozes, waited_ms, trace_context) = (
        at("payload_version")?,
        at("attempt")?,
        at("max_attempts")?,
        at("snoozes")?,
        at("waited_ms")?,
        at("trace_context")?,
    );
    rows.iter()
        .map(|row| {
            Ok(ClaimedJob {
                lease: Lease {
                    id: row.try_get(id)?,
                    token: row.try_get(token)?,
                },
                kind: row.try_get(kind)?,
                queue: row.try_get(queue)?,
                priority: row.try_get(priority)?,
                payload: row.try_get(payload)?,
                payload_version: row.try_get(payload_version)?,
                attempt: row.try_get(attempt)?,
                max_attempts: row.try_get(max_attempts)?,
                snoozes: row.try_get(snoozes)?,
                waited: Duration::from_millis(row.try_get::<i64, _>(waited_ms)?.unsigned_abs()),
                traceparent: row.try_get(trace_context)?,
            })
        })
        .collect()
}

/// Records that the execution holding `lease` starts its handler, guarded by its token and
/// the lease's end. False when the lease is no longer held, or has run out.
pub(crate) async fn record_start(pool: &PgPool, lease: Lease) -> Result<bool, Error> {
    let row: Option<JobId> = sqlx::query_scalar(sql::RECORD_START)
        .bind(lease.id)
        .bind(lease.token)
        .fetch_optional(pool)
        .await
        .map_err(Error::query("record_start"))?;
    Ok(row.is_some())
}

/// Records the latest progress of running jobs, guarded by (id, lock_token) and running.
pub(crate) async fn save_progress<'e, E: PgExecutor<'e>>(
    executor: E,
    progress: &[(Lease, String)],
) -> Result<u64, Error> {
    if progress.is_empty() {
        return Ok(0);
    }
    let ids: Vec<JobId> = progress.iter().map(|(l, _)| l.id).collect();
    let tokens: Vec<Uuid> = progress.iter().map(|(l, _)| l.token).collect();
    let values: Vec<&str> = progress.iter().map(|(_, p)| p.as_str()).collect();
    let saved: i64 = sqlx::query_scalar(sql::PROGRESS_SAVE)
        .persistent(PLANNED_EACH_TIME)
        .bind(ids)
        .bind(tokens)
        .bind(values)
        .fetch_one(executor)
        .await
        .map_err(Error::query("progress_save"))?;
    Ok(saved.unsigned_abs())
}

/// `persistent` for the statements that run every few seconds at most (the heartbeat, the
/// progress a heartbeat carries, the stager's, the expirer's, the finalize's look at skipped
/// rows): `false`, so that each run is planned on the table as it is. Kept as a session's
/// prepared statement, PostgreSQL plans one afresh for its first five runs and may then keep
/// a generic plan until the table's statistics change; made while job.jobs was empty (a
/// worker started on a new database), the heartbeat's read the whole table twice once it
/// grew, and the stager's every scheduled job through the staging index, at every pass, until
/// the pruner's next ANALYZE (`tests/store_claim.rs`).
/// Planning costs about 0.3 ms a run. The claim, the rescuer's and the stager's dependency
/// pass are functions that plan once per session with sequential scans off (migrations 0064,
/// 0066); the finalize, which runs for every batch of outcomes, keeps its prepared statement.
pub(crate) const PLANNED_EACH_TIME: bool = false;

/// How long one heartbeat waits, in all, for the rows its first statement found held by
/// another transaction. Enough for a lock held a moment (recording a step holds its job's row
/// `FOR SHARE` until its commit; a finalize of the same job), and small, so that a row held
/// open (a handler's `complete_in` transaction before its commit) costs the heartbeat this
/// much at most and is reported busy. The lease keeper allows for it in its timeout.
const BUSY_WAIT: Duration = job_core::HEARTBEAT_BUSY_WAIT;

/// Renews leases in one statement, guarded by (id, lock_token) and running, without waiting
/// for a row another transaction holds; then renews those rows one at a time, each waiting for
/// its lock at most what is left of [`BUSY_WAIT`]. A row still held then is reported busy.
pub(crate) async fn heartbeat(
    pool: &PgPool,
    renewals: &[Renewal],
) -> Result<HeartbeatReport, Error> {
    if renewals.is_empty() {
        return Ok(HeartbeatReport::default());
    }
    let held = renew(pool, sql::HEARTBEAT, renewals).await?;
    let still: HashSet<Lease> = held.iter().map(|h| h.lease).collect();
    let mut report = HeartbeatReport {
        lost: renewals
            .iter()
            .map(|r| r.lease)
            .filter(|lease| !still.contains(lease))
            .collect(),
        busy: Vec::new(),
        cancel_requested: Vec::new(),
    };
    let mut busy = Vec::new();
    for h in held {
        match (h.renewed, h.cancel_requested) {
            (true, true) => report.cancel_requested.push(h.lease),
            (true, false) => {}
            (false, _) => busy.push(h.lease),
        }
    }
    let deadline = tokio::time::Instant::now() + BUSY_WAIT;
    for lease in busy {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let renewal = renewals.iter().find(|r| r.lease == lease);
        let (Some(renewal), false) = (renewal, left.is_zero()) else {
            report.busy.push(lease);
            continue;
        };
        match renew_waiting(pool, renewal, left).await {
            Ok(Some(Held {
                renewed: true,
                cancel_requested,
                ..
            })) => {
                if cancel_requested {
                    report.cancel_requested.push(lease);
                }
            }
            // Changed hands while this waited (the statement's snapshot still showed it
            // held): the next heartbeat finds it lost.
            Ok(Some(Held { renewed: false, .. })) => report.busy.push(lease),
            Ok(None) => report.lost.push(lease),
            // The lock was not free in time, or the statement failed: not renewed this time.
            Err(e) => {
                if !is_lock_timeout(&e) {
                    let error =
                        job_core::storable_text(&e.to_string(), job_core::MAX_ERROR_MESSAGE)
                            .into_owned();
                    tracing::debug!(id = lease.id, %error, "renewing a busy lease failed");
                }
                report.busy.push(lease);
            }
        }
    }
    Ok(report)
}

/// One lease a heartbeat statement found still held.
struct Held {
    lease: Lease,
    cancel_requested: bool,
    /// False: another transaction held the row, so it was not renewed.
    renewed: bool,
}

/// Runs a heartbeat statement (`sql/heartbeat.sql` or its waiting form) for `renewals`: each
/// lease still held.
async fn renew<'e, E: PgExecutor<'e>>(
    executor: E,
    statement: &str,
    renewals: &[Renewal],
) -> Result<Vec<Held>, Error> {
    let ids: Vec<JobId> = renewals.iter().map(|r| r.lease.id).collect();
    let tokens: Vec<Uuid> = renewals.iter().map(|r| r.lease.token).collect();
    let leases: Vec<i64> = renewals
        .iter()
        .map(|r| duration_millis(r.extend_by))
        .collect();
    let stuck: Vec<bool> = renewals.iter().map(|r| r.stuck).collect();
    let rows: Vec<(JobId, Uuid, bool, bool)> = sqlx::query_as(statement)
        // Planned at each run, on the table as it is: see `PLANNED_EACH_TIME`.
        .persistent(PLANNED_EACH_TIME)
        .bind(&ids)
        .bind(tokens)
        .bind(leases)
        .bind(stuck)
        .fetch_all(executor)
        .await
        .map_err(Error::query("heartbeat"))?;
    Ok(rows
        .into_iter()
        .map(|(id, token, cancel_requested, renewed)| Held {
            lease: Lease { id, token },
            cancel_requested,
            renewed,
        })
        .collect())
}

/// Renews one lease, waiting at most `wait` for its row's lock (`lock_timeout`, local to a
/// transaction of its own). `None`: the lease is lost.
async fn renew_waiting(
    pool: &PgPool,
    renewal: &Renewal,
    wait: Duration,
) -> Result<Option<Held>, Error> {
    let mut tx = pool.begin().await.map_err(Error::query("begin"))?;
    sqlx::query("SELECT set_config('lock_timeout', $1, true)")
        .bind(format!("{}ms", wait.as_millis().max(1)))
        .execute(&mut *tx)
        .await
        .map_err(Error::query("lock_timeout"))?;
    let row = renew(
        &mut *tx,
        &sql::HEARTBEAT_WAITING,
        std::slice::from_ref(renewal),
    )
    .await?
    .pop();
    tx.commit().await.map_err(Error::query("commit"))?;
    Ok(row)
}

/// Whether `error` is PostgreSQL's `lock_not_available` (a `lock_timeout` ran out).
fn is_lock_timeout(error: &Error) -> bool {
    matches!(error, Error::Query { source, .. }
        if source.as_database_error().and_then(|d| d.code()).as_deref() == Some("55P03"))
}

/// The longest delay written: far beyond any backoff, and far inside what a timestamp holds
/// (a `Duration::MAX` snooze would overflow `now() + interval` and be refused).
const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// One [`Finalize`] as the columns of `sql/finalize.sql`; every message made storable.
struct Columns<'a> {
    ids: Vec<JobId>,
    tokens: Vec<Uuid>,
    states: Vec<&'static str>,
    delays_ms: Vec<Option<i64>>,
    snoozes: Vec<bool>,
    error_attempts: Vec<Option<i32>>,
    error_classes: Vec<Option<&'static str>>,
    error_messages: Vec<Option<String>>,
    /// The result of each completion (validated by the worker; bounded by the table's CHECK).
    results: Vec<Option<&'a str>>,
}

impl<'a> Columns<'a> {
    fn new(batch: &'a [Finalize]) -> Self {
        let n = batch.len();
        let mut c = Columns {
            ids: Vec::with_capacity(n),
            tokens: Vec::with_capacity(n),
            states: Vec::with_capacity(n),
            delays_ms: Vec::with_capacity(n),
            snoozes: Vec::with_capacity(n),
            error_attempts: Vec::with_capacity(n),
            error_classes: Vec::with_capacity(n),
            error_messages: Vec::with_capacity(n),
            results: Vec::with_capacity(n),
        };
        for item in batch {
            // (state, delay, snooze, error as (attempt, class, message))
            let (state, delay, snooze, error) = match &item.outcome {
                Outcome::Complete => (JobState::Completed, None, false, None),
                Outcome::Retry { delay, failure } => (
                    JobState::Retryable,
                    Some(*delay),
                    false,
                    Some((
                        Some(failure.attempt),
                        failure.class.as_str(),
                        &failure.message,
                    )),
                ),
                Outcome::Cancel { reason } => (
                    JobState::Cancelled,
                    None,
                    false,
                    Some((None, "cancelled", reason)),
                ),
                Outcome::Snooze { delay } => (JobState::Scheduled, Some(*delay), true, None),
                Outcome::Discard { failure } => (
                    JobState::Discarded,
                    None,
                    false,
                    Some((
                        Some(failure.attempt),
                        failure.class.as_str(),
                        &failure.message,
                    )),
                ),
            };
            c.ids.push(item.lease.id);
            c.tokens.push(item.lease.token);
            c.states.push(state.as_str());
            c.delays_ms
                .push(delay.map(|d| duration_millis(d.min(MAX_DELAY))));
            c.snoozes.push(snooze);
            c.error_attempts.push(error.and_then(|e| e.0));
            c.error_classes.push(error.map(|e| e.1));
            c.error_messages
                .push(error.map(|e| storable_text(e.2, MAX_ERROR_MESSAGE).into_owned()));
            c.results.push(match item.outcome {
                Outcome::Complete => item.result.as_deref(),
                _ => None,
            });
        }
        c
    }
}

/// Applies outcomes in one statement, each guarded by (id, lock_token) and running.
pub(crate) async fn finalize(
    pool: &sqlx::PgPool,
    batch: &[Finalize],
) -> Result<Vec<Finalized>, Error> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let c = Columns::new(batch);
    let applied: Vec<(i64, String)> = sqlx::query_as(sql::FINALIZE)
        .bind(c.ids)
        .bind(c.tokens)
        .bind(c.states)
        .bind(c.delays_ms)
        .bind(c.snoozes)
        .bind(c.error_attempts)
        .bind(c.error_classes)
        .bind(c.error_messages)
        .bind(c.results)
        .fetch_all(pool)
        .await
        .map_err(Error::query("finalize"))?;
    let mut result = vec![Finalized::LeaseLost; batch.len()];
    // WITH ORDINALITY counts from 1.
    let mark = |result: &mut Vec<Finalized>, ordinal: i64, as_: Finalized| {
        if let Some(slot) = usize::try_from(ordinal - 1)
            .ok()
            .and_then(|i| result.get_mut(i))
        {
            *slot = as_;
        }
    };
    let all = applied.len() == batch.len();
    for (ordinal, state) in applied {
        // The items ask for `discarded` only with a discard: written `cancelled`, a cancel
        // had been requested.
        let asked_discard = usize::try_from(ordinal - 1)
            .ok()
            .and_then(|i| batch.get(i))
            .is_some_and(|item| matches!(item.outcome, Outcome::Discard { .. }));
        let written = if asked_discard && state == "cancelled" {
            Finalized::Cancelled
        } else {
            Finalized::Applied
        };
        mark(&mut result, ordinal, written);
    }
    if !all {
        // Skipped (held by another transaction) or lost: those still holding the token were
        // skipped. Asked only then, so that a batch that was all written costs one statement.
        let (ids, tokens): (Vec<i64>, Vec<Uuid>) = batch
            .iter()
            .zip(&result)
            .map(|(item, r)| match r {
                Finalized::Applied | Finalized::Cancelled => (0, Uuid::nil()),
                _ => (item.lease.id, item.lease.token),
            })
            .unzip();
        let held: Vec<i64> = sqlx::query_scalar(sql::FINALIZE_BUSY)
            .persistent(PLANNED_EACH_TIME)
            .bind(ids)
            .bind(tokens)
            .fetch_all(pool)
            .await
            .map_err(Error::query("finalize_busy"))?;
        for ordinal in held {
            mark(&mut result, ordinal, Finalized::Busy);
        }
    }
    Ok(result)
}

/// Recovers up to `limit` expired leases, and only those.
pub(crate) async fn rescue_expired<'e, E: PgExecutor<'e>>(
    executor: E,
    limit: u32,
) -> Result<Rescued, Error> {
    let limit = i32::try_from(limit).unwrap_or(i32::MAX);
    type Row = (
        i64,
        i64,
        i64,
        Vec<JobId>,
        Vec<String>,
        Vec<Option<String>>,
        Vec<String>,
    );
    let (retried, discarded, _woken, ids, kinds, workers, states): Row =
        sqlx::query_as(sql::RESCUE_EXPIRED)
            .bind(limit)
            .fetch_one(executor)
            .await
            .map_err(Error::query("rescue_expired"))?;
    let jobs = ids
        .into_iter()
        .zip(kinds)
        .zip(workers)
        .zip(states)
        .map(|(((id, kind), worker), state)| {
            Ok(RescuedJob {
                id,
                kind,
                worker,
                state: crate::row::parse_state(id, &state)?,
            })
        })
        .collect::<Result<_, Error>>()?;
    Ok(Rescued {
        retried: retried.unsigned_abs(),
        discarded: discarded.unsigned_abs(),
        jobs,
    })
}

/// Makes up to `limit` due `scheduled` and `retryable` jobs `available`, and promotes the
/// pending jobs of up to `limit` keys on the ordering wake-up list (see `sql/stage.sql`).
/// Returns both counts together.
pub(crate) async fn stage_due<'e, E: PgExecutor<'e>>(
    executor: E,
    limit: u32,
) -> Result<u64, Error> {
    let limit = i32::try_from(limit).unwrap_or(i32::MAX);
    let (staged, _woken, promoted): (i64, i64, i64) = sqlx::query_as(sql::STAGE)
        .persistent(PLANNED_EACH_TIME)
        .bind(limit)
        .fetch_one(executor)
        .await
        .map_err(Error::query("stage"))?;
    Ok(staged.unsigned_abs() + promoted.unsigned_abs())
}

/// Gives leases back, guarded by (id, lock_token) and running. A job given back before its
/// first attempt started holds its unique key again (release.sql); when a concurrent enqueue
/// took that key between the statement's snapshot and its write (the index refuses it with
/// 23505), the statement runs again without that step, so that the race costs the key, never
/// the release.
pub(crate) async fn release(pool: &PgPool, releases: &[Release]) -> Result<u64, Error> {
    if releases.is_empty() {
        return Ok(0);
    }
    let ids: Vec<JobId> = releases.iter().map(|r| r.lease.id).collect();
    let tokens: Vec<Uuid> = releases.iter().map(|r| r.lease.token).collect();
    let ran_ms: Vec<Option<i64>> = releases
        .iter()
        .map(|r| r.ran_for.map(duration_millis))
        .collect();
    let run = |restore: bool| {
        sqlx::query_as::<_, (i64, i64)>(sql::RELEASE)
            .bind(&ids)
            .bind(&tokens)
            .bind(&ran_ms)
            .bind(restore)
            .bind(i32::try_from(job_core::MAX_REFUNDED_INTERRUPTIONS).unwrap_or(i32::MAX))
            .fetch_one(pool)
    };
    let (released, _woken) = match run(true).await {
        Err(e) if crate::error::is_unique_violation(&e) => run(false).await,
        other => other,
    }
    .map_err(Error::query("release"))?;
    Ok(released.unsigned_abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_window_is_never_cut_short() {
        assert_eq!(window_millis(Duration::from_micros(1_900)), 2);
        assert_eq!(window_millis(Duration::from_millis(1)), 1);
        assert_eq!(window_millis(Duration::from_secs(60)), 60_000);
        assert_eq!(window_millis(Duration::MAX), i64::MAX);
    }
}
