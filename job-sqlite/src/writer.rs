//! The store's writer thread: where every write transaction of the store runs, from its
//! `BEGIN IMMEDIATE` to its `COMMIT`.
//!
//! SQLite has one writer at a time, and a write transaction holds the file's write lock from
//! its first statement to its end. Each statement of a transaction is an await, so whoever
//! polls the transaction's future holds that lock between them. Polled by the caller's task, a
//! claim or a finalize would be driven by the application's runtime: a handler that blocks that
//! runtime (a `std::thread::sleep`, a synchronous client, CPU-bound work) would stop the
//! transaction between two statements while it holds the lock and the store's write gate, and
//! the lease keeper's heartbeat, on its own thread and runtime, would wait behind it until the
//! lease ran out (and other processes' writes would fail as busy after [`BUSY_TIMEOUT`]). So
//! the store's transactions run on a thread of the store's own, which no handler can block; the
//! caller only waits for the answer. Dropping the caller's future aborts the transaction
//! (rolled back, as a dropped transaction always was).
//!
//! A tokio runtime of one thread, started with the store and ended when the last handle of the
//! store is dropped. (The application's own transactions on [`SqliteStore::pool`] are still
//! its own to drive.)
//!
//! [`BUSY_TIMEOUT`]: crate::BUSY_TIMEOUT
//! [`SqliteStore::pool`]: crate::SqliteStore::pool

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::instrument::WithSubscriber;
use tracing::Instrument;

use crate::error::Error;

/// The writer thread of one store (shared by every handle made from it).
#[derive(Debug)]
pub(crate) struct Writer {
    handle: Handle,
    /// Dropped with the store: the thread's runtime then ends.
    _stop: oneshot::Sender<()>,
}

impl Writer {
    /// Starts the thread. The runtime is built on it and its handle sent back: built here and
    /// moved into a thread that could not be spawned, it would be dropped in the caller's
    /// async context, which tokio refuses with a panic.
    pub(crate) fn start() -> Result<Writer, Error> {
        let (stop, stopped) = oneshot::channel::<()>();
        let (handle_tx, handle_rx) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("job-sqlite-writer".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(runtime) => runtime,
                    Err(e) => {
                        let _ = handle_tx.send(Err(e));
                        return;
                    }
                };
                let _ = handle_tx.send(Ok(runtime.handle().clone()));
                // Runs the spawned transactions until the store is dropped; those still
                // running then (none a live caller waits for) are dropped, so rolled back.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(Error::Writer)?;
        let handle = handle_rx
            .recv()
            .map_err(|_| Error::Writer(std::io::Error::other("the writer thread ended at once")))?
            .map_err(Error::Writer)?;
        Ok(Writer {
            handle,
            _stop: stop,
        })
    }

    /// Runs `work` on the writer thread and waits for its answer. A panic in it is resumed
    /// here; dropping the returned future aborts it.
    pub(crate) async fn run<T, F>(&self, work: F) -> T
    where
        F: Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        // In the caller's span and with its subscriber, so that what a write logs (sqlx's
        // statements, a skipped row) stays in the caller's trace.
        let work = work
            .instrument(tracing::Span::current())
            .with_current_subscriber();
        let task = AbortOnDrop(self.handle.spawn(work));
        match task.await {
            Ok(answer) => answer,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Aborted: only by the writer's runtime ending, which happens when the last handle
            // of the store is dropped, and this caller holds one.
            Err(e) => panic!("the SQLite store's writer thread ended under a live store: {e}"),
        }
    }
}

/// A spawned task aborted when its awaiting future is dropped.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
