//! Operator actions ([`Admin`] on [`PgStore`], and on [`TenantAdmin`] for one tenant's jobs)
//! and the maintenance statements behind the pruner ([`Store::prune`], [`Store::expire`], [`Store::vacuum`]).
//!
//! [`Store::prune`]: job_core::Store::prune
//! [`Store::expire`]: job_core::Store::expire
//! [`Store::vacuum`]: job_core::Store::vacuum

use std::time::Duration;

use job_core::duration_millis;
use job_core::{
    Admin, Cancelled, JobFilter, JobId, JobRow, JobState, Pause, PauseEntry, Redriven, StateCount,
    Stats, StoreError,
};
use job_core::{Expired, PruneRequest};
use sqlx::postgres::PgArguments;
use sqlx::query::Query;
use sqlx::{PgExecutor, Postgres, Row};

use crate::error::Error;
use crate::row::{self, parse_state};
use crate::sql;
use crate::PgStore;

/// How often a redrive is tried again when a concurrent enqueue took a key it was restoring.
const REDRIVE_TRIES: u32 = 3;

/// The jobs a [`TenantAdmin`] reads, at most, in each look for one of its tenant's behind a
/// pause (`sql/pauses_tenant.sql`): a queue's available, its scheduled and retryable, and the
/// running jobs; a kind's available and its running ones.
const TENANT_PAUSE_LOOK: u32 = 10_000;

/// How long the look at whether the job tables need a VACUUM may take.
const VACUUM_LOOK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// How long the ANALYZE of the tables autovacuum vacuums may take (it reads a sample of 30,000
/// rows per table: seconds at most on a healthy server). Bounded on its own rather than by the
/// 6 hours a VACUUM gets, so that a connection gone silent holds the pruner (and the deletes
/// and expiries of its pass) this long, where autovacuum would have run nothing of ours before.
const ANALYZE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Vacuums the job tables that need it when autovacuum will not, and analyzes those it
/// vacuums that outgrew their statistics (see `sql/vacuum_needed.sql`). Returns
/// whether it ran either; [`Error::VacuumNotOwner`] when a VACUUM should have run and this role
/// may not (a VACUUM would only warn and do nothing). An ANALYZE this role may not run is left
/// to autovacuum, without a word.
pub(crate) async fn vacuum(pool: &sqlx::PgPool) -> Result<bool, Error> {
    // The look is quick, and runs every `vacuum_interval` (10 s): bounded on its own, so that
    // a connection gone silent holds the pruner for this long, not for the VACUUM's bound.
    let look = sqlx::query_as(sql::VACUUM_NEEDED).fetch_one(pool);
    let (needed, stale, allowed, role, owner): (Vec<String>, Vec<String>, bool, String, String) =
        match tokio::time::timeout(VACUUM_LOOK_TIMEOUT, look).await {
            Ok(looked) => looked,
            Err(_) => Err(crate::pool::timed_out(format!(
                "no answer within {VACUUM_LOOK_TIMEOUT:?}"
            ))),
        }
        .map_err(Error::query("vacuum_needed"))?;
    if !needed.is_empty() && !allowed {
        return Err(Error::VacuumNotOwner { role, owner });
    }
    let mut ran = false;
    // VACUUM and ANALYZE cannot be prepared (VACUUM, not in a transaction either): the simple
    // query protocol. The names are the look's own, quoted there (`format('%I.%I')`) from a
    // fixed list.
    for (tables, statement, name, bound) in [
        (&needed, sql::VACUUM, "vacuum", None),
        (&stale, sql::ANALYZE, "analyze", Some(ANALYZE_TIMEOUT)),
    ] {
        if tables.is_empty() || !allowed {
            continue;
        }
        let statement = statement.replace("@tables", &tables.join(", "));
        let run = sqlx::raw_sql(&statement).execute(pool);
        match bound {
            None => run.await.map(drop),
            Some(bound) => match tokio::time::timeout(bound, run).await {
                Ok(done) => done.map(drop),
                Err(_) => Err(crate::pool::timed_out(format!(
                    "no answer within {bound:?}"
                ))),
            },
        }
        .map_err(Error::query(name))?;
        ran = true;
    }
    Ok(ran)
}

/// How long the pruner waits, after a look at the rate windows that found fewer than a batch
/// to delete, before it looks again. The look reads every window (no index on `updated_at`:
/// a claim's update of its window stays HOT without one), and windows are deleted only 8 days
/// after their last claim: an hour more changes nothing, and the look no longer costs every
/// pass of every worker a scan of every live key.
const RATE_WINDOWS_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// Deletes one bounded batch of finished jobs past their retention, and of rate windows that
/// limit nothing any more (`sql/prune_rate_windows.sql`; at most every [`RATE_WINDOWS_EVERY`]
/// per store and its clones, unless the last look found a full batch). Returns how many jobs.
pub(crate) async fn prune(
    pool: &sqlx::PgPool,
    request: &PruneRequest,
    rate_windows_due: &std::sync::Mutex<Option<std::time::Instant>>,
) -> Result<u64, Error> {
    let due = |d: &std::sync::Mutex<Option<std::time::Instant>>| {
        *d.lock().unwrap_or_else(|e| e.into_inner())
    };
    if due(rate_windows_due).is_none_or(|at| std::time::Instant::now() >= at) {
        let batch = i32::try_from(request.batch).unwrap_or(i32::MAX);
        let deleted = sqlx::query(sql::PRUNE_RATE_WINDOWS)
            .bind(batch)
            .execute(pool)
            .await
            .map_err(Error::query("prune_rate_windows"))?
            .rows_affected();
        let next = (deleted < u64::from(batch.unsigned_abs()))
            .then(|| std::time::Instant::now() + RATE_WINDOWS_EVERY);
        *rate_windows_due.lock().unwrap_or_else(|e| e.into_inner()) = next;
    }
    // `now() - retention` must stay a time the server can hold (a retention of `Duration::MAX`
    // failed with 22008). 3,000 years before now is before year 1, the earliest `finalized_at`
    // the table's checks allow, so the clamp keeps exactly what the longer retention keeps.
    const FOR_EVER: std::time::Duration = std::time::Duration::from_secs(3_000 * 366 * 86_400);
    let retention = |d: std::time::Duration| duration_millis(d.min(FOR_EVER));
    // Two statements in one transaction: the first locks the jobs to delete, the second
    // deletes those no dependent needs, judged on a snapshot taken after the locks, which sees
    // the edge of an enqueue that committed while the first statement ran (sql/prune.sql).
    let mut tx = pool.begin().await.map_err(Error::query("begin"))?;
    let ids: Vec<i64> = sqlx::query_scalar(sql::PRUNE_PICK)
        .bind(retention(request.completed_retention))
        .bind(retention(request.cancelled_retention))
        .bind(i32::try_from(request.batch).unwrap_or(i32::MAX))
        .fetch_all(&mut *tx)
        .await
        .map_err(Error::query("prune_pick"))?;
    let n: i64 = if ids.is_empty() {
        0
    } else {
        sqlx::query_scalar(sql::PRUNE.as_str())
            .bind(&ids)
            .fetch_one(&mut *tx)
            .await
            .map_err(Error::query("prune"))?
    };
    tx.commit().await.map_err(Error::query("commit"))?;
    Ok(n.unsigned_abs())
}

/// Ends one bounded batch of waiting jobs past their deadline or with cancellation requested.
pub(crate) async fn expire<'e, E: PgExecutor<'e>>(
    executor: E,
    limit: u32,
) -> Result<Expired, Error> {
    let (discarded, cancelled): (i64, i64) = sqlx::query_as(sql::EXPIRE)
        .persistent(crate::lease::PLANNED_EACH_TIME)
        .bind(i32::try_from(limit).unwrap_or(i32::MAX))
        .fetch_one(executor)
        .await
        .map_err(Error::query("expire"))?;
    Ok(Expired {
        discarded: discarded.unsigned_abs(),
        cancelled: cancelled.unsigned_abs(),
    })
}

/// A job state bound as a `job.job_state` value, so that a filter's states are bound as
/// `job.job_state[]` (job_filter.sql's `$2`). Bound as `text[]` and cast in the statement,
/// they stayed a cast the planner does not fold (an enum's input function is only stable), so
/// no partial index's `state = ...` predicate could be proven from them, and a listing of one
/// state walked the primary key through every other row (a plan audit: `job list --state
/// available` over 378,000 rows, 276-449 ms, against 1-8 ms through jobs_claim_idx).
struct StateLabel(&'static str);

impl sqlx::Type<Postgres> for StateLabel {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        sqlx::postgres::PgTypeInfo::with_name("job.job_state")
    }
}

impl sqlx::postgres::PgHasArrayType for StateLabel {
    fn array_type_info() -> sqlx::postgres::PgTypeInfo {
        sqlx::postgres::PgTypeInfo::array_of("job.job_state")
    }
}

impl sqlx::Encode<'_, Postgres> for StateLabel {
    fn encode_by_ref(
        &self,
        buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        // An enum's value on the wire is its label's text.
        <&str as sqlx::Encode<Postgres>>::encode(self.0, buf)
    }
}

/// Binds a [`JobFilter`] as `$1..$9` of list.sql, redrive.sql and purge.sql, and the tenant
/// scope as `$10`.
pub(crate) fn bind_filter<'q>(
    query: Query<'q, Postgres, PgArguments>,
    filter: &'q JobFilter,
    states: Vec<&'static str>,
    scope: Option<&'q str>,
) -> Query<'q, Postgres, PgArguments> {
    // Each state once: job_filter.sql reads the running jobs alone through their index only
    // when the states are exactly `{running}`.
    let mut states = states;
    states.sort_unstable();
    states.dedup();
    query
        .bind(&filter.ids)
        .bind(states.into_iter().map(StateLabel).collect::<Vec<_>>())
        .bind(&filter.kind)
        .bind(&filter.queue)
        .bind(&filter.tenant)
        .bind(&filter.tag)
        .bind(filter.finalized_from)
        .bind(filter.finalized_to)
        .bind(i32::try_from(filter.effective_limit()).unwrap_or(i32::MAX))
        .bind(scope)
}

/// An [`Admin`] handle that sees and touches the jobs of one tenant only, for an operator or
/// a tenant's own dashboard. [`list`](Admin::list), [`get`](TenantAdmin::get),
/// [`cancel`](Admin::cancel), [`redrive`](Admin::redrive), [`purge`](Admin::purge) and
/// [`stats`](Admin::stats) add `tenant = <its tenant>` to whatever filter they are given:
/// another tenant's job is [`Cancelled::NotFound`] and in no listing, count, redrive or purge,
/// and so are jobs without a tenant. Pausing and resuming act on whole queues and kinds, across
/// tenants, so this handle refuses them ([`Error::TenantScope`]). [`paused`](Admin::paused)
/// and [`pauses`](Admin::pauses) show only the pauses that hold back or touch one of the
/// tenant's jobs, so that a tenant learns no queue or kind name that only other tenants use: a
/// queue's pause when one of the tenant's jobs is among the queue's first 10,000 available, its
/// first 10,000 scheduled and retryable (the soonest due) or the first 10,000 running jobs; a
/// kind's pause when one is among the kind's first 10,000 available or running jobs. Each look
/// reads that many rows at most, whatever their tenant (as [`TenantAdmin::overview`] does): a
/// pause with more of other tenants' jobs ahead of all of this tenant's is not shown, nor a
/// kind's whose jobs of the tenant are all scheduled or retryable, until one is due.
///
/// It scopes what this handle does; the database still lets the role behind the pool read
/// every row (see the README's roles for what the database itself enforces).
///
/// ```no_run
/// # async fn demo(store: job_postgres::PgStore) -> Result<(), job_core::StoreError> {
/// use job_core::{Admin, JobFilter};
/// let acme = store.for_tenant("acme");
/// let dead = acme.list(&JobFilter::dead_letters()).await?; // acme's only
/// # let _ = dead; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct TenantAdmin {
    store: PgStore,
    tenant: String,
}

impl PgStore {
    /// An [`Admin`] handle scoped to `tenant`: see [`TenantAdmin`].
    pub fn for_tenant(&self, tenant: impl Into<String>) -> TenantAdmin {
        TenantAdmin {
            store: self.clone(),
            tenant: tenant.into(),
        }
    }
}

impl TenantAdmin {
    /// The tenant this handle is scoped to.
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The store behind this handle (every tenant's jobs): the dashboard opens its own
    /// connections from its pool's connect options.
    pub fn store(&self) -> &PgStore {
        &self.store
    }

    /// Reads one job of this tenant; another tenant's job is `None`, as a missing one is.
    pub async fn get(&self, id: JobId) -> Result<Option<JobRow>, StoreError> {
        Ok(row::get(self.store.pool(), id, Some(&self.tenant)).await?)
    }

    fn scope(&self) -> Scope<'_> {
        Scope {
            pool: self.store.pool(),
            tenant: Some(&self.tenant),
        }
    }
}

/// The operator's statements, on every job (`tenant: None`) or on one tenant's.
#[derive(Clone, Copy)]
struct Scope<'a> {
    pool: &'a sqlx::PgPool,
    tenant: Option<&'a str>,
}

impl Scope<'_> {
    async fn cancel(self, id: JobId) -> Result<Cancelled, StoreError> {
        let after: Option<String> = sqlx::query_scalar(sql::CANCEL)
            .bind(id)
            .bind(self.tenant)
            .fetch_optional(self.pool)
            .await
            .map_err(Error::query("cancel"))?;
        if let Some(state) = after {
            return Ok(match parse_state(id, &state)? {
                JobState::Running => Cancelled::Requested,
                _ => Cancelled::Now,
            });
        }
        let state: Option<String> = sqlx::query_scalar(sql::STATE)
            .bind(id)
            .bind(self.tenant)
            .fetch_optional(self.pool)
            .await
            .map_err(Error::query("state"))?;
        Ok(match state {
            Some(state) => Cancelled::AlreadyFinished(parse_state(id, &state)?),
            None => Cancelled::NotFound,
        })
    }

    async fn pause(self, what: &Pause) -> Result<bool, StoreError> {
        self.whole_queues("pause")?;
        what.check()?;
        let row = sqlx::query(sql::PAUSE)
            .bind(what.scope())
            .bind(what.name())
            .fetch_optional(self.pool)
            .await
            .map_err(Error::query("pause"))?;
        Ok(row.is_some())
    }

    async fn resume(self, what: &Pause) -> Result<bool, StoreError> {
        self.whole_queues("resume")?;
        let refusal = what.check_resume()?;
        let row = sqlx::query(sql::RESUME)
            .bind(what.scope())
            .bind(what.name())
            .fetch_optional(self.pool)
            .await
            .map_err(Error::query("resume"))?;
        match (row, refusal) {
            (None, Some(refusal)) => Err(refusal),
            (row, _) => Ok(row.is_some()),
        }
    }

    /// Refuses an action on whole queues or kinds from a tenant-scoped handle.
    fn whole_queues(self, action: &'static str) -> Result<(), Error> {
        match self.tenant {
            Some(tenant) => Err(Error::TenantScope {
                action,
                tenant: tenant.to_owned(),
            }),
            None => Ok(()),
        }
    }

    async fn paused(self) -> Result<Vec<Pause>, StoreError> {
        if self.tenant.is_some() {
            let entries = self.pauses().await?;
            return Ok(entries.into_iter().map(|e| e.what).collect());
        }
        let rows: Vec<(String, String)> = sqlx::query_as(sql::PAUSED)
            .fetch_all(self.pool)
            .await
            .map_err(Error::query("paused"))?;
        Ok(rows
            .into_iter()
            .map(|(scope, name)| match scope.as_str() {
                "queue" => Pause::Queue(name),
                _ => Pause::Kind(name),
            })
            .collect())
    }

    /// Every pause in force; in a tenant's scope, only those that hold back or touch one of
    /// its jobs (`sql/pauses_tenant.sql`, each look bounded by [`TENANT_PAUSE_LOOK`]).
    async fn pauses(self) -> Result<Vec<PauseEntry>, StoreError> {
        let Some(tenant) = self.tenant else {
            return Ok(crate::report::pauses(self.pool).await?);
        };
        // JIT off, as for the overview: planned above `jit_above_cost` on a large table, the
        // statement spent most of its time compiling (300,000 waiting jobs: 1 s, 0.1 s without).
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(Error::query("pauses_tenant"))?;
        sqlx::query(sql::JIT_OFF)
            .execute(&mut *tx)
            .await
            .map_err(Error::query("jit_off"))?;
        // Not prepared: planned with its values each time, never generically.
        let rows = sqlx::query(sql::PAUSES_TENANT)
            .persistent(false)
            .bind(tenant)
            .bind(i32::try_from(TENANT_PAUSE_LOOK).unwrap_or(i32::MAX))
            .bind(i32::try_from(crate::OVERVIEW_QUEUES).unwrap_or(i32::MAX))
            .fetch_all(&mut *tx)
            .await
            .map_err(Error::query("pauses_tenant"))?;
        tx.commit().await.map_err(Error::query("pauses_tenant"))?;
        let entries = rows
            .iter()
            .map(crate::report::pause_entry)
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Error::query("pauses_tenant"))?;
        Ok(entries)
    }

    async fn list(self, filter: &JobFilter) -> Result<Vec<JobRow>, StoreError> {
        filter.check()?;
        let states = filter.states.iter().map(|s| s.as_str()).collect();
        let rows = bind_filter(sqlx::query(sql::LIST.as_str()), filter, states, self.tenant)
            .fetch_all(self.pool)
            .await
            .map_err(Error::query("list"))?;
        let jobs = rows
            .iter()
            .map(|r| {
                let id: JobId = r.try_get("id").map_err(Error::query("list"))?;
                row::decode(id, r)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        Ok(jobs)
    }

    async fn redrive(self, filter: &JobFilter) -> Result<Redriven, StoreError> {
        filter.check()?;
        let mut tries = 0;
        let rows: Vec<(JobId, bool, Option<JobId>, i64)> = loop {
            tries += 1;
            match self.redrive_once(filter).await {
                Ok(rows) => break rows,
                // A key taken meanwhile (23505), or a deadlock with another transaction taking
                // ordering keys' locks in another order (40P01, which the server resolves by
                // failing one side): the transaction runs again.
                Err((_, e))
                    if (crate::error::is_unique_violation(&e) || crate::error::is_deadlock(&e))
                        && tries < REDRIVE_TRIES =>
                {
                    continue
                }
                Err((statement, e)) => return Err(Error::query(statement)(e).into()),
            }
        };
        let mut out = Redriven::default();
        for (id, redriven, existing, _) in rows {
            match (redriven, existing) {
                (true, _) => out.redriven.push(id),
                (false, Some(existing)) => out.skipped.push((id, existing)),
                // Taken by a concurrent redrive or purge between the pick and the update.
                (false, None) => {}
            }
        }
        Ok(out)
    }

    /// One try of [`redrive`](Self::redrive), in a transaction of its own: the redrive's
    /// statement, then `redrive_order.sql` for the rows it redrove. Its first statement takes
    /// `job.jobs` (ROW EXCLUSIVE, which it would take anyway): the redrive's statement locks
    /// `job.dependencies` before it writes `job.jobs`, and a migration locking `job.jobs`,
    /// then `job.dependencies` (0037), waited for it while it waited for the migration.
    /// Errors come with the statement's name.
    async fn redrive_once(
        self,
        filter: &JobFilter,
    ) -> Result<Vec<(JobId, bool, Option<JobId>, i64)>, (&'static str, sqlx::Error)> {
        let states = vec![JobState::Discarded.as_str()];
        let mut tx = self.pool.begin().await.map_err(|e| ("begin", e))?;
        sqlx::query(sql::REDRIVE_LOCK)
            .execute(&mut *tx)
            .await
            .map_err(|e| ("redrive_lock", e))?;
        let rows = bind_filter(
            sqlx::query(sql::REDRIVE.as_str()),
            filter,
            states,
            self.tenant,
        )
        .try_map(|r: sqlx::postgres::PgRow| {
            Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?, r.try_get(3)?))
        })
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| ("redrive", e))?;
        // A key's redriven dead letters head it in id order (redrive_order.sql).
        let redriven: Vec<JobId> = rows.iter().filter(|r| r.1).map(|r| r.0).collect();
        if !redriven.is_empty() {
            sqlx::query(sql::REDRIVE_ORDER)
                .bind(&redriven)
                .execute(&mut *tx)
                .await
                .map_err(|e| ("redrive_order", e))?;
        }
        tx.commit().await.map_err(|e| ("commit", e))?;
        Ok(rows)
    }

    async fn purge(self, filter: &JobFilter) -> Result<u64, StoreError> {
        filter.check()?;
        let states = vec![JobState::Discarded.as_str()];
        let ids = bind_filter(
            sqlx::query(sql::PURGE.as_str()),
            filter,
            states,
            self.tenant,
        )
        .fetch_all(self.pool)
        .await
        .map_err(Error::query("purge"))?;
        Ok(ids.len() as u64)
    }

    async fn stats(self, filter: &JobFilter) -> Result<Stats, StoreError> {
        filter.check()?;
        let counts: Vec<(String, String, i64)> = sqlx::query_as(sql::STATS_COUNTS.as_str())
            .bind(&filter.kind)
            .bind(&filter.queue)
            .bind(&filter.tenant)
            .bind(&filter.tag)
            .bind(self.tenant)
            .fetch_all(self.pool)
            .await
            .map_err(Error::query("stats_counts"))?;
        let oldest: Option<i64> = sqlx::query_scalar(sql::STATS_OLDEST.as_str())
            .bind(&filter.kind)
            .bind(&filter.queue)
            .bind(&filter.tenant)
            .bind(&filter.tag)
            .bind(self.tenant)
            .fetch_one(self.pool)
            .await
            .map_err(Error::query("stats_oldest"))?;
        let stuck: i64 = sqlx::query_scalar(sql::STATS_STUCK.as_str())
            .bind(&filter.kind)
            .bind(&filter.queue)
            .bind(&filter.tenant)
            .bind(&filter.tag)
            .bind(self.tenant)
            .fetch_one(self.pool)
            .await
            .map_err(Error::query("stats_stuck"))?;
        let counts = counts
            .into_iter()
            .map(|(queue, state, n)| {
                Ok(StateCount {
                    queue,
                    state: parse_state(0, &state)?,
                    count: n.unsigned_abs(),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let mut stats = Stats {
            counts,
            oldest_available_age: oldest.map(|ms| Duration::from_millis(ms.unsigned_abs())),
            dead_letters: 0,
            stuck: stuck.unsigned_abs(),
        };
        stats.dead_letters = stats.in_state(JobState::Discarded);
        Ok(stats)
    }
}

/// Implements [`Admin`] for `$handle` by running every operation in the scope `$scope`
/// returns: one list of operations for the store (every job) and a tenant's handle.
macro_rules! admin_in_scope {
    ($handle:ty, $scope:ident) => {
        impl Admin for $handle {
            async fn cancel(&self, id: JobId) -> Result<Cancelled, StoreError> {
                self.$scope().cancel(id).await
            }

            async fn pause(&self, what: &Pause) -> Result<bool, StoreError> {
                self.$scope().pause(what).await
            }

            async fn resume(&self, what: &Pause) -> Result<bool, StoreError> {
                self.$scope().resume(what).await
            }

            async fn paused(&self) -> Result<Vec<Pause>, StoreError> {
                self.$scope().paused().await
            }

            async fn pauses(&self) -> Result<Vec<PauseEntry>, StoreError> {
                self.$scope().pauses().await
            }

            async fn list(&self, filter: &JobFilter) -> Result<Vec<JobRow>, StoreError> {
                self.$scope().list(filter).await
            }

            async fn redrive(&self, filter: &JobFilter) -> Result<Redriven, StoreError> {
                self.$scope().redrive(filter).await
            }

            async fn purge(&self, filter: &JobFilter) -> Result<u64, StoreError> {
                self.$scope().purge(filter).await
            }

            async fn stats(&self, filter: &JobFilter) -> Result<Stats, StoreError> {
                self.$scope().stats(filter).await
            }
        }
    };
}

// Every job, of every tenant and none.
admin_in_scope!(PgStore, all);
// One tenant's jobs only.
admin_in_scope!(TenantAdmin, scope);

impl PgStore {
    fn all(&self) -> Scope<'_> {
        Scope {
            pool: self.pool(),
            tenant: None,
        }
    }
}
