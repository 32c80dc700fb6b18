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
        what.check()?;
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
            let dead = list(&mut w.tx, &filter, &[JobState::Discarded]).await?;
            // Of several dead letters sharing a key, only the newest goes back.
            let mut newest: HashMap<(&str, &str), JobId> = HashMap::new();
            for d in &dead {
                if let Some(key) = &d.unique_key {
                    let slot = newest
                        .entry((d.kind.as_str(), key.as_str()))
                        .or_insert(d.id);
                    *slot = (*slot).max(d.id);
                }
            }
            let mut out = Redriven::default();
            let mut queues = Vec::new();
            for d in &dead {
                if let Some(key) = &d.unique_key {
                    let holder: Option<JobId> = sqlx::query_scalar(sql::UNIQUE_OTHER_HOLDER)
                        .bind(d.id)
                        .fetch_optional(&mut *w.tx)
                        .await
                        .map_err(Error::query("unique_other_holder"))?;
                    let first = newest[&(d.kind.as_str(), key.as_str())];
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
            let dead = list(&mut w.tx, &filter, &[JobState::Discarded]).await?;
            let ids: Vec<JobId> = dead.iter().map(|d| d.id).collect();
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
