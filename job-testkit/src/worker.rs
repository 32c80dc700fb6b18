//! A test-time clock for workers: short leases, fast rescues and polls, so a test that crashes
//! an execution sees the job again in a fraction of a second, without changing the job's
//! production lease.

use std::time::Duration;

use job_core::{Rescued, Rescuer, RescuerConfig, Store, StoreError, WorkerBuilder};

/// The lease every kind takes on a worker set up [`for_tests`](TestWorker::for_tests).
pub const TEST_LEASE: Duration = Duration::from_millis(300);

/// Test-time settings for a worker being built.
pub trait TestWorker {
    /// Sets every kind's lease to [`TEST_LEASE`] (heartbeats every 100 ms), the rescuer to run
    /// every 50 ms, idle polls every 20 ms, the drain to wait 2 s and the stuck report to come
    /// after 1 s: a job whose execution crashed is rescued and runs again about 0.4 s later.
    /// The jobs' own options (`#[job(lease = ..)]`) stay as they are for production.
    ///
    /// ```no_run
    /// # async fn demo(store: job_postgres::PgStore) {
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct SendInvoice { invoice_id: i64 }
    /// # impl job_core::Job for SendInvoice { const KIND: &'static str = "send_invoice";
    /// #   async fn perform(self, _: job_core::JobContext) -> Result<(), job_core::JobError> { Ok(()) } }
    /// use job_testkit::TestWorker;
    ///
    /// let worker = job_core::Worker::builder(store)
    ///     .register::<SendInvoice>()
    ///     .queue("default", 5)
    ///     .for_tests()
    ///     .build()
    ///     .unwrap()
    ///     .start();
    /// # let _ = worker; }
    /// ```
    fn for_tests(self) -> Self;
}

impl<S: Store> TestWorker for WorkerBuilder<S> {
    fn for_tests(self) -> Self {
        self.configure(|c| {
            c.lease = Some(TEST_LEASE);
            c.heartbeat_interval = None;
            c.rescuer.interval = Duration::from_millis(50);
            c.poll_interval = Duration::from_millis(20);
            c.drain_timeout = Duration::from_secs(2);
            c.stuck_after = Duration::from_secs(1);
        })
    }
}

/// Rescues now every job of `store` whose lease has expired (and only those), as a worker's
/// rescuer would on its next pass.
///
/// # Panics
/// When the store fails: a test should hear about it.
pub async fn rescue_now<S: Store>(store: &S) -> Rescued {
    let rescued: Result<Rescued, StoreError> =
        Rescuer::new(store.clone(), RescuerConfig::default())
            .run_once()
            .await;
    rescued.unwrap_or_else(|e| panic!("rescue pass failed: {e}"))
}
