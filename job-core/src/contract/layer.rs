//! Wrapping a store: [`Layered`] implements every [`Store`] method once, passing each call of
//! the inner store through a [`StoreLayer`]. A wrapper that injects outages or meters calls
//! writes what it does to a call, never the list of methods again.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;

use crate::contract::report::{Report, ReportRequest};
use crate::contract::store::{
    ClaimRequest, ClaimedJob, Expired, Finalize, Finalized, HeartbeatReport, JobRow, Lease,
    PruneRequest, Release, Renewal, Rescued, Store, Wakeups,
};
use crate::model::error::{EnqueueError, StoreError};
use crate::model::job::JobId;
use crate::model::new_job::NewJob;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One call of a wrapped store, as its layer sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Call {
    /// The [`Store`] method, by name (`claim`, `finalize`, ...).
    pub name: &'static str,
    /// How many items it sends: the claim's limit, the finalize batch, the renewals, the
    /// jobs enqueued; 1 for a call about one thing, 0 for one about none.
    pub sent: usize,
}

/// What a call returned, counted: claimed jobs, outcomes applied, leases lost, rows changed.
pub trait Returned {
    /// How many rows the call returned or changed.
    fn rows(&self) -> usize;
}

/// What a [`Layered`] store does around each call of the store it wraps.
pub trait StoreLayer: Clone + Send + Sync + 'static {
    /// Runs `run`, the call `call` of the inner store: pass it through, delay it, fail it,
    /// time it. `T` is what the call returns.
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>>;
}

/// A store whose every call goes through `layer` on its way to `inner`.
#[derive(Debug, Clone)]
pub struct Layered<S, L> {
    inner: S,
    layer: L,
}

impl<S: Store, L: StoreLayer> Layered<S, L> {
    /// `inner`, wrapped by `layer`.
    pub fn new(inner: S, layer: L) -> Self {
        Layered { inner, layer }
    }

    /// The wrapped store, which the layer does not see.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The layer.
    pub fn layer(&self) -> &L {
        &self.layer
    }

    fn through<'a, T: Returned + Send + 'a>(
        &'a self,
        name: &'static str,
        sent: usize,
        run: impl Future<Output = Result<T, StoreError>> + Send + 'a,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        self.layer.call(Call { name, sent }, Box::pin(run))
    }
}

impl<S: Store, L: StoreLayer> Store for Layered<S, L> {
    async fn enqueue(&self, job: NewJob) -> Result<JobId, EnqueueError> {
        // The layer sees a refused job as a call that returned (nothing written), and a
        // failed store as a failed call.
        let run = async { refusal_returns(self.inner.enqueue(job).await) };
        self.through("enqueue", 1, run).await?
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>, EnqueueError> {
        let sent = jobs.len();
        let run = async { refusal_returns(self.inner.enqueue_many(jobs).await) };
        self.through("enqueue_many", sent, run).await?
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>, StoreError> {
        let sent = request.limit as usize;
        self.through("claim", sent, self.inner.claim(request)).await
    }

    async fn heartbeat(&self, renewals: &[Renewal]) -> Result<HeartbeatReport, StoreError> {
        self.through("heartbeat", renewals.len(), self.inner.heartbeat(renewals))
            .await
    }

    async fn finalize(&self, batch: &[Finalize]) -> Result<Vec<Finalized>, StoreError> {
        self.through("finalize", batch.len(), self.inner.finalize(batch))
            .await
    }

    async fn rescue_expired(&self, limit: u32) -> Result<Rescued, StoreError> {
        self.through(
            "rescue_expired",
            limit as usize,
            self.inner.rescue_expired(limit),
        )
        .await
    }

    async fn rescue_expired_checked(
        &self,
        limit: u32,
        checked_at: std::time::SystemTime,
    ) -> Result<Rescued, StoreError> {
        self.through(
            "rescue_expired",
            limit as usize,
            self.inner.rescue_expired_checked(limit, checked_at),
        )
        .await
    }

    async fn stage_due(&self, limit: u32) -> Result<u64, StoreError> {
        self.through("stage_due", limit as usize, self.inner.stage_due(limit))
            .await
    }

    async fn record_start(&self, lease: Lease) -> Result<bool, StoreError> {
        self.through("record_start", 1, self.inner.record_start(lease))
            .await
    }

    async fn schema_lag(&self) -> Result<Option<crate::SchemaLag>, StoreError> {
        self.through("schema_lag", 1, self.inner.schema_lag()).await
    }

    async fn release(&self, releases: &[Release]) -> Result<u64, StoreError> {
        self.through("release", releases.len(), self.inner.release(releases))
            .await
    }

    async fn save_progress(&self, progress: &[(Lease, String)]) -> Result<u64, StoreError> {
        self.through(
            "save_progress",
            progress.len(),
            self.inner.save_progress(progress),
        )
        .await
    }

    async fn register_kinds(
        &self,
        kinds: &[(String, Option<crate::Compensate>)],
    ) -> Result<(), StoreError> {
        self.through(
            "register_kinds",
            kinds.len(),
            self.inner.register_kinds(kinds),
        )
        .await
    }

    async fn record_breakers(
        &self,
        counts: &[crate::BreakerCount],
    ) -> Result<Vec<crate::Tripped>, StoreError> {
        self.through(
            "record_breakers",
            counts.len(),
            self.inner.record_breakers(counts),
        )
        .await
    }

    fn supports_flow_control(&self) -> bool {
        self.inner.supports_flow_control()
    }

    async fn report(&self, request: &ReportRequest) -> Result<Option<Report>, StoreError> {
        self.through("report", 1, self.inner.report(request)).await
    }

    async fn get(&self, id: JobId) -> Result<Option<JobRow>, StoreError> {
        self.through("get", 1, self.inner.get(id)).await
    }

    fn dedicated(&self, purpose: &str, connections: u32) -> Self {
        Layered {
            inner: self.inner.dedicated(purpose, connections),
            layer: self.layer.clone(),
        }
    }

    async fn close(&self) {
        self.inner.close().await;
    }

    async fn listen(&self) -> Result<Wakeups, StoreError> {
        self.through("listen", 0, self.inner.listen()).await
    }

    fn listen_connections(&self) -> u32 {
        self.inner.listen_connections()
    }

    async fn prune(&self, request: &PruneRequest) -> Result<u64, StoreError> {
        let sent = request.batch as usize;
        self.through("prune", sent, self.inner.prune(request)).await
    }

    async fn expire(&self, limit: u32) -> Result<Expired, StoreError> {
        self.through("expire", limit as usize, self.inner.expire(limit))
            .await
    }

    async fn vacuum(&self) -> Result<bool, StoreError> {
        self.through("vacuum", 0, self.inner.vacuum()).await
    }

    async fn load_steps(&self, lease: &Lease) -> Result<HashMap<String, String>, StoreError> {
        self.through("load_steps", 1, self.inner.load_steps(lease))
            .await
    }

    async fn load_steps_up_to(
        &self,
        lease: &Lease,
        max_bytes: usize,
    ) -> Result<(HashMap<String, String>, bool), StoreError> {
        self.through(
            "load_steps",
            1,
            self.inner.load_steps_up_to(lease, max_bytes),
        )
        .await
    }

    async fn load_step(&self, lease: &Lease, name: &str) -> Result<Option<String>, StoreError> {
        self.through("load_step", 1, self.inner.load_step(lease, name))
            .await
    }

    async fn save_step(
        &self,
        lease: &Lease,
        name: &str,
        output: &str,
    ) -> Result<Finalized, StoreError> {
        self.through("save_step", 1, self.inner.save_step(lease, name, output))
            .await
    }
}

impl Returned for JobId {
    fn rows(&self) -> usize {
        1
    }
}

impl Returned for Vec<JobId> {
    fn rows(&self) -> usize {
        self.len()
    }
}

impl Returned for Vec<crate::Tripped> {
    /// The breakers tripped.
    fn rows(&self) -> usize {
        self.len()
    }
}

impl Returned for Vec<ClaimedJob> {
    fn rows(&self) -> usize {
        self.len()
    }
}

impl Returned for Vec<Finalized> {
    /// The outcomes applied.
    fn rows(&self) -> usize {
        self.iter().filter(|f| f.written()).count()
    }
}

impl Returned for Finalized {
    fn rows(&self) -> usize {
        usize::from(self.written())
    }
}

impl Returned for HeartbeatReport {
    /// The leases lost.
    fn rows(&self) -> usize {
        self.lost.len()
    }
}

impl Returned for Rescued {
    fn rows(&self) -> usize {
        (self.retried + self.discarded) as usize
    }
}

impl Returned for Expired {
    fn rows(&self) -> usize {
        (self.discarded + self.cancelled) as usize
    }
}

impl Returned for u64 {
    fn rows(&self) -> usize {
        *self as usize
    }
}

impl Returned for () {
    fn rows(&self) -> usize {
        0
    }
}

impl Returned for bool {
    fn rows(&self) -> usize {
        usize::from(*self)
    }
}

impl Returned for Option<JobRow> {
    fn rows(&self) -> usize {
        usize::from(self.is_some())
    }
}

impl Returned for Option<Report> {
    fn rows(&self) -> usize {
        usize::from(self.is_some())
    }
}

/// The migrations the schema lacks.
impl Returned for Option<crate::SchemaLag> {
    fn rows(&self) -> usize {
        self.as_ref().map_or(0, |lag| lag.missing)
    }
}

impl Returned for Wakeups {
    fn rows(&self) -> usize {
        0
    }
}

impl<K, V> Returned for HashMap<K, V> {
    fn rows(&self) -> usize {
        self.len()
    }
}

/// Loaded step outputs, and whether they are all of the job's.
impl<K, V> Returned for (HashMap<K, V>, bool) {
    fn rows(&self) -> usize {
        self.0.len()
    }
}

impl Returned for Option<String> {
    fn rows(&self) -> usize {
        usize::from(self.is_some())
    }
}

/// An enqueue's answer as a layer's call sees it: the store's failure fails the call; a job the
/// store refused (invalid, a duplicate) is what the call returned.
fn refusal_returns<T>(
    result: Result<T, EnqueueError>,
) -> Result<Result<T, EnqueueError>, StoreError> {
    match result {
        Err(EnqueueError::Store(e)) => Err(e),
        other => Ok(other),
    }
}

impl<T: Returned> Returned for Result<T, EnqueueError> {
    fn rows(&self) -> usize {
        self.as_ref().map_or(0, Returned::rows)
    }
}
