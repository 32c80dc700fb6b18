//! Wake-ups inside one process, without polling: every connection the store opens carries
//! SQLite hooks that notice an insert into `job_jobs` and, once its transaction has committed
//! (never when it rolls back), wake every subscriber. The store's own releases, rescues and
//! redrives wake the queues they refilled. Another process sharing the file is not woken: its
//! workers find new jobs by polling (`WorkerConfig::poll_interval`).
//!
//! In WAL mode the wake-up comes from SQLite's WAL hook, which runs once the commit has taken
//! place and the write lock is released: a claim woken by it reads the new rows even in the
//! read that comes before its write (`lease::claimable`, see `SqliteStore::claim`). The commit hook
//! runs as the commit starts, before the rows are visible to other connections' reads: a
//! claim's read woken from there could see the file as it was and find nothing, and the job
//! would wait for the next poll.

use std::cell::RefCell;
use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use job_core::Wakeups;
use sqlx::sqlite::SqliteOperation;
use sqlx::SqliteConnection;
use tokio::sync::mpsc;

use crate::error::Error;

/// The wake-up naming every queue: an insert commits without saying which queue it filled.
pub const EVERY_QUEUE: &str = "";

/// How many wake-ups may wait unread per subscriber; more are dropped (they are hints).
const CAPACITY: usize = 256;

thread_local! {
    /// The wake-up to send once the commit under way on this thread has taken place (WAL
    /// mode): set by the commit hook, taken by [`after_commit`]. SQLite calls both hooks on the
    /// thread running the `COMMIT` (sqlx's worker thread of the connection, one per
    /// connection), within that one step.
    static WAKE_AFTER_COMMIT: RefCell<Option<Pending>> = const { RefCell::new(None) };
}

/// When, after a commit began, the runtime wakes every queue itself while SQLite's WAL hook
/// has not (see [`Pending`]): soon after a quick commit, then again in case the commit took
/// longer (a loaded machine, a slow disk), so that a claim woken before the rows could be
/// read is woken again after they can. Only the first was sent before: under load (CI with
/// other builds beside it) a claim woken 2 ms after the commit began missed the job 1 time in
/// 300, and a job inserted through `fetch_one`, which no WAL hook follows, then waited for
/// the next poll.
const WAL_HOOK_FALLBACKS: [std::time::Duration; 3] = [
    std::time::Duration::from_millis(2),
    std::time::Duration::from_millis(20),
    std::time::Duration::from_millis(200),
];

/// A wake-up owed for a committed insert (WAL mode). SQLite calls the WAL hook only for a
/// statement stepped to its end: an autocommit `INSERT … RETURNING` read with `fetch_one`
/// commits when sqlx resets it, and no WAL hook follows. So the commit hook also asks the
/// runtime to wake every queue at each of [`WAL_HOOK_FALLBACKS`] unless the WAL hook has sent
/// the wake-up by then (`owed` cleared). A commit that takes longer than the first may be woken
/// for before it can be read: the later ones, or the WAL hook (which never consumes what the
/// fallback sent), wake once more.
#[derive(Debug, Clone)]
struct Pending {
    notifier: Weak<Notifier>,
    owed: Arc<AtomicBool>,
}

impl Pending {
    /// Sends the wake-up if still owed (the WAL hook's, or the fallback's); whether it was.
    fn pay(&self, consume: bool) -> bool {
        let owed = if consume {
            self.owed.swap(false, Ordering::AcqRel)
        } else {
            self.owed.load(Ordering::Acquire)
        };
        if owed {
            if let Some(notifier) = self.notifier.upgrade() {
                notifier.wake(EVERY_QUEUE);
            }
        }
        owed
    }
}

/// The subscribers of one store and every handle made from it.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    subscribers: Mutex<Vec<mpsc::Sender<String>>>,
    /// The runtime the store was opened on, which sends a wake-up SQLite's WAL hook did not
    /// ([`Pending`]); none outside a runtime (the fallback is then the workers' poll).
    runtime: Option<tokio::runtime::Handle>,
}

impl Notifier {
    /// The notifier of a store opened now, on the current runtime if any.
    pub(crate) fn new() -> Notifier {
        Notifier {
            subscribers: Mutex::default(),
            runtime: tokio::runtime::Handle::try_current().ok(),
        }
    }

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
    /// In WAL mode the wake-up waits until the commit has taken place ([`after_commit`]).
    pub(crate) async fn install(
        self: &Arc<Self>,
        conn: &mut SqliteConnection,
    ) -> Result<(), Error> {
        let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
            .fetch_one(&mut *conn)
            .await
            .map_err(Error::Connect)?;
        let wal = journal.eq_ignore_ascii_case("wal");
        let checkpoint_at: i64 = sqlx::query_scalar("PRAGMA wal_autocheckpoint")
            .fetch_one(&mut *conn)
            .await
            .map_err(Error::Connect)?;
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
            // Runs as the commit starts, on the connection's thread, before other connections
            // can read the new rows. In WAL mode the wake-up is left to the WAL hook, which
            // runs once they can; otherwise (a file the application opened in another journal
            // mode, where the claim has no read before its write) it is sent from here: the
            // write lock is held until the commit ends, so a woken claim sees the new rows.
            handle.set_commit_hook(move || {
                if inserted.swap(false, Ordering::Relaxed) {
                    if wal {
                        let pending = Pending {
                            notifier: notifier.clone(),
                            owed: Arc::new(AtomicBool::new(true)),
                        };
                        let runtime = notifier.upgrade().and_then(|n| n.runtime.clone());
                        if let Some(runtime) = runtime {
                            let fallback = pending.clone();
                            // Never unwinds into SQLite: a runtime that has shut down drops
                            // the task.
                            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                runtime.spawn(async move {
                                    let mut waited = std::time::Duration::ZERO;
                                    for at in WAL_HOOK_FALLBACKS {
                                        tokio::time::sleep(at - waited).await;
                                        waited = at;
                                        if !fallback.pay(false) {
                                            return;
                                        }
                                    }
                                })
                            }));
                        }
                        WAKE_AFTER_COMMIT.with(|w| *w.borrow_mut() = Some(pending));
                    } else if let Some(notifier) = notifier.upgrade() {
                        notifier.wake(EVERY_QUEUE);
                    }
                }
                true
            });
        }
        handle.set_rollback_hook(move || {
            inserted.store(false, Ordering::Relaxed);
            // A commit that failed after its hook: nothing is owed, by either.
            if let Some(pending) = WAKE_AFTER_COMMIT.with(|w| w.borrow_mut().take()) {
                pending.owed.store(false, Ordering::Release);
            }
        });
        if wal {
            // SQLite's automatic checkpoint is itself a WAL hook (a connection has one), which
            // this one replaces: it checkpoints as SQLite's did, after the same number of
            // pages. The number is the hook's argument itself, never dereferenced, so nothing
            // is allocated per connection.
            let checkpoint_at = usize::try_from(checkpoint_at.max(0)).unwrap_or(0);
            let db = handle.as_raw_handle().as_ptr();
            // SAFETY: `db` is the connection's open handle, locked out of its worker thread for
            // the call (`lock_handle`), so no statement runs on it meanwhile; `after_commit`
            // never unwinds and never reads through its argument.
            unsafe {
                libsqlite3_sys::sqlite3_wal_hook(
                    db,
                    Some(after_commit),
                    checkpoint_at as *mut c_void,
                );
            }
        }
        Ok(())
    }
}

/// SQLite's WAL hook of every connection the store opens in WAL mode: called after each commit
/// has taken place and the write lock is released, on the thread that committed. Wakes every
/// queue if the transaction inserted a job (the commit hook left its notifier in
/// [`WAKE_AFTER_COMMIT`]), then checkpoints once the WAL holds `checkpoint_at` pages or more,
/// as SQLite's own hook (`sqlite3WalDefaultHook`, `PRAGMA wal_autocheckpoint`) does; 0: never.
extern "C" fn after_commit(
    checkpoint_at: *mut c_void,
    db: *mut libsqlite3_sys::sqlite3,
    name: *const c_char,
    pages: c_int,
) -> c_int {
    let _ = std::panic::catch_unwind(|| {
        if let Some(pending) = WAKE_AFTER_COMMIT.with(|w| w.borrow_mut().take()) {
            let _ = pending.pay(true);
        }
    });
    let checkpoint_at = checkpoint_at as usize;
    if checkpoint_at > 0 && usize::try_from(pages).unwrap_or(0) >= checkpoint_at {
        // SAFETY: `db` and `name` are what SQLite passed this hook, valid for the call; a
        // passive checkpoint from here is what SQLite's own hook does.
        unsafe {
            libsqlite3_sys::sqlite3_wal_checkpoint(db, name);
        }
    }
    libsqlite3_sys::SQLITE_OK
}
