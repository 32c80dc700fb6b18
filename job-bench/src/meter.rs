//! A store layer that counts and times the worker's claim and finalize calls, so a run
//! can say how many statements it took, how big they were and how long each waited on the
//! database. Two clock reads and a few relaxed atomics per call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use job_core::{BoxFuture, Call, Returned, StoreError, StoreLayer};
use serde_json::{json, Value};

#[derive(Debug, Default)]
struct Tally {
    calls: AtomicU64,
    /// Rows asked for (claim) or sent (finalize).
    asked: AtomicU64,
    /// Rows that came back.
    got: AtomicU64,
    nanos: AtomicU64,
    max_nanos: AtomicU64,
}

impl Tally {
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
    claim: Tally,
    finalize: Tally,
    heartbeat: Tally,
}

/// The layer that counts and times the worker's claim, finalize and heartbeat calls; clones
/// share the counters. `Layered::new(store, Meter::default())` meters a store.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meter {
    meters: Arc<Meters>,
}

impl Meter {
    /// What was counted so far, as JSON.
    pub(crate) fn report(&self) -> Value {
        json!({
            "claim": self.meters.claim.report(),
            "finalize": self.meters.finalize.report(),
            "heartbeat": self.meters.heartbeat.report(),
        })
    }
}

impl StoreLayer for Meter {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        let tally = match call.name {
            "claim" => &self.meters.claim,
            "finalize" => &self.meters.finalize,
            "heartbeat" => &self.meters.heartbeat,
            _ => return run,
        };
        Box::pin(async move {
            let started = Instant::now();
            let result = run.await;
            // Rows that came back: jobs claimed, outcomes applied, leases renewed.
            let got = match (&result, call.name) {
                (Ok(r), "heartbeat") => call.sent.saturating_sub(r.rows()),
                (Ok(r), _) => r.rows(),
                (Err(_), _) => 0,
            };
            tally.record(call.sent, got, started);
            result
        })
    }
}
