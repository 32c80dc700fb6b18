//! The reporter's pass (`Store::report`): record the kinds' owners, take or keep the
//! reporter's role, and read the database-derived gauges when held.

use std::time::Duration;

use job_core::{
    duration_millis, BreakerCount, DeadLetterCount, JobState, Pause, PauseEntry, PausedBy,
    QueueCount, Report, ReportRequest, Tripped,
};
use sqlx::{PgPool, Row};

use crate::error::Error;
use crate::sql;

/// The row of `job.leaders` the reporter holds.
const ROLE: &str = "reporter";

/// Records each kind's compensating job, or that it has none (`sql/register_kinds.sql`).
pub(crate) async fn register_kinds(
    pool: &PgPool,
    kinds: &[(String, Option<job_core::Compensate>)],
) -> Result<(), Error> {
    let names: Vec<&str> = kinds.iter().map(|(k, _)| k.as_str()).collect();
    let ckinds: Vec<Option<&str>> = kinds.iter().map(|(_, c)| c.map(|c| c.kind)).collect();
    let cqueues: Vec<Option<&str>> = kinds.iter().map(|(_, c)| c.map(|c| c.queue)).collect();
    let cpriorities: Vec<Option<i16>> = kinds.iter().map(|(_, c)| c.map(|c| c.priority)).collect();
    let cattempts: Vec<Option<i32>> = kinds
        .iter()
        .map(|(_, c)| c.map(|c| c.max_attempts))
        .collect();
    let cversions: Vec<Option<i32>> = kinds.iter().map(|(_, c)| c.map(|c| c.version)).collect();
    sqlx::query(sql::REGISTER_KINDS)
        .bind(names)
        .bind(ckinds)
        .bind(cqueues)
        .bind(cpriorities)
        .bind(cattempts)
        .bind(cversions)
        .execute(pool)
        .await
        .map_err(Error::query("register_kinds"))?;
    Ok(())
}

pub(crate) async fn report(
    pool: &PgPool,
    request: &ReportRequest,
) -> Result<Option<Report>, Error> {
    if !request.owners.is_empty() {
        let (kinds, owners): (Vec<&str>, Vec<&str>) = request
            .owners
            .iter()
            .map(|(k, o)| (k.as_str(), o.as_str()))
            .unzip();
        sqlx::query(sql::REPORT_OWNERS)
            .bind(kinds)
            .bind(owners)
            .execute(pool)
            .await
            .map_err(Error::query("report_owners"))?;
    }
    let held = sqlx::query(sql::REPORT_LEAD)
        .bind(ROLE)
        .bind(&request.holder)
        .bind(duration_millis(request.hold_for))
        .fetch_optional(pool)
        .await
        .map_err(Error::query("report_lead"))?;
    if held.is_none() {
        return Ok(None);
    }
    if !request.read {
        return Ok(Some(Report::default()));
    }
    let mut tx = pool.begin().await.map_err(Error::query("begin"))?;
    // No JIT, no parallel workers (see the statement).
    sqlx::query(sql::REPORT_SETTINGS)
        .execute(&mut *tx)
        .await
        .map_err(Error::query("report_settings"))?;
    let rows = sqlx::query(sql::REPORT)
        .fetch_all(&mut *tx)
        .await
        .map_err(Error::query("report"))?;
    tx.commit().await.map_err(Error::query("commit"))?;
    let mut report = Report::default();
    for row in rows {
        let mut read = || -> Result<(), sqlx::Error> {
            let section: String = row.try_get("section")?;
            let queue: String = row.try_get("queue")?;
            let name: Option<String> = row.try_get("name")?;
            let n: f64 = row.try_get("n")?;
            match section.as_str() {
                "jobs" => {
                    if let Some(state) = name.and_then(|s| s.parse::<JobState>().ok()) {
                        report.jobs.push(QueueCount {
                            queue,
                            state,
                            count: n as u64,
                        });
                    }
                }
                "oldest" => report
                    .oldest_due
                    .push((queue, Duration::from_secs_f64(n.max(0.0)))),
                _ => report.dead_letters.push(DeadLetterCount {
                    queue,
                    kind: name.unwrap_or_default(),
                    owner: row.try_get("owner")?,
                    count: n as u64,
                }),
            }
            Ok(())
        };
        read().map_err(Error::query("report"))?;
    }
    report.paused = pauses(pool).await?;
    Ok(Some(report))
}

/// Every pause in force, with who made it, why and until when (`sql/pauses.sql`).
pub(crate) async fn pauses<'e, E: sqlx::PgExecutor<'e>>(
    executor: E,
) -> Result<Vec<PauseEntry>, Error> {
    let rows = sqlx::query(sql::PAUSES)
        .fetch_all(executor)
        .await
        .map_err(Error::query("pauses"))?;
    rows.iter()
        .map(pause_entry)
        .collect::<Result<_, sqlx::Error>>()
        .map_err(Error::query("pauses"))
}

/// One row of `sql/pauses.sql` (or `sql/pauses_tenant.sql`, which has the same columns).
pub(crate) fn pause_entry(row: &sqlx::postgres::PgRow) -> Result<PauseEntry, sqlx::Error> {
    let scope: String = row.try_get("scope")?;
    let name: String = row.try_get("name")?;
    let by: String = row.try_get("paused_by")?;
    Ok(PauseEntry {
        what: match scope.as_str() {
            "queue" => Pause::Queue(name),
            _ => Pause::Kind(name),
        },
        paused_by: PausedBy::parse(&by).unwrap_or(PausedBy::Operator),
        reason: row.try_get("reason")?,
        paused_at: row.try_get("paused_at")?,
        resume_at: row.try_get("resume_at")?,
    })
}

/// The most kinds `job.breaker_record` takes in one call (migration 0046).
const BREAKER_KINDS_PER_CALL: usize = 1000;

/// Adds ended attempts to the kinds' circuit breakers (`sql/breaker_record.sql`) and returns
/// those it tripped. More kinds than one call takes go in several calls of one transaction,
/// all or nothing (the caller keeps the counts of a failed call for its next), in kind order
/// across the calls as within each, so that two workers' transactions never deadlock.
pub(crate) async fn record_breakers(
    pool: &PgPool,
    counts: &[BreakerCount],
) -> Result<Vec<Tripped>, Error> {
    let mut sorted: Vec<&BreakerCount> = counts.iter().collect();
    if sorted.len() <= BREAKER_KINDS_PER_CALL {
        return record_breakers_once(pool, &sorted).await;
    }
    sorted.sort_by(|a, b| a.kind.cmp(&b.kind));
    let mut tx = pool.begin().await.map_err(Error::query("begin"))?;
    let mut tripped = Vec::new();
    for chunk in sorted.chunks(BREAKER_KINDS_PER_CALL) {
        tripped.extend(record_breakers_once(&mut *tx, chunk).await?);
    }
    tx.commit().await.map_err(Error::query("commit"))?;
    Ok(tripped)
}

/// One call of `job.breaker_record` for `counts` (at most [`BREAKER_KINDS_PER_CALL`]).
async fn record_breakers_once<'e, E: sqlx::PgExecutor<'e>>(
    executor: E,
    counts: &[&BreakerCount],
) -> Result<Vec<Tripped>, Error> {
    if counts.is_empty() {
        return Ok(Vec::new());
    }
    let kinds: Vec<&str> = counts.iter().map(|c| c.kind.as_str()).collect();
    let attempts: Vec<i64> = counts.iter().map(|c| i64::from(c.attempts)).collect();
    let failures: Vec<i64> = counts.iter().map(|c| i64::from(c.failures)).collect();
    let percents: Vec<i16> = counts
        .iter()
        .map(|c| i16::from(c.breaker.failure_percent))
        .collect();
    let mins: Vec<i32> = counts
        .iter()
        .map(|c| i32::try_from(c.breaker.min_attempts).unwrap_or(i32::MAX))
        .collect();
    let windows: Vec<i64> = counts
        .iter()
        .map(|c| duration_millis(c.breaker.window))
        .collect();
    let cool_downs: Vec<i64> = counts
        .iter()
        .map(|c| duration_millis(c.breaker.cool_down))
        .collect();
    let rows: Vec<(String, String, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as(sql::BREAKER_RECORD)
            .bind(kinds)
            .bind(attempts)
            .bind(failures)
            .bind(percents)
            .bind(mins)
            .bind(windows)
            .bind(cool_downs)
            .fetch_all(executor)
            .await
            .map_err(Error::query("breaker_record"))?;
    Ok(rows
        .into_iter()
        .map(|(kind, reason, resume_at)| Tripped {
            kind,
            reason,
            resume_at,
        })
        .collect())
}
