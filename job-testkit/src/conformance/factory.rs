//! How the suite gets a fresh store for each test.

use std::future::Future;

use job_core::Store;

/// Makes a fresh, empty store for each contract test, and cleans up after it.
///
/// A test gets its own store: no job, no lease, nothing another test wrote. Anything the store
/// needs to stay alive (a database, a temporary directory) goes in [`Guard`](Self::Guard),
/// which the suite hands back to [`dispose`](Self::dispose) when the test has ended, passed or
/// not.
///
/// A closure `Fn() -> impl Future<Output = S>` is a factory too, with no guard:
///
/// ```no_run
/// # async fn demo<S: job_core::Store + job_core::Admin>(make: fn() -> S) {
/// job_testkit::conformance::run(move || async move { make() }).await;
/// # }
/// ```
pub trait StoreFactory: Send + Sync + 'static {
    /// The store under test.
    type Store: Store;

    /// What must outlive the store; given back to [`dispose`](Self::dispose).
    type Guard: Send + 'static;

    /// A fresh, empty store and its guard.
    fn create(&self) -> impl Future<Output = (Self::Store, Self::Guard)> + Send;

    /// Cleans up after a test, once its store is no longer used. The default drops the guard.
    fn dispose(&self, guard: Self::Guard) -> impl Future<Output = ()> + Send {
        async move { drop(guard) }
    }
}

impl<C, Fut, S> StoreFactory for C
where
    C: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = S> + Send,
    S: Store,
{
    type Store = S;
    type Guard = ();

    fn create(&self) -> impl Future<Output = (S, ())> + Send {
        let store = self();
        async move { (store.await, ()) }
    }
}
