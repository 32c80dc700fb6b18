//! A [`Store`] wrapper that fails or stalls every call for a while: a database outage on demand.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use job_core::{
    ClaimRequest, ClaimedJob, Finalize, Finalized, HeartbeatReport, JobId, JobRow, Lease, NewJob,
    Release, Renewal, Rescued, Store, StoreError, Wakeups,
};
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Calls fail at once with a storage error.
    Fail,
    /// Calls hang until the outage ends, then go through.
    Stall,
}

#[derive(Debug, Default)]
struct State {
    outage: Option<(Mode, Instant)>,
    calls_refused: u64,
}

/// Wraps a store so a test can cut it off: [`fail_for`](Self::fail_for) makes every call fail
/// at once (connection refused), [`stall_for`](Self::stall_for) makes every call hang (a
/// network partition) until the outage ends.
///
/// ```no_run
/// # async fn demo(store: job_postgres::PgStore) {
/// use std::time::Duration;
/// use job_testkit::OutageStore;
///
/// let store = OutageStore::new(store);
/// // Worker::builder(store.clone()) ... start the worker, then:
/// store.stall_for(Duration::from_secs(3)); // longer than the lease
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct OutageStore<S> {
    inner: S,
    state: Arc<Mutex<State>>,
}

impl<S: Store> OutageStore<S> {
    /// Wraps `inner`; no outage yet.
    pub fn new(inner: S) -> Self {
        OutageStore {
            inner,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    /// The wrapped store, which the outage does not affect.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Every call fails for `duration` from now.
    pub fn fail_for(&self, duration: Duration) {
        self.lock().outage = Some((Mode::Fail, Instant::now() + duration));
    }

    /// Every call hangs until `duration` from now has passed, then proceeds.
    pub fn stall_for(&self, duration: Duration) {
        self.lock().outage = Some((Mode::Stall, Instant::now() + duration));
    }

    /// Ends any outage now.
    pub fn restore(&self) {
        self.lock().outage = None;
    }

    /// How many calls failed or stalled because of an outage.
    pub fn calls_refused(&self) -> u64 {
        self.lock().calls_refused
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn gate(&self) -> Result<(), StoreError> {
        let outage = {
            let mut state = self.lock();
            match state.outage {
                Some((_, until)) if Instant::now() >= until => {
                    state.outage = None;
                    None
                }
                Some(o) => {
                    state.calls_refused += 1;
                    Some(o)
                }
                None => None,
            }
        };
        match outage {
            None => Ok(()),
            Some((Mode::Fail, _)) => Err(StoreError::new(
                "injected outage: the database is unreachable",
            )),
            Some((Mode::Stall, until)) => {
                tokio::time::sleep_until(until).await;
                Ok(())
            }
        }
    }

    async fn call<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        self.gate().await?;
        f.await
    }
}

impl<S: Store> Store for OutageStore<S> {
    async fn enqueue(&self, job: NewJob) -> Result<JobId, StoreError> {
        self.call(self.inner.enqueue(job)).await
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>, StoreError> {
        self.call(self.inner.enqueue_many(jobs)).await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>, StoreError> {
        self.call(self.inner.claim(request)).await
    }

    async fn heartbeat(&self, renewals: &[Renewal]) -> Result<HeartbeatReport, StoreError> {
        self.call(self.inner.heartbeat(renewals)).await
    }

    async fn finalize(&self, batch: &[Finalize]) -> Result<Vec<Finalized>, StoreError> {
        self.call(self.inner.finalize(batch)).await
    }

    async fn rescue_expired(&self, limit: u32) -> Result<Rescued, StoreError> {
        self.call(self.inner.rescue_expired(limit)).await
    }

    async fn release(&self, releases: &[Release]) -> Result<u64, StoreError> {
        self.call(self.inner.release(releases)).await
    }

    async fn get(&self, id: JobId) -> Result<Option<JobRow>, StoreError> {
        self.call(self.inner.get(id)).await
    }

    async fn listen(&self) -> Result<Wakeups, StoreError> {
        self.call(self.inner.listen()).await
    }

    /// The inner store's dedicated handle, under the same outage: a worker's lease keeper and
    /// runtime lose the database together with everything else.
    fn dedicated(&self, purpose: &str, connections: u32) -> Self {
        OutageStore {
            inner: self.inner.dedicated(purpose, connections),
            state: self.state.clone(),
        }
    }

    async fn close(&self) {
        self.inner.close().await;
    }

    // --- lifecycle: unique jobs, cancellation, dead letters, pausing, pruning, stats ---

    async fn prune(&self, request: &job_core::PruneRequest) -> Result<u64, StoreError> {
        self.call(self.inner.prune(request)).await
    }

    async fn expire(&self, limit: u32) -> Result<job_core::Expired, StoreError> {
        self.call(self.inner.expire(limit)).await
    }

    async fn vacuum(&self) -> Result<bool, StoreError> {
        self.call(self.inner.vacuum()).await
    }

    // --- execution: durable steps, completion in the caller's transaction ---

    async fn load_steps(
        &self,
        lease: &Lease,
    ) -> Result<std::collections::HashMap<String, String>, StoreError> {
        self.call(self.inner.load_steps(lease)).await
    }

    async fn save_step(
        &self,
        lease: &Lease,
        name: &str,
        output: &str,
    ) -> Result<Finalized, StoreError> {
        self.call(self.inner.save_step(lease, name, output)).await
    }
}
