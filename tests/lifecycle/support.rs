//! Jobs and helpers of the lifecycle tests.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::{Job, JobContext, JobError, JobId, JobOptions, PgStore};
use serde::{Deserialize, Serialize};

use crate::common::FAST_BACKOFF;

/// Unique by invoice: derives its key from the payload, as `#[job(unique = "invoice:{invoice_id}")]`
/// generates.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SendInvoice {
    pub(crate) invoice_id: i64,
    pub(crate) note: String,
}

impl Job for SendInvoice {
    const KIND: &'static str = "test.send_invoice";
    const OPTIONS: JobOptions = JobOptions {
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    fn unique_key(&self) -> Option<String> {
        Some(format!("invoice:{}", self.invoice_id))
    }

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        ctx.state::<crate::common::Ledger>()?.record(&ctx);
        Ok(())
    }
}

/// Shared flags of [`Spinner`].
#[derive(Clone, Default)]
pub(crate) struct Spin {
    pub(crate) started: Arc<AtomicBool>,
    pub(crate) noticed: Arc<AtomicBool>,
}

/// Loops until its context says it is cancelled, then gives up with `JobError::cancel`. Short
/// lease: the heartbeat (a third of it) brings the cancel request within 100 ms.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Spinner {}

impl Job for Spinner {
    const KIND: &'static str = "test.spinner";
    const OPTIONS: JobOptions = JobOptions {
        // Long enough that a loaded machine's late heartbeat never fences it (a fenced
        // spinner is given back and cancelled without its handler noticing); a cancel
        // request still reaches it within a heartbeat, a third of it.
        lease: Duration::from_secs(2),
        timeout: Duration::from_secs(30),
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let spin = ctx.state::<Spin>()?.clone();
        spin.started.store(true, Ordering::SeqCst);
        while !ctx.is_cancelled() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        spin.noticed.store(true, Ordering::SeqCst);
        Err(JobError::cancel("noticed the cancel request"))
    }
}

/// Running and peak counts of [`Limited`] executions.
#[derive(Clone, Default)]
pub(crate) struct Gauge {
    pub(crate) now: Arc<AtomicUsize>,
    pub(crate) peak: Arc<AtomicUsize>,
    pub(crate) done: Arc<AtomicUsize>,
}

/// At most two run at once across every worker.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Limited {
    pub(crate) n: u32,
}

impl Job for Limited {
    const KIND: &'static str = "test.limited";
    const OPTIONS: JobOptions = JobOptions {
        concurrency: Some(2),
        backoff: FAST_BACKOFF,
        ..JobOptions::DEFAULT
    };

    async fn perform(self, ctx: JobContext) -> Result<(), JobError> {
        let gauge = ctx.state::<Gauge>()?.clone();
        let now = gauge.now.fetch_add(1, Ordering::SeqCst) + 1;
        gauge.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(30)).await;
        gauge.now.fetch_sub(1, Ordering::SeqCst);
        gauge.done.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// Runs jobs of the kinds above.
pub(crate) fn lifecycle_worker(h: &crate::common::Harness) -> job::WorkerBuilder<PgStore> {
    h.worker()
        .register::<SendInvoice>()
        .register::<Spinner>()
        .register::<Limited>()
        .state(Spin::default())
        .state(Gauge::default())
}

/// Runs `sql` with `id` bound as `$1`.
pub(crate) async fn exec(store: &PgStore, sql: &str, id: JobId) {
    sqlx::query(sql)
        .bind(id)
        .execute(store.pool())
        .await
        .expect("sql");
}

/// A scalar count.
pub(crate) async fn count(store: &PgStore, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(store.pool())
        .await
        .expect("count")
}
