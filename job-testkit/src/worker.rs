//! A test-time clock for workers: a lease that survives a loaded CI machine, fast rescues and
//! polls, without changing the job's production lease. A test that crashes an execution sees
//! the job again at once with
//! [`Faults::rescue_at_once`](crate::Faults::rescue_at_once).

use std::time::Duration;

use job_core::{Rescued, Rescuer, RescuerConfig, Store, StoreError, WorkerBuilder};

/// The lease every kind takes on a worker set up [`for_tests`](TestWorker::for_tests): 2 s,
/// renewed every 100 ms. Long enough that a worker starved of CPU (test binaries running side
/// by side on two cores) still renews in time: under a 300 ms lease, the keeper fenced
/// executions it could not renew in time, and a crash test saw a fault never fire or a step
/// run twice. A crash need not wait it out: see
/// [`Faults::rescue_at_once`](crate::Faults::rescue_at_once).
pub const TEST_LEASE: Duration = Duration::from_secs(2);

/// The heartbeat period under [`for_tests`](TestWorker::for_tests): as under the 300 ms lease
/// before, so a heartbeat fault fires in a handler of a few hundred milliseconds (at a third of
/// the lease it came after the 250 ms handler of a crash test had returned).
const TEST_HEARTBEAT: Duration = Duration::from_millis(100);

/// Test-time settings for a worker being built.
pub trait TestWorker {
    /// Sets every kind's lease to [`TEST_LEASE`] (2 s, heartbeats every 100 ms: a
    /// `.configure` that sets a lease under 200 ms after it sets `heartbeat_interval` too), the rescuer
    /// to run every 50 ms, idle polls every 20 ms, the drain to wait 2 s and the stuck report
    /// to come after 1 s. A job whose execution crashed runs again at once when the
    /// [`Faults`](crate::Faults) are set to [`rescue_at_once`](crate::Faults::rescue_at_once),
    /// else when its lease runs out (about 2 s). The jobs' own options (`#[job(lease = ..)]`)
    /// stay as they are for production.
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
            c.heartbeat_interval = Some(TEST_HEARTBEAT);
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
