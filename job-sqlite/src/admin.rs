//! Operator actions: [`Admin`] on [`SqliteStore`]. Each action is one immediate transaction.

use std::collections::HashMap;
use std::time::Duration;

use job_core::{
    Admin, Cancelled, JobFilter, JobId, JobRow, JobState, Pause, PauseEntry, Redriven, StateCount,
    Stats, StoreError,
};
use sqlx::query::Query;
use sqlx::sqlite::SqliteArguments;
use sqlx::{Row, Sqlite, SqliteConnection};

use crate::error::Error;
use crate::history;
use crate::row;
use crate::sql;
use crate::text::Text;
use crate::time::{from_time, now};
use crate::SqliteStore;

fn parse_state(id: JobId, state: &str) -> Result<JobState, Error> {
    state
        .parse()
        .map_err(|e: job_core::UnknownState| Error::Decode {
            id,
            column: "state",
            reason: e.to_string(),
        })
}

/// Binds a [`JobFilter`] as `?1..?9` of `sql/job_filter.sql`, with `states` for its states.
fn bind_filter<'q>(
    query: Query<'q, Sqlite, SqliteArguments<'q>>,
    filter: &'q JobFilter,
    states: &[JobState],
) -> Query<'q, Sqlite, SqliteArguments<'q>> {
    let ids = serde_json::to_string(&filter.ids).unwrap_or_else(|_| "[]".into());
    let states: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
    let states = serde_json::to_string(&states).unwrap_or_else(|_| "[]".into());
    query
        .bind(ids)
        .bind(states)
        .bind(&filter.kind)
        .bind(&filter.queue)
        .bind(&filter.tenant)
        .bind(&filter.tag)
        .bind(filter.finalized_from.map(from_time))
        .bind(filter.finalized_to.map(from_time))
        .bind(i64::from(filter.effective_limit()))
}

async fn list(
    conn: &mut SqliteConnection,
    filter: &JobFilter,
    states: &[JobState],
) -> Result<Vec<JobRow>, Error> {
    let rows = bind_filter(sqlx::query(sql::JOB_FILTER), filter, states)
        .fetch_all(&mut *conn)
        .await
        .map_err(Error::query("job_filter"))?;
    rows.iter()
        .map(|r| {
            let id: JobId = r.try_get("id").map_err(Error::query("job_filter"))?;
            row::decode(id, r)
        })
        .collect()
}

/// The statement picking the dead letters `filter` names, for redrive and purge, and its name:
/// by primary key when it names ids, else through `job_jobs_discarded_idx`.
fn dead_letters_statement(filter: &JobFilter) -> (&'static str, &'static str) {
    if filter.ids.is_empty() {
        (sql::DEAD_LETTERS, "dead_letters")
    } else {
        (sql::DEAD_LETTERS_BY_ID, "dead_letters_by_id")
    }
}

/// Binds a [`JobFilter`] to [`dead_letters_statement`]'s statement (its states left out: only
/// `discarded`).
fn bind_dead_letters<'q>(
    query: Query<'q, Sqlite, SqliteArguments<'q>>,
    filter: &'q JobFilter,
) -> Query<'q, Sqlite, SqliteArguments<'q>> {
    let query = if filter.ids.is_empty() {
        query
    } else {
        query.bind(serde_json::to_string(&filter.ids).unwrap_or_else(|_| "[]".into()))
    };
    query
        .bind(&filter.kind)
        .bind(&filter.queue)
        .bind(&filter.tenant)
        .bind(&filter.tag)
        .bind(filter.finalized_from.map(from_time))
        .bind(filter.finalized_to.map(from_time))
        .bind(i64::from(filter.effective_limit()))
}

/// A dead letter and, when it has a unique key, its kind and key as stored, byte for byte
/// (the row's text shows bytes that are not UTF-8 as U+FFFD: two keys that differ only in
/// such bytes read the same there).
struct DeadLetter {
    row: JobRow,
    key: Option<(Vec<u8>, Vec<u8>)>,
}

/// The dead letters `filter` names, lowest id first, up to its limit.
async fn dead_letters(
    conn: &mut SqliteConnection,
    filter: &JobFilter,
) -> Result<Vec<DeadLetter>, Error> {
    let (statement, name) = dead_letters_statement(filter);
    let rows = bind_dead_letters(sqlx::query(statement), filter)
        .fetch_all(&mut *conn)
        .await
        .map_err(Error::query(name))?;
    rows.iter()
        .map(|r| {
            let id: JobId = r.try_get("id").map_err(Error::query(name))?;
            let row = row::decode(id, r)?;
            let key: Option<Vec<u8>> = r.try_get("unique_key").map_err(Error::query(name))?;
            let key = match key {
                Some(key) => Some((r.try_get("kind").map_err(Error::query(name))?, key)),
                None => None,
            };
            Ok(DeadLetter { row, key })
        })
        .collect()
}

impl Admin for SqliteStore {
    async fn cancel(&self, id: JobId) -> Result<Cancelled, StoreError> {
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            let now = now(&mut w.tx).await?;
            let found: Option<(String, i32, Text)> = sqlx::query_as(sql::CANCEL_READ)
                .bind(id)
                .fetch_optional(&mut *w.tx)
                .await
                .map_err(Error::query("cancel_read"))?;
            let Some((state, attempt, errors)) = found else {
                return Ok(Cancelled::NotFound);
            };
            let state = parse_state(id, &state)?;
            if state.is_terminal() {
                return Ok(Cancelled::AlreadyFinished(state));
            }
            let errors = history::push(
                &errors.0,
                attempt,
                now,
                "cancelled",
                "cancelled by an operator",
            );
            let after: Option<String> = sqlx::query_scalar(sql::CANCEL)
                .bind(id)
                .bind(now)
                .bind(errors)
                .fetch_optional(&mut *w.tx)
                .await
                .map_err(Error::query("cancel"))?;
            w.commit().await?;
            Ok(match after.as_deref() {
                Some("running") => Cancelled::Requested,
                Some(_) => Cancelled::Now,
                None => Cancelled::AlreadyFinished(state),
            })
        })
        .await
    }

    async fn pause(&self, what: &Pause) -> Result<bool, StoreError> {
        what.check()?;
        let what = what.clone();
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            let now = now(&mut w.tx).await?;
            let done = sqlx::query(sql::PAUSE)
                .bind(what.scope())
                .bind(what.name())
                .bind(now)
                .execute(&mut *w.tx)
                .await
                .map_err(Error::query("pause"))?;
            w.commit().await?;
            Ok(done.rows_affected() > 0)
        })
        .await
    }

    async fn resume(&self, what: &Pause) -> Result<bool, StoreError> {
        let refusal = what.check_resume()?;
        let what = what.clone();
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            let now = now(&mut w.tx).await?;
            let was: Option<bool> = sqlx::query_scalar(sql::RESUME)
                .bind(what.scope())
                .bind(what.name())
                .bind(now)
                .fetch_optional(&mut *w.tx)
                .await
                .map_err(Error::query("resume"))?;
            w.commit().await?;
            let resumed = was.unwrap_or(false);
            if resumed {
                // A resumed queue is woken so idle workers claim at once; a resumed kind waits for
                // the next poll, as with job-postgres.
                if let Pause::Queue(name) = &what {
                    store.wake(std::slice::from_ref(name));
                }
            }
            Ok(resumed)
        })
        .await
        .and_then(|resumed| match refusal {
            Some(refusal) if !resumed => Err(refusal),
            _ => Ok(resumed),
        })
    }

    async fn paused(&self) -> Result<Vec<Pause>, StoreError> {
        Ok(self.pauses().await?.into_iter().map(|p| p.what).collect())
    }

    async fn pauses(&self) -> Result<Vec<PauseEntry>, StoreError> {
        let mut conn = self
            .pool()
            .acquire()
            .await
            .map_err(Error::query("acquire"))?;
        let now = now(&mut conn).await?;
        Ok(crate::lease::paused(&mut conn, now).await?)
    }

    async fn list(&self, filter: &JobFilter) -> Result<Vec<JobRow>, StoreError> {
        filter.check()?;
        let mut conn = self
            .pool()
            .acquire()
            .await
            .map_err(Error::query("acquire"))?;
        Ok(list(&mut conn, filter, &filter.states).await?)
    }

    async fn redrive(&self, filter: &JobFilter) -> Result<Redriven, StoreError> {
        filter.check()?;
        let filter = filter.clone();
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            let now = now(&mut w.tx).await?;
            let dead = dead_letters(&mut w.tx, &filter).await?;
            // Of several dead letters sharing a kind and key (byte for byte), only the newest
            // goes back.
            let mut newest: HashMap<&(Vec<u8>, Vec<u8>), JobId> = HashMap::new();
            for d in &dead {
                if let Some(key) = &d.key {
                    let slot = newest.entry(key).or_insert(d.row.id);
                    *slot = (*slot).max(d.row.id);
                }
            }
            let mut out = Redriven::default();
            let mut queues = Vec::new();
            for DeadLetter { row: d, key } in &dead {
                if let Some(key) = key {
                    let holder: Option<JobId> = sqlx::query_scalar(sql::UNIQUE_OTHER_HOLDER)
                        .bind(d.id)
                        .fetch_optional(&mut *w.tx)
                        .await
                        .map_err(Error::query("unique_other_holder"))?;
                    let first = newest[key];
                    if let Some(existing) = holder.or((first != d.id).then_some(first)) {
                        out.skipped.push((d.id, existing));
                        continue;
                    }
                }
                let queue: Option<Text> = sqlx::query_scalar(sql::REDRIVE)
                    .bind(d.id)
                    .bind(now)
                    .fetch_optional(&mut *w.tx)
                    .await
                    .map_err(Error::query("redrive"))?;
                if let Some(queue) = queue {
                    out.redriven.push(d.id);
                    queues.push(queue.0);
                }
            }
            w.commit().await?;
            store.wake(&queues);
            Ok(out)
        })
        .await
    }

    async fn purge(&self, filter: &JobFilter) -> Result<u64, StoreError> {
        filter.check()?;
        let filter = filter.clone();
        self.on_writer(|store| async move {
            let mut w = store.write().await?;
            let dead = dead_letters(&mut w.tx, &filter).await?;
            let ids: Vec<JobId> = dead.iter().map(|d| d.row.id).collect();
            let done = sqlx::query(sql::PURGE)
                .bind(serde_json::to_string(&ids).unwrap_or_else(|_| "[]".into()))
                .execute(&mut *w.tx)
                .await
                .map_err(Error::query("purge"))?;
            w.commit().await?;
            Ok(done.rows_affected())
        })
        .await
    }

    async fn stats(&self, filter: &JobFilter) -> Result<Stats, StoreError> {
        filter.check()?;
        let mut conn = self
            .pool()
            .acquire()
            .await
            .map_err(Error::query("acquire"))?;
        let now = now(&mut conn).await?;
        let counts: Vec<(Text, String, i64)> = sqlx::query_as(sql::STATS_COUNTS)
            .bind(&filter.kind)
            .bind(&filter.queue)
            .bind(&filter.tenant)
            .bind(&filter.tag)
            .fetch_all(&mut *conn)
            .await
            .map_err(Error::query("stats_counts"))?;
        let oldest: Option<i64> = sqlx::query_scalar(sql::STATS_OLDEST)
            .bind(&filter.kind)
            .bind(&filter.queue)
            .bind(&filter.tenant)
            .bind(&filter.tag)
            .bind(now)
            .fetch_one(&mut *conn)
            .await
            .map_err(Error::query("stats_oldest"))?;
        let stuck: i64 = sqlx::query_scalar(sql::STATS_STUCK)
            .bind(&filter.kind)
            .bind(&filter.queue)
            .bind(&filter.tenant)
            .bind(&filter.tag)
            .fetch_one(&mut *conn)
            .await
            .map_err(Error::query("stats_stuck"))?;
        let mut counts = counts
            .into_iter()
            .map(|(queue, state, n)| {
                Ok(StateCount {
                    queue: queue.0,
                    state: parse_state(0, &state)?,
                    count: n.unsigned_abs(),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        counts.sort_by(|a, b| (&a.queue, a.state).cmp(&(&b.queue, b.state)));
        let mut stats = Stats {
            counts,
            oldest_available_age: oldest.map(|us| Duration::from_micros(us.unsigned_abs())),
            dead_letters: 0,
            stuck: stuck.unsigned_abs(),
        };
        stats.dead_letters = stats.in_state(JobState::Discarded);
        Ok(stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::tests::plan_store;

    /// Redrive and purge read the dead letters through `job_jobs_discarded_idx`, or each id
    /// they name by primary key, never the whole table (a million completed rows and 5 dead
    /// letters: 170-218 ms under the write lock through `job_filter.sql`), with or without
    /// statistics, whatever else the filter holds.
    #[tokio::test]
    async fn redrive_and_purge_read_only_the_dead_letters_with_or_without_statistics() {
        let (dir, store) = plan_store("dead").await;
        let mut conn = store.pool().acquire().await.unwrap();
        let now = now(&mut conn).await.unwrap();
        sqlx::query(
            "WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < 4000)
             INSERT INTO job_jobs (kind, queue, priority, payload, run_at, state, created_at,
                                   finalized_at)
             SELECT 'k', 'q', 0, '{}', ?1, CASE WHEN i % 800 = 0 THEN 'discarded'
                                                ELSE 'completed' END, ?1, ?1
             FROM s",
        )
        .bind(now)
        .execute(&mut *conn)
        .await
        .unwrap();
        let dead: Vec<JobId> =
            sqlx::query_scalar("SELECT id FROM job_jobs WHERE state = 'discarded' ORDER BY id")
                .fetch_all(&mut *conn)
                .await
                .unwrap();
        assert_eq!(dead.len(), 5);
        let filters = [
            JobFilter::default(),
            JobFilter::dead_letters(),
            JobFilter {
                kind: Some("k".into()),
                queue: Some("q".into()),
                tag: Some("t".into()),
                finalized_from: Some(crate::time::to_time(now - 1)),
                limit: Some(3),
                ..JobFilter::default()
            },
            JobFilter::ids([dead[1], dead[3], 1, 2, 3]),
            JobFilter {
                ids: vec![dead[0], dead[4], 4000],
                kind: Some("k".into()),
                finalized_to: Some(crate::time::to_time(now + 1)),
                ..JobFilter::default()
            },
        ];
        for analyzed in [false, true] {
            if analyzed {
                sqlx::query("ANALYZE").execute(&mut *conn).await.unwrap();
            }
            for filter in &filters {
                let (statement, _) = dead_letters_statement(filter);
                let explain = format!("EXPLAIN QUERY PLAN {statement}");
                let rows: Vec<(i64, i64, i64, String)> =
                    bind_dead_letters(sqlx::query(&explain), filter)
                        .map(|r: sqlx::sqlite::SqliteRow| (r.get(0), r.get(1), r.get(2), r.get(3)))
                        .fetch_all(&mut *conn)
                        .await
                        .unwrap();
                let plan: Vec<String> = rows.into_iter().map(|r| r.3).collect();
                let reads: Vec<&String> = plan
                    .iter()
                    .filter(|d| {
                        let mut words = d.split(' ');
                        matches!(words.next(), Some("SEARCH" | "SCAN")) && words.next() == Some("j")
                    })
                    .collect();
                // The dead letters in id order, or a seek per id named (by primary key, or
                // into the dead letters' index, which ANALYZE's statistics may prefer).
                let expected: &[&str] = if filter.ids.is_empty() {
                    &["SCAN j USING INDEX job_jobs_discarded_idx"]
                } else {
                    &[
                        "SEARCH j USING INTEGER PRIMARY KEY (rowid=?)",
                        "SEARCH j USING INDEX job_jobs_discarded_idx (id=?)",
                    ]
                };
                assert!(
                    reads.len() == 1 && expected.contains(&reads[0].as_str()),
                    "analyzed: {analyzed}; {filter:?}; plan: {plan:#?}"
                );
            }
            let mut read = Vec::new();
            for filter in [
                JobFilter::default(),
                JobFilter {
                    limit: Some(3),
                    ..JobFilter::default()
                },
                filters[2].clone(),
                filters[3].clone(),
                filters[4].clone(),
            ] {
                let rows = dead_letters(&mut conn, &filter).await.unwrap();
                read.push(rows.iter().map(|r| r.row.id).collect::<Vec<JobId>>());
            }
            assert_eq!(
                read,
                [
                    dead.clone(),
                    dead[..3].to_vec(),
                    vec![],
                    vec![dead[1], dead[3]],
                    vec![dead[0], dead[4]],
                ],
                "analyzed: {analyzed}"
            );
        }
        drop(conn);
        store.pool().close().await;
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
