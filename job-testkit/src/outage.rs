//! A store whose every call fails or stalls for a while: a database outage on demand. It is a
//! [`Layered`] store with the [`Outage`] layer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use job_core::{BoxFuture, Call, Layered, Returned, StoreError, StoreLayer};
use tokio::time::Instant;

/// A store cut off by an [`Outage`] on demand: `OutageStore::new(store, Outage::default())`.
pub type OutageStore<S> = Layered<S, Outage>;

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

/// The layer that cuts a store off: [`fail_for`](Self::fail_for) makes every call fail at
/// once (connection refused), [`stall_for`](Self::stall_for) makes every call hang (a network
/// partition) until the outage ends. Clones share the outage, and so do the dedicated handles
/// a worker makes of the store (its lease keeper's and its runtime's), so the whole worker
/// loses the database at once.
///
/// ```no_run
/// # async fn demo(store: job_postgres::PgStore) {
/// use std::time::Duration;
/// use job_testkit::{Outage, OutageStore};
///
/// let store = OutageStore::new(store, Outage::default());
/// // Worker::builder(store.clone()) ... start the worker, then:
/// store.layer().stall_for(Duration::from_secs(3)); // longer than the lease
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Outage {
    state: Arc<Mutex<State>>,
}

impl Outage {
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
}

impl StoreLayer for Outage {
    fn call<'a, T: Returned + Send + 'a>(
        &'a self,
        _call: Call,
        run: BoxFuture<'a, Result<T, StoreError>>,
    ) -> BoxFuture<'a, Result<T, StoreError>> {
        Box::pin(async move {
            self.gate().await?;
            run.await
        })
    }
}
