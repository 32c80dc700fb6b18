//! A store whose every call fails or stalls for a while: a database outage on demand. It is a
//! [`Layered`] store with the [`Outage`] layer.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use job_core::{BoxFuture, Call, Layered, Returned, StoreError, StoreLayer};
use tokio::sync::Notify;
use tokio::time::Instant;

/// A store cut off by an [`Outage`] on demand: `OutageStore::new(store, Outage::default())`.
pub type OutageStore<S> = Layered<S, Outage>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Calls fail at once with a storage error.
    Fail,
    /// Calls hang until the outage ends (at its deadline, or earlier by
    /// [`Outage::restore`] or a shorter outage), then go through.
    Stall,
}

#[derive(Debug, Default)]
struct State {
    outage: Option<(Mode, Instant)>,
    calls_refused: u64,
}

/// The layer that cuts a store off: [`fail_for`](Self::fail_for) makes every call fail at
/// once (connection refused), [`stall_for`](Self::stall_for) makes every call hang (a network
/// partition) until the outage ends, [`restore`](Self::restore) ends it, releasing the calls
/// it holds. Clones share the outage, and so do the dedicated handles
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
    /// Told whenever the outage changes, so that stalled calls look at it again.
    changed: Arc<Notify>,
}

impl Outage {
    /// Every call fails for `duration` from now. Calls already stalled keep waiting until
    /// this outage ends too.
    pub fn fail_for(&self, duration: Duration) {
        self.set(Some((Mode::Fail, Instant::now() + duration)));
    }

    /// Every call hangs until `duration` from now has passed, then proceeds. It replaces any
    /// outage: calls already stalled now wait for this one's end, sooner or later.
    pub fn stall_for(&self, duration: Duration) {
        self.set(Some((Mode::Stall, Instant::now() + duration)));
    }

    /// Ends any outage now: calls stalled by it proceed at once.
    pub fn restore(&self) {
        self.set(None);
    }

    fn set(&self, outage: Option<(Mode, Instant)>) {
        self.lock().outage = outage;
        self.changed.notify_waiters();
    }

    /// When the outage in force now ends, if one is.
    fn ends(&self) -> Option<Instant> {
        let state = self.lock();
        state
            .outage
            .map(|(_, until)| until)
            .filter(|until| Instant::now() < *until)
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
            Some((Mode::Stall, _)) => {
                // Until the outage in force ends: its deadline, or a change (a restore, a
                // shorter or longer outage) looked at again.
                loop {
                    // Made before the look, so a change after it is not missed.
                    let changed = self.changed.notified();
                    let Some(until) = self.ends() else {
                        return Ok(());
                    };
                    tokio::select! {
                        () = tokio::time::sleep_until(until) => {}
                        () = changed => {}
                    }
                }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use job_core::Store;

    use super::*;
    use crate::TestSqlite;

    /// Starts a call of `store` and returns it once the outage holds it.
    async fn stalled_call(
        store: &OutageStore<job_sqlite::SqliteStore>,
    ) -> tokio::task::JoinHandle<Result<Option<job_core::JobRow>, StoreError>> {
        let calls = store.layer().calls_refused();
        let call = tokio::spawn({
            let store = store.clone();
            async move { store.get(1).await }
        });
        while store.layer().calls_refused() == calls {
            tokio::task::yield_now().await;
        }
        call
    }

    /// Waits for `call` at most 10 s: a guard against a hang, not a measure of time.
    async fn returns(
        call: tokio::task::JoinHandle<Result<Option<job_core::JobRow>, StoreError>>,
        what: &str,
    ) {
        let row = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .unwrap_or_else(|_| panic!("the stalled call still waits 10 s after {what}"))
            .expect("the call's task")
            .expect("the call goes through");
        assert_eq!(row, None);
    }

    #[tokio::test]
    async fn restore_releases_the_calls_a_stall_holds() {
        let db = TestSqlite::new().await;
        let store = OutageStore::new(db.store(), Outage::default());
        store.layer().stall_for(Duration::from_secs(60));
        let call = stalled_call(&store).await;
        store.layer().restore();
        returns(call, "restore()").await;
        db.close().await;
    }

    #[tokio::test]
    async fn a_shorter_stall_releases_the_calls_a_longer_one_holds() {
        let db = TestSqlite::new().await;
        let store = OutageStore::new(db.store(), Outage::default());
        store.layer().stall_for(Duration::from_secs(60));
        let call = stalled_call(&store).await;
        store.layer().stall_for(Duration::from_millis(1));
        returns(call, "a stall of 1 ms replaced it").await;
        db.close().await;
    }
}
