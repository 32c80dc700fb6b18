//! A [`Store`] wrapper that counts and times the worker's claim and finalize calls, so a run
//! can say how many statements it took, how big they were and how long each waited on the
//! database. Two clock reads and a few relaxed atomics per call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use job_core::{
    ClaimRequest, ClaimedJob, Finalize, Finalized, HeartbeatReport, JobId, JobRow, Lease, NewJob,
    Release, Renewal, Rescued, Store, StoreError, Wakeups,
};
use serde_json::{json, Value};

#[derive(Debug, Default)]
struct Call {
    calls: AtomicU64,
    /// Rows asked for (claim) or sent (finalize).
    asked: AtomicU64,
    /// Rows that came back.
    got: AtomicU64,
    nanos: AtomicU64,
    max_nanos: AtomicU64,
}

impl Call {
    fn record(&self, asked: usize, got: usize, started: Instant) {
        let nanos = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.asked.fetch_add(asked as u64, Ordering::Relaxed);
        self.got.fetch_add(got as u64, Ordering::Relaxed);
        self.nanos.fetch_add(nanos, Ordering::Relaxed);
        self.max_nanos.fetch_max(nanos, Ordering::Relaxed);
    }

    fn report(&self) -> Value {
        let calls = self.calls.load(Ordering::Relaxed);
        let asked = self.asked.load(Ordering::Relaxed);
        let got = self.got.load(Ordering::Relaxed);
        let nanos = self.nanos.load(Ordering::Relaxed);
        let per = |x: u64| {
            if calls == 0 {
                0.0
            } else {
                x as f64 / calls as f64
            }
        };
        json!({
            "calls": calls,
            "mean_asked": crate::report::round(per(asked), 2),
            "mean_got": crate::report::round(per(got), 2),
            "mean_ms": crate::report::round(per(nanos) / 1e6, 3),
            "max_ms": crate::report::round(self.max_nanos.load(Ordering::Relaxed) as f64 / 1e6, 3),
            "busy_s": crate::report::round(nanos as f64 / 1e9, 3),
        })
    }
}

#[derive(Debug, Default)]
struct Meters {
    claim: Call,
    finalize: Call,
    heartbeat: Call,
}

/// Wraps a store; clones share the counters.
#[derive(Debug, Clone)]
pub(crate) struct MeteredStore<S> {
    inner: S,
    meters: Arc<Meters>,
}

impl<S: Store> MeteredStore<S> {
    pub(crate) fn new(inner: S) -> Self {
        MeteredStore {
            inner,
            meters: Arc::default(),
        }
    }

    /// What was counted so far, as JSON.
    pub(crate) fn report(&self) -> Value {
        json!({
            "claim": self.meters.claim.report(),
            "finalize": self.meters.finalize.report(),
            "heartbeat": self.meters.heartbeat.report(),
        })
    }
}

impl<S: Store> Store for MeteredStore<S> {
    async fn enqueue(&self, job: NewJob) -> Result<JobId, StoreError> {
        self.inner.enqueue(job).await
    }

    async fn enqueue_many(&self, jobs: Vec<NewJob>) -> Result<Vec<JobId>, StoreError> {
        self.inner.enqueue_many(jobs).await
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ClaimedJob>, StoreError> {
        let started = Instant::now();
        let result = self.inner.claim(request).await;
        let got = result.as_ref().map_or(0, Vec::len);
        self.meters
            .claim
            .record(request.limit as usize, got, started);
        result
    }

    async fn heartbeat(&self, renewals: &[Renewal]) -> Result<HeartbeatReport, StoreError> {
        let started = Instant::now();
        let result = self.inner.heartbeat(renewals).await;
        self.meters
            .heartbeat
            .record(renewals.len(), renewals.len(), started);
        result
    }

    async fn finalize(&self, batch: &[Finalize]) -> Result<Vec<Finalized>, StoreError> {
        let started = Instant::now();
        let result = self.inner.finalize(batch).await;
        let got = result.as_ref().map_or(0, |r| {
            r.iter().filter(|f| **f == Finalized::Applied).count()
        });
        self.meters.finalize.record(batch.len(), got, started);
        result
    }

    async fn rescue_expired(&self, limit: u32) -> Result<Rescued, StoreError> {
        self.inner.rescue_expired(limit).await
    }

    async fn release(&self, releases: &[Release]) -> Result<u64, StoreError> {
        self.inner.release(releases).await
    }

    async fn get(&self, id: JobId) -> Result<Option<JobRow>, StoreError> {
        self.inner.get(id).await
    }

    async fn listen(&self) -> Result<Wakeups, StoreError> {
        self.inner.listen().await
    }

    fn dedicated(&self, purpose: &str, connections: u32) -> Self {
        MeteredStore {
            inner: self.inner.dedicated(purpose, connections),
            meters: self.meters.clone(),
        }
    }

    async fn close(&self) {
        self.inner.close().await;
    }

    async fn prune(&self, request: &job_core::PruneRequest) -> Result<u64, StoreError> {
        self.inner.prune(request).await
    }

    async fn expire(&self, limit: u32) -> Result<job_core::Expired, StoreError> {
        self.inner.expire(limit).await
    }

    async fn vacuum(&self) -> Result<bool, StoreError> {
        self.inner.vacuum().await
    }

    async fn load_steps(
        &self,
        lease: &Lease,
    ) -> Result<std::collections::HashMap<String, String>, StoreError> {
        self.inner.load_steps(lease).await
    }

    async fn save_step(
        &self,
        lease: &Lease,
        name: &str,
        output: &str,
    ) -> Result<Finalized, StoreError> {
        self.inner.save_step(lease, name, output).await
    }
}
