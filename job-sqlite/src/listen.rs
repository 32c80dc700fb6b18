//! Wake-ups inside one process, without polling: every connection the store opens carries
//! SQLite hooks that notice an insert into `job_jobs` and, when its transaction commits (never
//! when it rolls back), wake every subscriber. The store's own releases, rescues and redrives
//! wake the queues they refilled. Another process sharing the file is not woken: its workers
//! find new jobs by polling (`WorkerConfig::poll_interval`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use job_core::Wakeups;
use sqlx::sqlite::SqliteOperation;
use sqlx::SqliteConnection;
use tokio::sync::mpsc;

use crate::error::Error;

/// The wake-up naming every queue: an insert commits without saying which queue it filled.
pub const EVERY_QUEUE: &str = "";

/// How many wake-ups may wait unread per subscriber; more are dropped (they are hints).
const CAPACITY: usize = 256;

/// The subscribers of one store and every handle made from it.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    subscribers: Mutex<Vec<mpsc::Sender<String>>>,
}

impl Notifier {
    /// A new subscription.
    pub(crate) fn subscribe(&self) -> Wakeups {
        let (tx, rx) = mpsc::channel(CAPACITY);
        self.subscribers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(tx);
        rx
    }

    /// Wakes every subscriber for `queue` ([`EVERY_QUEUE`]: all of them).
    pub(crate) fn wake(&self, queue: &str) {
        let mut subscribers = self.subscribers.lock().unwrap_or_else(|e| e.into_inner());
        subscribers.retain(|tx| {
            // A full channel already holds wake-ups the worker has yet to read: drop this one.
            !matches!(
                tx.try_send(queue.to_owned()),
                Err(mpsc::error::TrySendError::Closed(_))
            )
        });
    }

    /// Installs the hooks on a new connection: an insert into `job_jobs` marks the
    /// connection's transaction, whose commit wakes every queue and whose rollback forgets it.
    pub(crate) async fn install(
        self: &Arc<Self>,
        conn: &mut SqliteConnection,
    ) -> Result<(), Error> {
        let inserted = Arc::new(AtomicBool::new(false));
        let mut handle = conn.lock_handle().await.map_err(Error::Connect)?;
        {
            let inserted = inserted.clone();
            handle.set_update_hook(move |change| {
                if matches!(change.operation, SqliteOperation::Insert) && change.table == "job_jobs"
                {
                    inserted.store(true, Ordering::Relaxed);
                }
            });
        }
        {
            let inserted = inserted.clone();
            let notifier = Arc::downgrade(self);
            // Runs as the commit starts, on the connection's thread; the write lock is held
            // until it ends, so a woken claim (an immediate transaction) sees the new rows.
            handle.set_commit_hook(move || {
                if inserted.swap(false, Ordering::Relaxed) {
                    if let Some(notifier) = notifier.upgrade() {
                        notifier.wake(EVERY_QUEUE);
                    }
                }
                true
            });
        }
        handle.set_rollback_hook(move || inserted.store(false, Ordering::Relaxed));
        Ok(())
    }
}
