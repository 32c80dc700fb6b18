//! The reporter's pass (`Store::report`): record the kinds' owners, take or keep the
//! reporter's role, and read the database-derived gauges when held.

use std::time::Duration;

use job_core::{duration_millis, DeadLetterCount, JobState, QueueCount, Report, ReportRequest};
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
    sqlx::query(sql::REGISTER_KINDS)
        .bind(names)
        .bind(ckinds)
        .bind(cqueues)
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
    let mut tx = pool.begin().await.map_err(Error::query("begin"))?;
    // Planned above jit_above_cost on a large table, it would spend its time compiling.
    sqlx::query(sql::JIT_OFF)
        .execute(&mut *tx)
        .await
        .map_err(Error::query("jit_off"))?;
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
    Ok(Some(report))
}
