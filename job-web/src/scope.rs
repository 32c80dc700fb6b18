//! What the dashboard reaches: every job (a [`PgStore`]) or one tenant's ([`TenantAdmin`]).

use std::time::Duration;

use job::{
    Admin, Cancelled, JobFilter, JobId, JobRow, Pause, PauseEntry, Redriven, Store, StoreError,
};
use job_postgres::{Overview, Page, PageRequest, PgStore, ShowSteps, ShownSteps, TenantAdmin};

/// A job's JSON values as the database writes them: see [`Scope::exact_texts`].
#[derive(Debug, Default)]
pub(crate) struct ExactTexts {
    pub(crate) payload: Option<String>,
    pub(crate) progress: Option<String>,
    pub(crate) result: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) enum Scope {
    All(PgStore),
    Tenant(TenantAdmin),
}

impl Scope {
    /// The same scope on `store`'s connections (the dashboard's own: see `connections.rs`).
    pub(crate) fn on(&self, store: PgStore) -> Scope {
        match self {
            Scope::All(_) => Scope::All(store),
            Scope::Tenant(t) => Scope::Tenant(store.for_tenant(t.tenant())),
        }
    }

    /// The store whose connect options the dashboard's own connections are made from.
    pub(crate) fn store(&self) -> &PgStore {
        match self {
            Scope::All(s) => s,
            Scope::Tenant(t) => t.store(),
        }
    }

    /// The tenant the dashboard is limited to, if any.
    pub(crate) fn tenant(&self) -> Option<&str> {
        match self {
            Scope::All(_) => None,
            Scope::Tenant(t) => Some(t.tenant()),
        }
    }

    pub(crate) async fn get(&self, id: JobId) -> Result<Option<JobRow>, StoreError> {
        match self {
            Scope::All(s) => s.get(id).await,
            Scope::Tenant(t) => t.get(id).await,
        }
    }

    /// Job `id`'s payload, progress and result as the database writes them (`jsonb`'s text:
    /// numbers as stored, where a `JobRow`'s serde_json values keep an f64, an i64 or a u64),
    /// if the job is in scope. One more primary-key read. Not `jsonb_pretty`, which lays a
    /// value out whole on the server: indentation can make its text a hundred times the
    /// value's (the page lays it out itself, and stops at its bound).
    pub(crate) async fn exact_texts(&self, id: JobId) -> Result<Option<ExactTexts>, StoreError> {
        sqlx::query_as(
            "SELECT payload::text, progress::text, result::text \
             FROM job.jobs WHERE id = $1 AND ($2::text IS NULL OR tenant = $2)",
        )
        .bind(id)
        .bind(self.tenant())
        .fetch_optional(self.store().pool())
        .await
        .map(|row| {
            row.map(|(payload, progress, result)| ExactTexts {
                payload,
                progress,
                result,
            })
        })
        .map_err(StoreError::new)
    }

    pub(crate) async fn steps_shown(
        &self,
        id: JobId,
        show: ShowSteps,
    ) -> Result<ShownSteps, StoreError> {
        match self {
            Scope::All(s) => s.steps_shown(id, show).await,
            Scope::Tenant(t) => t.steps_shown(id, show).await,
        }
    }

    pub(crate) async fn page(&self, request: &PageRequest) -> Result<Page, StoreError> {
        match self {
            Scope::All(s) => s.page(request).await,
            Scope::Tenant(t) => t.page(request).await,
        }
    }

    pub(crate) async fn overview(
        &self,
        cap: u32,
        window: Duration,
    ) -> Result<Overview, StoreError> {
        match self {
            Scope::All(s) => s.overview(cap, window).await,
            Scope::Tenant(t) => t.overview(cap, window).await,
        }
    }

    /// Every pause in force, with who made it, why and until when; on a tenant's dashboard,
    /// only those that hold back or touch one of its jobs (see `TenantAdmin`), so that no
    /// queue or kind name of another tenant's shows.
    pub(crate) async fn pauses(&self) -> Result<Vec<PauseEntry>, StoreError> {
        match self {
            Scope::All(s) => s.pauses().await,
            Scope::Tenant(t) => t.pauses().await,
        }
    }

    pub(crate) async fn cancel(&self, id: JobId) -> Result<Cancelled, StoreError> {
        match self {
            Scope::All(s) => s.cancel(id).await,
            Scope::Tenant(t) => t.cancel(id).await,
        }
    }

    pub(crate) async fn redrive(&self, filter: &JobFilter) -> Result<Redriven, StoreError> {
        match self {
            Scope::All(s) => s.redrive(filter).await,
            Scope::Tenant(t) => t.redrive(filter).await,
        }
    }

    pub(crate) async fn purge(&self, filter: &JobFilter) -> Result<u64, StoreError> {
        match self {
            Scope::All(s) => s.purge(filter).await,
            Scope::Tenant(t) => t.purge(filter).await,
        }
    }

    /// Pauses (`pause`) or resumes a queue or kind; a tenant's dashboard refuses, as its
    /// handle does.
    pub(crate) async fn set_paused(&self, what: &Pause, pause: bool) -> Result<bool, StoreError> {
        match (self, pause) {
            (Scope::All(s), true) => s.pause(what).await,
            (Scope::All(s), false) => s.resume(what).await,
            (Scope::Tenant(t), true) => t.pause(what).await,
            (Scope::Tenant(t), false) => t.resume(what).await,
        }
    }
}
