//! The lease protocol's statements: claim, heartbeat, guarded finalize, rescue and release.
//! Each runs on a connection inside the store's immediate transaction (the write lock held
//! from its first statement), with the database's now read once at its start.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use job_core::{
    BreakerCount, ClaimKind, ClaimRequest, ClaimedJob, ErrorClass, Failure, Finalize, Finalized,
    HeartbeatReport, JobId, JobState, Lease, Outcome, Pause, PauseEntry, PausedBy, Release,
    Renewal, Rescued, RescuedJob, Tripped,
};
use sqlx::sqlite::SqliteRow;
use sqlx::{Connection, Row, Sqlite, SqliteConnection, Transaction};
use uuid::Uuid;

use crate::error::Error;
use crate::history;
use crate::sql;
use crate::text::{self, Text};
use crate::time::{after, micros, now, to_time, Micros};

/// The longest delay written: far beyond any backoff, and far inside what a time holds.
const MAX_DELAY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// One due job picked for a claim, with what orders it.
struct Picked {
    id: JobId,
    kind: String,
    priority: i64,
    run_at: Micros,
}

/// A row of `claim_pick.sql`: a picked job (no version, its id, priority and run time), or
/// the last row (the next version, if any, and no job).
type PickRow = (Option<i32>, Option<JobId>, Option<i64>, Option<Micros>);

/// Picks due jobs of `kind` on `queue`, at most `limit`, in claim order, all of one payload
/// version: the lowest from `from` up to the kind's `max_version` among its waiting jobs
/// (`claim_pick.sql`: only that kind's rows of that version are read). Answers the next such
/// version too, if any, for the next pick.
async fn pick(
    conn: &mut SqliteConnection,
    queue: &str,
    kind: &ClaimKind,
    now: Option<Micros>,
    limit: u32,
    from: i32,
) -> Result<(Vec<Picked>, Option<i32>), Error> {
    if limit == 0 {
        return Ok((Vec::new(), None));
    }
    let rows: Vec<PickRow> = sqlx::query_as(sql::CLAIM_PICK)
        .bind(queue)
        .bind(&kind.kind)
        .bind(now)
        .bind(i64::from(limit))
        .bind(i64::from(kind.max_version))
        .bind(i64::from(from))
        .fetch_all(&mut *conn)
        .await
        .map_err(Error::query("claim_pick"))?;
    let next = rows.iter().find_map(|r| r.0);
    let picked = rows
        .into_iter()
        .filter_map(|(_, id, priority, run_at)| {
            Some(Picked {
                id: id?,
                kind: kind.kind.clone(),
                priority: priority?,
                run_at: run_at?,
            })
        })
        .collect();
    Ok((picked, next))
}

/// Picks due jobs of `kind` on `queue`, at most `limit`, in claim order, of every payload
/// version up to its `max_version`: one [`pick`] per version its waiting jobs have, merged.
async fn pick_versions(
    conn: &mut SqliteConnection,
    queue: &str,
    kind: &ClaimKind,
    now: Micros,
    limit: u32,
) -> Result<Vec<Picked>, Error> {
    let (mut picked, mut next) = pick(conn, queue, kind, Some(now), limit, 1).await?;
    if next.is_none() {
        return Ok(picked);
    }
    while let Some(version) = next {
        let (more, after) = pick(conn, queue, kind, Some(now), limit, version).await?;
        picked.extend(more);
        next = after;
    }
    // Each version was picked up to the kind's room: the kind takes the first of them all in
    // the claim's order, at most its room (its concurrency cap, its rate).
    picked.sort_by_key(|p| (p.priority, p.run_at, p.id));
    picked.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok(picked)
}

/// Whether a claim of `request` may find a job to take, read without the write lock (a WAL
/// reader neither waits for the writer nor stops it), so that a claim with nothing to take
/// costs no write transaction (`SqliteStore::claim`). The same statement as the claim's pick
/// (`claim_pick.sql`, one job at most, each version of each kind in turn, stopping at the
/// first found), at the database's now read by the same expression as `now.sql`'s, inside
/// the pick (`?3` NULL): a job the claim would take at that instant is found. Looser than the claim, never stricter: pauses, concurrency caps and rate
/// limits are not read, so a kind held by one of them answers "maybe" and the claim decides.
pub(crate) async fn claimable(
    conn: &mut SqliteConnection,
    request: &ClaimRequest,
) -> Result<bool, Error> {
    for kind in &request.kinds {
        let mut from = Some(1);
        while let Some(version) = from {
            // The database's now read by the pick itself: one statement for the usual one
            // version of one kind.
            let (picked, next) = pick(conn, &request.queue, kind, None, 1, version).await?;
            if !picked.is_empty() {
                return Ok(true);
            }
            from = next;
        }
    }
    Ok(false)
}

/// Claims due jobs of the requested kinds. Inside the immediate transaction no other claimer
/// runs, so a kind's concurrency limit (`claim_running.sql`) and rate limit
/// (`rate_count.sql`) are counted once and its room taken, and its starts recorded
/// (`rate_record.sql`), in the same transaction.
pub(crate) async fn claim(
    conn: &mut SqliteConnection,
    request: &ClaimRequest,
) -> Result<Vec<ClaimedJob>, Error> {
    if request.kinds.is_empty() || request.limit == 0 {
        return Ok(Vec::new());
    }
    let now = now(&mut *conn).await?;
    let paused: Vec<(String, String)> = paused(&mut *conn, now)
        .await?
        .into_iter()
        .map(|p| (p.what.scope().to_owned(), p.what.name().to_owned()))
        .collect();
    let is_paused = |scope: &str, name: &str| paused.iter().any(|(s, n)| s == scope && n == name);
    if is_paused("queue", &request.queue) {
        return Ok(Vec::new());
    }
    let kinds: Vec<&ClaimKind> = request
        .kinds
        .iter()
        .filter(|k| !is_paused("kind", &k.kind))
        .collect();
    // Each kind picked apart, and each payload version of it the worker decodes, through its
    // own range of the claim index: the due rows of a kind not taken here (paused, at its cap,
    // run by no worker of this process) or of a version newer than its worker decodes are
    // never read. The picks are merged in the claim's order below.
    let mut picked = Vec::new();
    for kind in kinds {
        let mut room = request.limit;
        if let Some(cap) = kind.concurrency {
            let running: i64 = sqlx::query_scalar(sql::CLAIM_RUNNING)
                .bind(&kind.kind)
                .fetch_one(&mut *conn)
                .await
                .map_err(Error::query("claim_running"))?;
            room = room.min(u32::try_from((i64::from(cap) - running).max(0)).unwrap_or(0));
        }
        if let Some(rate) = kind.rate {
            let started: i64 = sqlx::query_scalar(sql::RATE_COUNT)
                .bind(&kind.kind)
                .bind(now.saturating_sub(micros(rate.per)))
                .bind(now)
                .fetch_one(&mut *conn)
                .await
                .map_err(Error::query("rate_count"))?;
            room = room.min(u32::try_from((i64::from(rate.starts) - started).max(0)).unwrap_or(0));
        }
        picked.extend(pick_versions(conn, &request.queue, kind, now, room).await?);
    }
    picked.sort_by_key(|p| (p.priority, p.run_at, p.id));
    // A kind the request names twice was picked twice.
    picked.dedup_by_key(|p| p.id);
    picked.truncate(usize::try_from(request.limit).unwrap_or(usize::MAX));

    // Every picked row in one statement (a statement per row was most of a claim's time).
    let take: Vec<serde_json::Value> = picked
        .iter()
        .map(|p| {
            let lease = request
                .kinds
                .iter()
                .find(|k| k.kind == p.kind)
                .map_or(Duration::ZERO, |k| k.lease);
            serde_json::json!({
                "id": p.id,
                "token": Uuid::new_v4().simple().to_string(),
                "until": after(now, lease),
            })
        })
        .collect();
    let mut taken: HashMap<JobId, SqliteRow> = HashMap::with_capacity(take.len());
    if !take.is_empty() {
        let rows = sqlx::query(sql::CLAIM_TAKE)
            .bind(&request.worker_id)
            .bind(serde_json::Value::Array(take).to_string())
            .fetch_all(&mut *conn)
            .await
            .map_err(Error::query("claim_take"))?;
        for row in rows {
            let id: JobId = row.try_get("id").map_err(Error::query("claim_take"))?;
            taken.insert(id, row);
        }
    }
    let mut claimed = Vec::with_capacity(picked.len());
    let mut unreadable = Vec::new();
    for p in picked {
        // How long it had been due, on the database's clock (the first part of its wait).
        // Saturating: a run_at written raw before migration 0006 may be anything.
        let waited =
            Duration::from_micros(u64::try_from(now.saturating_sub(p.run_at)).unwrap_or(0));
        let Some(row) = taken.remove(&p.id) else {
            continue;
        };
        let payload: Vec<u8> = row.try_get("payload").map_err(Error::query("claim_take"))?;
        let payload = match String::from_utf8(payload) {
            Ok(payload) => payload,
            Err(e) => {
                // Written raw (SQLite does not check the encoding): no handler can read it, and
                // failing the claim would stop its whole kind. Discarded in this transaction,
                // saying why, as the worker discards a payload that does not decode.
                let (id, token, attempt) = (|| {
                    Ok::<_, sqlx::Error>((
                        row.try_get("id")?,
                        row.try_get("lock_token")?,
                        row.try_get("attempt")?,
                    ))
                })()
                .map_err(Error::query("claim_take"))?;
                unreadable.push(Finalize {
                    lease: Lease { id, token },
                    outcome: Outcome::Discard {
                        failure: Failure {
                            attempt,
                            class: ErrorClass::Terminal,
                            message: format!(
                                "the payload is not valid UTF-8 ({e}; written to the file \
                                 without this store): no handler can read it, so the claim \
                                 discarded the job"
                            ),
                        },
                    },
                    result: None,
                });
                continue;
            }
        };
        let job = (|| {
            Ok::<_, sqlx::Error>(ClaimedJob {
                lease: Lease {
                    id: row.try_get("id")?,
                    token: row.try_get("lock_token")?,
                },
                kind: text::get(&row, "kind")?,
                queue: text::get(&row, "queue")?,
                priority: row.try_get("priority")?,
                payload,
                payload_version: row.try_get("payload_version")?,
                attempt: row.try_get("attempt")?,
                max_attempts: row.try_get("max_attempts")?,
                snoozes: row.try_get("snoozes")?,
                waited,
                // Not stored by this backend yet: attempts start a trace of their own.
                traceparent: None,
            })
        })()
        .map_err(Error::query("claim_take"))?;
        claimed.push(job);
    }
    if !unreadable.is_empty() {
        let before = last_id(&mut *conn).await?;
        finalize(&mut *conn, &unreadable).await?;
        for discarded in &unreadable {
            omit_payload(&mut *conn, discarded.lease.id, before).await?;
        }
    }
    for kind in request.kinds.iter() {
        let Some(rate) = kind.rate else { continue };
        let n = claimed.iter().filter(|j| j.kind == kind.kind).count();
        sqlx::query(sql::RATE_FORGET)
            .bind(&kind.kind)
            .bind(now.saturating_sub(micros(rate.per)))
            .bind(now)
            .execute(&mut *conn)
            .await
            .map_err(Error::query("rate_forget"))?;
        sqlx::query(sql::RATE_RECORD)
            .bind(&kind.kind)
            .bind(i64::try_from(n).unwrap_or(i64::MAX))
            .bind(now)
            .execute(&mut *conn)
            .await
            .map_err(Error::query("rate_record"))?;
    }
    Ok(claimed)
}

/// The highest job id now: the rows a statement inserts after this have higher ones.
pub(crate) async fn last_id(conn: &mut SqliteConnection) -> Result<JobId, Error> {
    sqlx::query_scalar(sql::LAST_ID)
        .fetch_one(conn)
        .await
        .map_err(Error::query("last_id"))
}

/// Leaves the payload of discarded job `id` out of the compensating job its discard inserted
/// (an id above `before`), for a payload that is not UTF-8 (`compensation_omit_payload.sql`).
async fn omit_payload(conn: &mut SqliteConnection, id: JobId, before: JobId) -> Result<(), Error> {
    sqlx::query(sql::COMPENSATION_OMIT_PAYLOAD)
        .bind(id)
        .bind(before)
        .execute(conn)
        .await
        .map_err(Error::query("compensation_omit_payload"))?;
    Ok(())
}

/// After the rescuer or the expirer discarded `discarded` (ids, with the highest id before
/// the first discard): the compensating jobs of those whose payload is not UTF-8 leave it out,
/// as the claim's do.
pub(crate) async fn omit_unreadable_payloads(
    conn: &mut SqliteConnection,
    discarded: &[JobId],
    before: JobId,
) -> Result<(), Error> {
    for &id in discarded {
        let payload: Option<Vec<u8>> = sqlx::query_scalar(sql::PAYLOAD_READ)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(Error::query("payload_read"))?;
        if payload.is_some_and(|p| std::str::from_utf8(&p).is_err()) {
            omit_payload(&mut *conn, id, before).await?;
        }
    }
    Ok(())
}

/// Every pause in force at `now` (`paused.sql`).
pub(crate) async fn paused(
    conn: &mut SqliteConnection,
    now: Micros,
) -> Result<Vec<PauseEntry>, Error> {
    let rows = sqlx::query(sql::PAUSED)
        .bind(now)
        .fetch_all(conn)
        .await
        .map_err(Error::query("paused"))?;
    rows.iter()
        .map(|r| {
            let scope = text::get(r, "scope")?;
            let name = text::get(r, "name")?;
            let by = text::get(r, "paused_by")?;
            let resume_at: Option<Micros> = r.try_get("resume_at")?;
            Ok(PauseEntry {
                what: match scope.as_str() {
                    "queue" => Pause::Queue(name),
                    _ => Pause::Kind(name),
                },
                paused_by: PausedBy::parse(&by).unwrap_or(PausedBy::Operator),
                reason: text::get_opt(r, "reason")?,
                paused_at: to_time(r.try_get("paused_at")?),
                resume_at: resume_at.map(to_time),
            })
        })
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Error::query("paused"))
}

/// The first of `counts` no worker sends, as [`Error::Breaker`]: a breaker
/// [`Breaker::problem`](job_core::Breaker::problem) refuses (a `min_attempts` of 0 let a
/// window of 0 attempts trip, dividing by zero on the writer thread), more failures than
/// attempts, or a kind the name rule refuses (it would be written to the pauses). The store
/// refuses such a call at its door, as PostgreSQL's `job.breaker_record` does.
pub(crate) fn breaker_problem(counts: &[BreakerCount]) -> Option<Error> {
    counts.iter().find_map(|c| {
        let problem = job_core::name_problem(&c.kind)
            .map(|p| format!("the kind {p}"))
            .or_else(|| c.breaker.problem())
            .or_else(|| {
                (c.failures > c.attempts).then(|| {
                    format!(
                        "{} failures of {} attempts (at most as many failures as attempts)",
                        c.failures, c.attempts
                    )
                })
            })?;
        Some(Error::Breaker {
            kind: c.kind.clone(),
            problem,
        })
    })
}

/// Adds ended attempts to the kinds' circuit breakers and trips those over their threshold
/// (`breaker_add.sql`, `breaker_trip.sql`, `pause_breaker.sql`), as job-postgres's
/// `job.breaker_record`. In one immediate transaction.
pub(crate) async fn record_breakers(
    conn: &mut SqliteConnection,
    counts: &[BreakerCount],
) -> Result<Vec<Tripped>, Error> {
    let now = now(&mut *conn).await?;
    let mut tripped = Vec::new();
    for c in counts {
        let b = c.breaker;
        let (attempts, failures, window_start): (i64, i64, Micros) =
            sqlx::query_as(sql::BREAKER_ADD)
                .bind(&c.kind)
                .bind(i64::from(c.attempts))
                .bind(i64::from(c.failures))
                .bind(now)
                .bind(micros(b.window))
                .fetch_one(&mut *conn)
                .await
                .map_err(Error::query("breaker_add"))?;
        // In i128: a row another writer gave counts near i64's bound (the file is anyone's
        // who can open it) must not overflow the comparison.
        let (wide_failures, wide_attempts) = (i128::from(failures), i128::from(attempts));
        if attempts < i64::from(b.min_attempts)
            || wide_failures * 100 < i128::from(b.failure_percent) * wide_attempts
        {
            continue;
        }
        // A window of no attempts never trips: the door refuses a `min_attempts` of 0, but the
        // percentage must never divide by zero on the writer thread, whatever reaches here.
        let Some(percent) = (wide_failures * 100).checked_div(wide_attempts) else {
            continue;
        };
        let reason = format!(
            "circuit breaker: {failures} of {attempts} attempts failed ({}%) in the window since \
             {}; it trips at {}% of at least {} attempts per {} ms",
            percent,
            to_time(window_start).format("%Y-%m-%dT%H:%M:%SZ"),
            b.failure_percent,
            b.min_attempts,
            b.window.as_millis()
        );
        let resume_at = after(now, b.cool_down);
        let paused = sqlx::query(sql::PAUSE_BREAKER)
            .bind(&c.kind)
            .bind(now)
            .bind(&reason)
            .bind(resume_at)
            .execute(&mut *conn)
            .await
            .map_err(Error::query("pause_breaker"))?;
        sqlx::query(sql::BREAKER_TRIP)
            .bind(&c.kind)
            .bind(now)
            .bind(paused.rows_affected() > 0)
            .execute(&mut *conn)
            .await
            .map_err(Error::query("breaker_trip"))?;
        if paused.rows_affected() > 0 {
            tripped.push(Tripped {
                kind: c.kind.clone(),
                reason,
                resume_at: to_time(resume_at),
            });
        }
    }
    Ok(tripped)
}

/// Renews leases, each guarded by (id, lock_token) and running.
pub(crate) async fn heartbeat(
    conn: &mut SqliteConnection,
    renewals: &[Renewal],
) -> Result<HeartbeatReport, Error> {
    let mut report = HeartbeatReport::default();
    if renewals.is_empty() {
        return Ok(report);
    }
    let now = now(&mut *conn).await?;
    for r in renewals {
        let cancel: Option<bool> = sqlx::query_scalar(sql::HEARTBEAT)
            .bind(r.lease.id)
            .bind(r.lease.token)
            .bind(after(now, r.extend_by))
            .bind(r.stuck)
            .bind(now)
            .fetch_optional(&mut *conn)
            .await
            .map_err(Error::query("heartbeat"))?;
        match cancel {
            Some(true) => report.cancel_requested.push(r.lease),
            Some(false) => {}
            None => report.lost.push(r.lease),
        }
    }
    Ok(report)
}

/// What a guarded write reads of a job whose lease is held; `None`: the lease was lost.
pub(crate) struct Held {
    pub(crate) attempt: i32,
    pub(crate) errors: String,
    pub(crate) locked_by: Option<String>,
    pub(crate) locked_until: Micros,
    pub(crate) run_at: Micros,
    pub(crate) cancel_requested: bool,
}

pub(crate) async fn held(
    conn: &mut SqliteConnection,
    lease: &Lease,
) -> Result<Option<Held>, Error> {
    let row = sqlx::query(sql::LEASE_READ)
        .bind(lease.id)
        .bind(lease.token)
        .fetch_optional(&mut *conn)
        .await
        .map_err(Error::query("lease_read"))?;
    row.map(|r| {
        Ok(Held {
            attempt: r.try_get("attempt")?,
            errors: text::get(&r, "errors")?,
            locked_by: text::get_opt(&r, "locked_by")?,
            locked_until: r.try_get("locked_until")?,
            run_at: r.try_get("run_at")?,
            cancel_requested: r.try_get("cancel_requested")?,
        })
    })
    .transpose()
    .map_err(Error::query("lease_read"))
}

/// Applies outcomes, each guarded by (id, lock_token) and running, in order.
pub(crate) async fn finalize(
    conn: &mut SqliteConnection,
    batch: &[Finalize],
) -> Result<Vec<Finalized>, Error> {
    if batch.is_empty() {
        return Ok(Vec::new());
    }
    let now = now(&mut *conn).await?;
    let mut result: Vec<Option<Finalized>> = complete_all(conn, batch, now).await?;
    for (item, written) in batch.iter().zip(result.iter_mut()) {
        if written.is_some() {
            continue;
        }
        let Some(job) = held(conn, &item.lease).await? else {
            *written = Some(Finalized::LeaseLost);
            continue;
        };
        let push = |attempt: i32, class: &str, message: &str| {
            history::push(&job.errors, attempt, now, class, message)
        };
        let delayed = |d: Duration| after(now, d.min(MAX_DELAY));
        // (state, run_at, attempt, snoozed, errors, finalized_at)
        let (state, run_at, attempt, snoozed, errors, finalized) = match &item.outcome {
            Outcome::Complete => (
                JobState::Completed,
                job.run_at,
                job.attempt,
                0,
                job.errors.clone(),
                Some(now),
            ),
            Outcome::Retry { delay, failure } => (
                JobState::Retryable,
                delayed(*delay),
                job.attempt,
                0,
                push(failure.attempt, failure.class.as_str(), &failure.message),
                None,
            ),
            Outcome::Cancel { reason } => (
                JobState::Cancelled,
                job.run_at,
                job.attempt,
                0,
                push(job.attempt, "cancelled", reason),
                Some(now),
            ),
            Outcome::Snooze { delay } => (
                JobState::Scheduled,
                delayed(*delay),
                job.attempt - 1,
                1,
                job.errors.clone(),
                None,
            ),
            // A discard after a cancel was requested (the worker learns of a request only at
            // its next heartbeat) ends the job cancelled: a dead letter would fire the
            // compensation the cancel did not ask for.
            Outcome::Discard { failure } => (
                if job.cancel_requested {
                    JobState::Cancelled
                } else {
                    JobState::Discarded
                },
                job.run_at,
                job.attempt,
                0,
                push(failure.attempt, failure.class.as_str(), &failure.message),
                Some(now),
            ),
        };
        let applied: Option<JobId> = sqlx::query_scalar(sql::FINALIZE)
            .bind(item.lease.id)
            .bind(item.lease.token)
            .bind(state.as_str())
            .bind(run_at)
            .bind(attempt)
            .bind(snoozed)
            .bind(errors)
            .bind(finalized)
            .bind(match item.outcome {
                Outcome::Complete => item.result.as_deref(),
                _ => None,
            })
            .fetch_optional(&mut *conn)
            .await
            .map_err(Error::query("finalize"))?;
        *written = Some(match applied {
            None => Finalized::LeaseLost,
            // Written as a cancellation: a cancel had been requested (above).
            Some(_)
                if state == JobState::Cancelled
                    && matches!(item.outcome, Outcome::Discard { .. }) =>
            {
                Finalized::Cancelled
            }
            Some(_) => Finalized::Applied,
        });
    }
    Ok(result
        .into_iter()
        .map(|written| written.unwrap_or(Finalized::LeaseLost))
        .collect())
}

/// Writes the completions of `batch` in one statement (`finalize_completed.sql`; a statement
/// or two per outcome was most of a drain's time), each guarded as [`finalize`] guards one:
/// the answer for each item of `batch`, `None` for the items left to [`finalize`]'s one by
/// one path (every other outcome, and a job the batch names more than once, whose items must
/// apply in order: the first written wins).
async fn complete_all(
    conn: &mut SqliteConnection,
    batch: &[Finalize],
    now: Micros,
) -> Result<Vec<Option<Finalized>>, Error> {
    // By job id: the statement answers by id, so two leases of one job (a stale one and the
    // one held) go the one by one way.
    let mut times: HashMap<JobId, usize> = HashMap::with_capacity(batch.len());
    for item in batch {
        *times.entry(item.lease.id).or_default() += 1;
    }
    let alone = |item: &Finalize| {
        matches!(item.outcome, Outcome::Complete) && times.get(&item.lease.id) == Some(&1)
    };
    let completes: Vec<serde_json::Value> = batch
        .iter()
        .filter(|item| alone(item))
        .map(|item| {
            serde_json::json!({
                "id": item.lease.id,
                "token": item.lease.token.simple().to_string(),
                "result": item.result.as_deref(),
            })
        })
        .collect();
    if completes.is_empty() {
        return Ok(vec![None; batch.len()]);
    }
    let applied: Vec<JobId> = sqlx::query_scalar(sql::FINALIZE_COMPLETED)
        .bind(now)
        .bind(serde_json::Value::Array(completes).to_string())
        .fetch_all(&mut *conn)
        .await
        .map_err(Error::query("finalize_completed"))?;
    let applied: HashSet<JobId> = applied.into_iter().collect();
    Ok(batch
        .iter()
        .map(|item| {
            alone(item).then(|| {
                if applied.contains(&item.lease.id) {
                    Finalized::Applied
                } else {
                    Finalized::LeaseLost
                }
            })
        })
        .collect())
}

/// A savepoint for one row's write of a maintenance pass (the rescuer's, the expirer's), inside
/// the pass's immediate transaction; [`settle_row`] ends it.
pub(crate) async fn row_savepoint(
    conn: &mut SqliteConnection,
) -> Result<Transaction<'_, Sqlite>, Error> {
    conn.begin().await.map_err(Error::query("savepoint"))
}

/// Ends the savepoint of one row's write, `written`, of job `id` by `pass`: released when the
/// write went through; rolled back, logged and skipped (`None`) when it failed on what the row
/// holds ([`Error::is_row_failure`]), so that one row the database will not take (a trigger of
/// the application's, a row written raw that breaks a rule) never stops the pass, which picks
/// the same rows first every time: before, one such row failed every pass, and no expired
/// lease of the file was rescued, no deadline enforced, any more. Any other error fails the
/// pass.
pub(crate) async fn settle_row<T>(
    savepoint: Transaction<'_, Sqlite>,
    written: Result<T, Error>,
    id: JobId,
    pass: &str,
) -> Result<Option<T>, Error> {
    match written {
        Ok(value) => {
            savepoint
                .commit()
                .await
                .map_err(Error::query("release_savepoint"))?;
            Ok(Some(value))
        }
        Err(e) if e.is_row_failure() => {
            savepoint
                .rollback()
                .await
                .map_err(Error::query("rollback_to_savepoint"))?;
            // Cut as every logged error is: the refusal may quote the row.
            let error =
                job_core::storable_text(&e.to_string(), job_core::MAX_ERROR_MESSAGE).into_owned();
            tracing::error!(
                job_id = id,
                %error,
                "{pass} skipped job {id}: the database refused its write; the pass goes on \
                 with the other jobs, and this one stays as it is until the cause is removed"
            );
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Recovers up to `limit` expired leases, and only those, each in a savepoint: a row the
/// database refuses is skipped ([`settle_row`]). With `checked_at` (the rescuer's clock check,
/// in microseconds), only leases that had expired by then as well: the database's now is this
/// machine's wall clock, read only once the write lock is held, and a jump of that clock while
/// this waited would make live leases look expired. The jobs of `skip` (a JSON array of ids:
/// rows refused before) are passed over. Returns what it did, the queues it refilled and the
/// jobs whose rows were refused.
pub(crate) async fn rescue_expired(
    conn: &mut SqliteConnection,
    limit: u32,
    checked_at: Option<Micros>,
    skip: &str,
) -> Result<(Rescued, Vec<String>, Vec<JobId>), Error> {
    let now = now(&mut *conn).await?;
    let expired_by = checked_at.map_or(now, |at| at.min(now));
    let expired: Vec<(JobId, Uuid)> = sqlx::query_as(sql::RESCUE_PICK)
        .bind(expired_by)
        .bind(i64::from(limit))
        .bind(skip)
        .fetch_all(&mut *conn)
        .await
        .map_err(Error::query("rescue_pick"))?;
    let mut rescued = Rescued::default();
    let mut queues = Vec::new();
    let mut refused = Vec::new();
    let before = last_id(&mut *conn).await?;
    let mut discarded = Vec::new();
    for (id, token) in expired {
        let lease = Lease { id, token };
        let Some(job) = held(conn, &lease).await? else {
            continue;
        };
        // The statement keeps the history as it was for a last attempt that never started
        // (rescue.sql).
        let message = format!(
            "lease of worker {} expired at {}",
            job.locked_by.as_deref().unwrap_or("(unknown)"),
            to_time(job.locked_until).to_rfc3339()
        );
        let errors = history::push(&job.errors, job.attempt, now, "lease_expired", &message);
        let mut savepoint = row_savepoint(conn).await?;
        let written: Result<Option<(Text, Text, Text)>, Error> = sqlx::query_as(sql::RESCUE)
            .bind(id)
            .bind(token)
            .bind(now)
            .bind(errors)
            .bind(expired_by)
            .fetch_optional(&mut *savepoint)
            .await
            .map_err(Error::query("rescue"));
        let Some(row) = settle_row(savepoint, written, id, "the rescuer").await? else {
            refused.push(id);
            continue;
        };
        let Some((state, queue, kind)) = row else {
            continue;
        };
        let state = if state.0 == "retryable" {
            rescued.retried += 1;
            queues.push(queue.0);
            JobState::Retryable
        } else {
            rescued.discarded += 1;
            discarded.push(id);
            JobState::Discarded
        };
        rescued.jobs.push(RescuedJob {
            id,
            kind: kind.0,
            worker: job.locked_by,
            state,
        });
    }
    omit_unreadable_payloads(&mut *conn, &discarded, before).await?;
    Ok((rescued, queues, refused))
}

/// Records that the execution holding `lease` starts its handler, guarded by its token,
/// running and the lease's end. False when the lease is no longer held, or has run out.
pub(crate) async fn record_start(conn: &mut SqliteConnection, lease: Lease) -> Result<bool, Error> {
    let now = now(&mut *conn).await?;
    let row: Option<JobId> = sqlx::query_scalar(sql::RECORD_START)
        .bind(lease.id)
        .bind(lease.token)
        .bind(now)
        .fetch_optional(&mut *conn)
        .await
        .map_err(Error::query("record_start"))?;
    Ok(row.is_some())
}

/// Gives leases back, guarded by (id, lock_token) and running. Returns how many, and the
/// queues they went back to.
pub(crate) async fn release(
    conn: &mut SqliteConnection,
    releases: &[Release],
) -> Result<(u64, Vec<String>), Error> {
    if releases.is_empty() {
        return Ok((0, Vec::new()));
    }
    let now = now(&mut *conn).await?;
    let mut released = 0;
    let mut queues = Vec::new();
    for r in releases {
        let Some(job) = held(conn, &r.lease).await? else {
            continue;
        };
        let errors = match r.ran_for {
            None => job.errors.clone(),
            Some(ran) => history::push(
                &job.errors,
                job.attempt,
                now,
                "released",
                &format!(
                    "worker {} stopped this attempt after {} ms (a shutdown, or a lease it \
                     could not renew in time) and released it; the attempt is not counted",
                    job.locked_by.as_deref().unwrap_or("(unknown)"),
                    ran.as_millis()
                ),
            ),
        };
        let queue: Option<Text> = sqlx::query_scalar(sql::RELEASE)
            .bind(r.lease.id)
            .bind(r.lease.token)
            .bind(now)
            .bind(errors)
            .bind(r.ran_for.is_none())
            .bind(i64::from(job_core::MAX_REFUNDED_INTERRUPTIONS))
            .fetch_optional(&mut *conn)
            .await
            .map_err(Error::query("release"))?;
        if let Some(queue) = queue {
            released += 1;
            queues.push(queue.0);
        }
    }
    Ok((released, queues))
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use job_core::ClaimKind;

    use super::*;
    use crate::SqliteStore;

    /// The plan SQLite makes for `claim_pick.sql` with `binds` (queue, kind, now, limit,
    /// newest version, lowest version): the details, in order.
    async fn pick_plan(
        conn: &mut SqliteConnection,
        binds: (&str, &str, i64, i64, i64, i64),
    ) -> Vec<String> {
        let explain = format!("EXPLAIN QUERY PLAN {}", sql::CLAIM_PICK);
        let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as(&explain)
            .bind(binds.0)
            .bind(binds.1)
            .bind(binds.2)
            .bind(binds.3)
            .bind(binds.4)
            .bind(binds.5)
            .fetch_all(conn)
            .await
            .unwrap();
        rows.into_iter().map(|r| r.3).collect()
    }

    /// A store on a fresh file in a directory of its own (`job-sqlite-{name}-plan-…`), which
    /// the test removes at its end.
    pub(crate) async fn plan_store(name: &str) -> (std::path::PathBuf, SqliteStore) {
        let dir = std::env::temp_dir().join(format!(
            "job-sqlite-{name}-plan-{}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let store = SqliteStore::open(dir.join("job.db")).await.unwrap();
        (dir, store)
    }

    #[tokio::test]
    async fn a_claim_never_reads_the_rows_due_later_with_or_without_statistics() {
        let (dir, store) = plan_store("claim").await;
        let mut conn = store.pool().acquire().await.unwrap();
        let now = crate::time::now(&mut conn).await.unwrap();
        // 3,000 jobs of the queue due tomorrow over three priorities (and more of another
        // queue), one due now at each priority.
        sqlx::query(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 4000)
             INSERT INTO job_jobs (kind, queue, priority, payload, run_at, state, created_at)
             SELECT 'k', CASE WHEN i <= 3000 THEN 'q' ELSE 'other' END, i % 3, '{}',
                    ?1 + 86400000000 + i, 'scheduled', ?1
             FROM s",
        )
        .bind(now)
        .execute(&mut *conn)
        .await
        .unwrap();
        let mut due = Vec::new();
        for priority in [2, 0, 1] {
            let id: JobId = sqlx::query_scalar(
                "INSERT INTO job_jobs (kind, queue, priority, payload, run_at, state, created_at)
                 VALUES ('k', 'q', ?1, '{}', ?2, 'available', ?2) RETURNING id",
            )
            .bind(priority)
            .bind(now)
            .fetch_one(&mut *conn)
            .await
            .unwrap();
            due.push((priority, id));
        }
        due.sort();
        let due: Vec<JobId> = due.into_iter().map(|(_, id)| id).collect();
        let kind = ClaimKind {
            kind: "k".into(),
            max_version: 1,
            lease: Duration::from_secs(30),
            concurrency: None,
            rate: None,
        };

        for analyzed in [false, true] {
            if analyzed {
                sqlx::query("ANALYZE").execute(&mut *conn).await.unwrap();
            }
            let plan = pick_plan(&mut conn, ("q", "k", now, 10, 1, 1)).await;
            // The jobs are read through one range of the claim index per priority, up to now,
            // in the claim's order: never a scan of the queue's waiting rows, never a sort.
            let jobs: Vec<&String> = plan
                .iter()
                .filter(|d| {
                    d.starts_with("SEARCH j ") || d.starts_with("SCAN j ") || *d == "SCAN j"
                })
                .collect();
            assert_eq!(
                jobs,
                ["SEARCH j USING INDEX job_jobs_claim_version_idx \
                  (queue=? AND kind=? AND payload_version=? AND priority=? AND run_at<?)"],
                "analyzed: {analyzed}; plan: {plan:#?}"
            );
            // The first read: the jobs are the outer loop (the version and the priorities are
            // subqueries, each run once).
            assert_eq!(
                plan.iter()
                    .find(|d| d.starts_with("SEARCH ") || d.starts_with("SCAN ")),
                Some(jobs[0]),
                "the jobs are the outer loop: {plan:#?}"
            );
            assert!(
                !plan.iter().any(|d| d.contains("TEMP B-TREE")),
                "analyzed: {analyzed}; plan: {plan:#?}"
            );
            let (picked, next) = pick(&mut conn, "q", &kind, Some(now), 10, 1).await.unwrap();
            assert_eq!(next, None);
            let ids: Vec<JobId> = picked.iter().map(|p| p.id).collect();
            assert_eq!(
                ids, due,
                "analyzed: {analyzed}: the due jobs, in priority order"
            );
        }
        drop(conn);
        store.pool().close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// How much work `claim` does for `request` on `conn` (SQLite's virtual machine
    /// instructions, counted by a progress handler called at each one), and what it claimed:
    /// in a transaction rolled back, so the same claim can be measured again.
    async fn measured_claim(
        conn: &mut SqliteConnection,
        request: &ClaimRequest,
    ) -> (u64, Vec<JobId>) {
        use std::sync::atomic::{AtomicU64, Ordering};
        use std::sync::Arc;

        let mut tx = conn.begin().await.unwrap();
        let steps = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&steps);
        tx.lock_handle()
            .await
            .unwrap()
            .set_progress_handler(1, move || {
                counter.fetch_add(1, Ordering::Relaxed);
                true
            });
        let claimed = claim(&mut tx, request).await.unwrap();
        tx.lock_handle().await.unwrap().remove_progress_handler();
        tx.rollback().await.unwrap();
        (
            steps.load(Ordering::Relaxed),
            claimed.iter().map(|j| j.lease.id).collect(),
        )
    }

    /// A claim reads the due rows of the kinds it takes and no others: not those of a paused
    /// kind, of a kind at its concurrency cap, or of a kind the worker does not run, though
    /// they come first in the claim's order (each kind is picked through its own range of
    /// `job_jobs_claim_version_idx`, migration 0020). Shown by the pick's plan, with and without
    /// statistics, and by the claim's work, the same with 9,000 such rows as with none.
    #[tokio::test]
    async fn a_claim_never_reads_the_due_rows_of_kinds_it_does_not_take() {
        let (dir, store) = plan_store("kinds").await;
        let mut conn = store.pool().acquire().await.unwrap();
        let now = crate::time::now(&mut conn).await.unwrap();
        let wanted: JobId = sqlx::query_scalar(
            "INSERT INTO job_jobs (kind, queue, priority, payload, run_at, state, created_at)
             VALUES ('k', 'q', 5, '{}', ?1, 'available', ?1) RETURNING id",
        )
        .bind(now)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
        // `paused` is paused; `capped` runs one job, its cap.
        sqlx::query(
            "INSERT INTO job_pauses (scope, name, paused_at) VALUES ('kind', 'paused', ?1)",
        )
        .bind(now)
        .execute(&mut *conn)
        .await
        .unwrap();
        sqlx::query(
            "INSERT INTO job_jobs (kind, queue, priority, payload, run_at, state, created_at,
                                   attempt, lock_token, locked_until, locked_by)
             VALUES ('capped', 'q', 0, '{}', ?1, 'running', ?1, 1, randomblob(16),
                     ?1 + 60000000, 'w')",
        )
        .bind(now)
        .execute(&mut *conn)
        .await
        .unwrap();
        let kind = |name: &str, concurrency: Option<u32>| ClaimKind {
            kind: name.into(),
            max_version: 1,
            lease: Duration::from_secs(30),
            concurrency,
            rate: None,
        };
        let request = ClaimRequest {
            queue: "q".into(),
            kinds: vec![
                kind("k", None),
                kind("paused", None),
                kind("capped", Some(1)),
            ],
            limit: 10,
            worker_id: "w".into(),
        };
        for analyzed in [false, true] {
            // 3,000 due rows of each kind this claim does not take, all ahead of the wanted
            // job (a higher priority, due earlier).
            sqlx::query(
                "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 9000)
                 INSERT INTO job_jobs (kind, queue, priority, payload, run_at, state, created_at)
                 SELECT CASE i % 3 WHEN 0 THEN 'paused' WHEN 1 THEN 'capped' ELSE 'other' END,
                        'q', i % 2, '{}', ?1 - i, 'available', ?1 - i
                 FROM s",
            )
            .bind(now)
            .execute(&mut *conn)
            .await
            .unwrap();
            if analyzed {
                sqlx::query("ANALYZE").execute(&mut *conn).await.unwrap();
            }
            for name in ["k", "paused", "capped"] {
                let plan = pick_plan(&mut conn, ("q", name, now, 10, 1, 1)).await;
                // Every read of the table is a seek or a range of the kind's own entries.
                let reads: Vec<&String> = plan
                    .iter()
                    .filter(|d| {
                        let mut words = d.split(' ');
                        matches!(words.next(), Some("SEARCH" | "SCAN"))
                            && matches!(words.next(), Some("j" | "w" | "n" | "job_jobs"))
                    })
                    .collect();
                assert!(
                    reads.len() == 5
                        && reads.iter().all(|d| d.starts_with("SEARCH ")
                            && d.contains("INDEX job_jobs_claim_version_idx (queue=? AND kind=?")),
                    "{name}, analyzed: {analyzed}; plan: {plan:#?}"
                );
            }
            // Once to prepare its statements (ANALYZE makes them prepared again), then with
            // the other kinds' rows and without them, under the same statistics.
            measured_claim(&mut conn, &request).await;
            let (with_rows, claimed) = measured_claim(&mut conn, &request).await;
            assert_eq!(claimed, [wanted], "analyzed: {analyzed}");
            sqlx::query("DELETE FROM job_jobs WHERE kind <> 'k' AND state = 'available'")
                .execute(&mut *conn)
                .await
                .unwrap();
            let (without, claimed) = measured_claim(&mut conn, &request).await;
            assert_eq!(claimed, [wanted], "analyzed: {analyzed}");
            // The same work, but for a few instructions (seeks into a deeper tree): reading the
            // other kinds' rows would take tens of thousands.
            assert!(
                with_rows <= without + 50,
                "analyzed: {analyzed}: the claim took {with_rows} SQLite instructions with \
                 9,000 due rows of other kinds, {without} without them"
            );
        }
        drop(conn);
        store.pool().close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A claim reads no waiting row of a payload version newer than its worker decodes (a
    /// rolling deploy: new code enqueues version 3 while old workers, which decode up to 2,
    /// still poll), though those rows come first in the claim's order, and it takes the jobs
    /// of the versions it decodes in the claim's order across versions (each version is picked
    /// through its own range of `job_jobs_claim_version_idx`, migration 0020, and the picks
    /// merged). Shown by the pick's plan, with and without statistics, and by the claim's
    /// work, the same with 9,000 due rows of newer versions as with none.
    #[tokio::test]
    async fn a_claim_never_reads_the_rows_of_a_newer_payload_version() {
        let (dir, store) = plan_store("versions").await;
        let mut conn = store.pool().acquire().await.unwrap();
        let now = crate::time::now(&mut conn).await.unwrap();
        // The claimable jobs, versions 1 and 2 interleaved in the claim's order, and one of
        // each due tomorrow.
        let mut insert = async |version: i32, priority: i64, run_at: Micros| -> JobId {
            sqlx::query_scalar(
                "INSERT INTO job_jobs (kind, queue, priority, payload, payload_version, run_at,
                                       state, created_at)
                 VALUES ('k', 'q', ?1, '{}', ?2, ?3, 'available', ?3) RETURNING id",
            )
            .bind(priority)
            .bind(version)
            .bind(run_at)
            .fetch_one(&mut *conn)
            .await
            .unwrap()
        };
        let a = insert(2, 0, now - 10).await;
        let b = insert(1, 0, now - 20).await;
        let c = insert(2, 1, now - 40).await;
        let d = insert(1, 1, now - 30).await;
        let e = insert(1, 2, now - 50).await;
        insert(1, 0, now + 86_400_000_000).await;
        insert(2, 0, now + 86_400_000_000).await;
        let in_order = [b, a, c, d, e];
        let request = |limit: u32, concurrency: Option<u32>| ClaimRequest {
            queue: "q".into(),
            kinds: vec![ClaimKind {
                kind: "k".into(),
                max_version: 2,
                lease: Duration::from_secs(30),
                concurrency,
                rate: None,
            }],
            limit,
            worker_id: "w".into(),
        };
        for analyzed in [false, true] {
            // 9,000 due rows of versions 3 and 4, all ahead of the claimable jobs (the same
            // priorities, due earlier).
            sqlx::query(
                "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 9000)
                 INSERT INTO job_jobs (kind, queue, priority, payload, payload_version, run_at,
                                       state, created_at)
                 SELECT 'k', 'q', i % 2, '{}', 3 + i % 2, ?1 - 100 - i, 'available', ?1
                 FROM s",
            )
            .bind(now)
            .execute(&mut *conn)
            .await
            .unwrap();
            if analyzed {
                sqlx::query("ANALYZE").execute(&mut *conn).await.unwrap();
            }
            for from in [1, 2] {
                let plan = pick_plan(&mut conn, ("q", "k", now, 10, 2, from)).await;
                // Every read of the table is a seek or a range of the kind's entries of one
                // version, or of the versions from `from` up to 2: never one of version 3.
                let reads: Vec<&String> = plan
                    .iter()
                    .filter(|d| {
                        let mut words = d.split(' ');
                        matches!(words.next(), Some("SEARCH" | "SCAN"))
                            && matches!(words.next(), Some("j" | "w" | "n" | "job_jobs"))
                    })
                    .collect();
                let index = "INDEX job_jobs_claim_version_idx (queue=? AND kind=? AND \
                             payload_version";
                assert!(
                    reads.len() == 5
                        && reads.iter().all(|d| {
                            d.starts_with("SEARCH ")
                                && d.contains(index)
                                && (d.contains("payload_version=?")
                                    || d.ends_with("payload_version>? AND payload_version<?)"))
                        }),
                    "from {from}, analyzed: {analyzed}; plan: {plan:#?}"
                );
                assert!(
                    reads.contains(
                        &&"SEARCH j USING INDEX job_jobs_claim_version_idx (queue=? AND kind=? \
                           AND payload_version=? AND priority=? AND run_at<?)"
                            .to_owned()
                    ) && !plan.iter().any(|d| d.contains("TEMP B-TREE")),
                    "from {from}, analyzed: {analyzed}; plan: {plan:#?}"
                );
            }
            // A pick per version, each in the claim's order, naming the next version.
            let kind = &request(10, None).kinds[0];
            let (first, next) = pick(&mut conn, "q", kind, Some(now), 10, 1).await.unwrap();
            let ids: Vec<JobId> = first.iter().map(|p| p.id).collect();
            assert_eq!(
                (ids, next),
                (vec![b, d, e], Some(2)),
                "analyzed: {analyzed}"
            );
            let (second, next) = pick(&mut conn, "q", kind, Some(now), 10, 2).await.unwrap();
            let ids: Vec<JobId> = second.iter().map(|p| p.id).collect();
            assert_eq!((ids, next), (vec![a, c], None), "analyzed: {analyzed}");

            // Once to prepare its statements (ANALYZE makes them prepared again), then with
            // the newer versions' rows and without them, under the same statistics.
            measured_claim(&mut conn, &request(10, None)).await;
            let (with_rows, claimed) = measured_claim(&mut conn, &request(10, None)).await;
            assert_eq!(claimed, in_order, "analyzed: {analyzed}");
            // Fewer than the claimable jobs: the first in the claim's order, across versions,
            // whether the limit or the kind's concurrency cap bounds them.
            let (_, claimed) = measured_claim(&mut conn, &request(3, None)).await;
            assert_eq!(claimed, in_order[..3], "analyzed: {analyzed}");
            let (_, claimed) = measured_claim(&mut conn, &request(10, Some(3))).await;
            assert_eq!(claimed, in_order[..3], "analyzed: {analyzed}");
            sqlx::query("DELETE FROM job_jobs WHERE payload_version > 2")
                .execute(&mut *conn)
                .await
                .unwrap();
            let (without, claimed) = measured_claim(&mut conn, &request(10, None)).await;
            assert_eq!(claimed, in_order, "analyzed: {analyzed}");
            // The same work, but for a few instructions (seeks into a deeper tree): reading the
            // newer versions' rows would take tens of thousands.
            assert!(
                with_rows <= without + 50,
                "analyzed: {analyzed}: the claim took {with_rows} SQLite instructions with \
                 9,000 due rows of newer versions, {without} without them"
            );
        }
        drop(conn);
        store.pool().close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The claim's take and the completions are one statement for a whole batch: each row is
    /// reached by its primary key, the batch (`json_each`) being the outer loop, never a scan
    /// of the table, with or without statistics.
    #[tokio::test]
    async fn a_batch_reaches_its_rows_by_primary_key_with_or_without_statistics() {
        let (dir, store) = plan_store("batch").await;
        let mut conn = store.pool().acquire().await.unwrap();
        let now = crate::time::now(&mut conn).await.unwrap();
        sqlx::query(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 4000)
             INSERT INTO job_jobs (kind, queue, priority, payload, run_at, state, created_at)
             SELECT 'k', 'q', 0, '{}', ?1, 'available', ?1 FROM s",
        )
        .bind(now)
        .execute(&mut *conn)
        .await
        .unwrap();
        let batch =
            r#"[{"id":1,"token":"00112233445566778899aabbccddeeff","until":1,"result":null}]"#;
        for analyzed in [false, true] {
            if analyzed {
                sqlx::query("ANALYZE").execute(&mut *conn).await.unwrap();
            }
            for (name, statement, first) in [
                ("claim_take", sql::CLAIM_TAKE, "w"),
                ("finalize_completed", sql::FINALIZE_COMPLETED, "1"),
            ] {
                let rows: Vec<(i64, i64, i64, String)> =
                    sqlx::query_as(&format!("EXPLAIN QUERY PLAN {statement}"))
                        .bind(first)
                        .bind(batch)
                        .fetch_all(&mut *conn)
                        .await
                        .unwrap();
                let plan: Vec<String> = rows.into_iter().map(|r| r.3).collect();
                assert!(
                    plan.len() == 2
                        && plan[0].starts_with("SCAN json_each VIRTUAL TABLE")
                        && plan[1] == "SEARCH job_jobs USING INTEGER PRIMARY KEY (rowid=?)",
                    "{name}, analyzed: {analyzed}: {plan:#?}"
                );
            }
        }
        drop(conn);
        store.pool().close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
