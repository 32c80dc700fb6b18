//! The LISTEN task: forwards `job_insert` notifications (a queue name each) as wake-ups.

use std::time::Duration;

use job_core::Wakeups;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::mpsc;

use crate::error::Error;

/// The channel the insert trigger, release and rescue notify, with the queue as payload.
pub const CHANNEL: &str = "job_insert";

/// How many wake-ups may wait unread; more are dropped (they are hints: workers also poll).
const CAPACITY: usize = 256;

/// Backoff between reconnection attempts, doubling up to the max.
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// Connects a listener on [`CHANNEL`] and spawns the task that forwards its notifications. The
/// task reconnects (with a short backoff) when the connection drops, and ends when the
/// receiver is dropped or the pool is closed. Notifications sent while it was disconnected
/// are lost: once it listens again it wakes every queue (an empty name), so that the jobs
/// enqueued meanwhile are claimed then, not at the workers' next poll.
pub(crate) async fn listen(pool: &PgPool) -> Result<Wakeups, Error> {
    let mut listener = PgListener::connect_with(pool)
        .await
        .map_err(Error::Connect)?;
    listener
        .listen(CHANNEL)
        .await
        .map_err(Error::query("listen"))?;
    let (tx, rx) = mpsc::channel(CAPACITY);
    tokio::spawn(forward(listener, tx));
    Ok(rx)
}

async fn forward(mut listener: PgListener, tx: mpsc::Sender<String>) {
    let mut retry = RETRY_MIN;
    // The connection failed and the listener may not listen yet: any statement through it
    // connects and listens again (sqlx's `PgListener` is an executor, and keeps its channels),
    // so that every queue is woken as soon as it does, not at the next notification. A
    // connection found dead here is replaced by the receive that follows.
    let mut lost = false;
    loop {
        if lost {
            let tried = tokio::select! {
                () = tx.closed() => return,
                tried = sqlx::query("SELECT 1").execute(&mut listener) => tried,
            };
            match tried {
                Ok(_) => {
                    lost = false;
                    retry = RETRY_MIN;
                    if !wake_every_queue(&tx) {
                        return;
                    }
                }
                Err(sqlx::Error::PoolClosed) => return,
                Err(_) => {}
            }
        }
        let received = tokio::select! {
            () = tx.closed() => return,
            received = listener.try_recv() => received,
        };
        match received {
            Ok(Some(notification)) => {
                retry = RETRY_MIN;
                // A full channel already holds wake-ups the worker has yet to read: drop this one.
                if let Err(mpsc::error::TrySendError::Closed(_)) =
                    tx.try_send(notification.payload().to_owned())
                {
                    return;
                }
            }
            // The connection was lost, and sqlx's listener (eager to reconnect) has connected
            // and listens again: what was sent meanwhile is lost.
            Ok(None) => {
                tracing::warn!("job listener lost its connection and listens again");
                lost = false;
                if !wake_every_queue(&tx) {
                    return;
                }
            }
            // The store is shutting down: give the connection back so the pool can close.
            Err(sqlx::Error::PoolClosed) => return,
            Err(error) => {
                tracing::warn!(%error, ?retry, "job listener could not reconnect, retrying");
                tokio::select! {
                    () = tx.closed() => return,
                    () = tokio::time::sleep(retry) => {}
                }
                retry = (retry * 2).min(RETRY_MAX);
                lost = true;
            }
        }
    }
}

/// Sends the wake-up of every queue (an empty name). False when the receiver is gone.
fn wake_every_queue(tx: &mpsc::Sender<String>) -> bool {
    !matches!(
        tx.try_send(String::new()),
        Err(mpsc::error::TrySendError::Closed(_))
    )
}
