//! The LISTEN task: forwards `job_insert` notifications (a queue name each) as wake-ups.

use std::time::Duration;

use job_core::Wakeups;
use sqlx::postgres::PgListener;
use sqlx::PgPool;
use tokio::sync::mpsc;

use crate::error::Error;
use crate::pool::{pool_options, ACQUIRE_TIMEOUT, POOL_CHECK_TIMEOUT};

/// The channel the insert trigger, release and rescue notify, with the queue as payload.
pub const CHANNEL: &str = "job_insert";

/// How many wake-ups may wait unread; more are dropped (they are hints: workers also poll).
const CAPACITY: usize = 256;

/// How long connecting a listener and its `LISTEN` may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Backoff between reconnection attempts, doubling up to the max.
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// How long the LISTEN connection may go without a notification before it is checked: 30
/// seconds (see [`PgStore::with_listen_check`](crate::PgStore::with_listen_check)).
pub const LISTEN_CHECK: Duration = Duration::from_secs(30);

/// Connects a listener on [`CHANNEL`] and spawns the task that forwards its notifications. The
/// task reconnects (with a short backoff) when the connection drops, and ends when the
/// receiver is dropped or `pool` is closed. Notifications sent while it was disconnected
/// are lost: once it listens again it wakes every queue (an empty name), so that the jobs
/// enqueued meanwhile are claimed then, not at the workers' next poll.
///
/// A connection that goes silent (its server's host vanished, a firewall dropped the flow)
/// never fails, and a listener on it would hear nothing for ever: after `check` without a
/// notification the task sends a statement through it, and a connection that does not answer
/// within [`POOL_CHECK_TIMEOUT`] is given up and replaced.
pub(crate) async fn listen(pool: &PgPool, check: Duration) -> Result<Wakeups, Error> {
    let listener = connect(pool).await?;
    let (tx, rx) = mpsc::channel(CAPACITY);
    tokio::spawn(forward(pool.clone(), listener, tx, check));
    Ok(rx)
}

/// A listener on a pool of its own (one connection, made with `pool`'s options): when it is
/// given up, sqlx sends `UNLISTEN` on its connection before giving it back, which on a silent
/// connection waits as long as the kernel keeps the socket. Only that pool's slot waits, never
/// one of the store's.
/// Bounded by [`CONNECT_TIMEOUT`]: a new connection can go silent too. Its acquires, and so
/// the listener's own reconnections, by [`ACQUIRE_TIMEOUT`]: sqlx spaces its retries of a
/// refused connection by up to a fifth of it, and the listener listens again within about a
/// second of a restarted server's return.
async fn connect(pool: &PgPool) -> Result<PgListener, Error> {
    let own = pool_options()
        .max_connections(1)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_lazy_with((*pool.connect_options()).clone());
    let connect = async {
        let mut listener = PgListener::connect_with(&own)
            .await
            .map_err(Error::Connect)?;
        listener
            .listen(CHANNEL)
            .await
            .map_err(Error::query("listen"))?;
        Ok(listener)
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(connected) => connected,
        Err(_) => Err(Error::Connect(crate::pool::timed_out(format!(
            "the listener could not connect and listen within {CONNECT_TIMEOUT:?}"
        )))),
    }
}

/// What a statement sent through the listener found.
enum Check {
    Answered,
    /// It failed: the connection was lost (the next receive reconnects).
    Failed(sqlx::Error),
    /// No answer within [`POOL_CHECK_TIMEOUT`].
    Silent,
}

/// Sends a statement through the listener (connecting and listening again first when its
/// connection was lost: sqlx's `PgListener` is an executor, and keeps its channels).
async fn check(listener: &mut PgListener) -> Check {
    match tokio::time::timeout(
        POOL_CHECK_TIMEOUT,
        sqlx::query("SELECT 1").execute(&mut *listener),
    )
    .await
    {
        Ok(Ok(_)) => Check::Answered,
        Ok(Err(error)) => Check::Failed(error),
        Err(_) => Check::Silent,
    }
}

async fn forward(
    pool: PgPool,
    mut listener: PgListener,
    tx: mpsc::Sender<String>,
    quiet: Duration,
) {
    let closed = pool.close_event();
    tokio::pin!(closed);
    let mut retry = RETRY_MIN;
    // The connection failed and the listener may not listen yet: a statement through it
    // connects and listens again, so that every queue is woken as soon as it does, not at
    // the next notification. A connection found dead here is replaced by the receive that
    // follows.
    let mut lost = false;
    loop {
        // Checked after a failure, and after `quiet` without a notification.
        let mut silent = false;
        if lost {
            let checked = tokio::select! {
                () = tx.closed() => return,
                () = &mut closed => return,
                checked = check(&mut listener) => checked,
            };
            match checked {
                Check::Answered => {
                    lost = false;
                    retry = RETRY_MIN;
                    if !wake_every_queue(&tx) {
                        return;
                    }
                }
                Check::Failed(_) => {}
                Check::Silent => silent = true,
            }
        }
        if !silent {
            let received = tokio::select! {
                () = tx.closed() => return,
                () = &mut closed => return,
                received = tokio::time::timeout(quiet, listener.try_recv()) => received,
            };
            match received {
                Ok(Ok(Some(notification))) => {
                    retry = RETRY_MIN;
                    // A full channel already holds wake-ups the worker has yet to read: drop
                    // this one.
                    if let Err(mpsc::error::TrySendError::Closed(_)) =
                        tx.try_send(notification.payload().to_owned())
                    {
                        return;
                    }
                }
                // The connection was lost, and sqlx's listener (eager to reconnect) has
                // connected and listens again: what was sent meanwhile is lost.
                Ok(Ok(None)) => {
                    tracing::warn!("job listener lost its connection and listens again");
                    lost = false;
                    if !wake_every_queue(&tx) {
                        return;
                    }
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, ?retry, "job listener could not reconnect, retrying");
                    tokio::select! {
                        () = tx.closed() => return,
                        () = &mut closed => return,
                        () = tokio::time::sleep(retry) => {}
                    }
                    retry = (retry * 2).min(RETRY_MAX);
                    lost = true;
                }
                // Quiet for `quiet`: a silent connection looks just like this.
                Err(_) => {
                    let checked = tokio::select! {
                        () = tx.closed() => return,
                        () = &mut closed => return,
                        checked = check(&mut listener) => checked,
                    };
                    match checked {
                        // The quiet spell may have cut short sqlx's own reconnection inside
                        // the receive, and the check connected and listened again: what was
                        // sent meanwhile is lost. Waking every queue costs one claim per
                        // queue per quiet spell.
                        Check::Answered => {
                            if !wake_every_queue(&tx) {
                                return;
                            }
                        }
                        Check::Failed(error) => {
                            tracing::warn!(%error, "job listener's connection failed its check");
                            lost = true;
                        }
                        Check::Silent => silent = true,
                    }
                }
            }
        }
        if silent {
            tracing::warn!(
                "job listener's connection did not answer within {POOL_CHECK_TIMEOUT:?} (the \
                 server is down or restarting, or it or the network went silent): replacing it"
            );
            listener = loop {
                let connected = tokio::select! {
                    () = tx.closed() => return,
                    () = &mut closed => return,
                    connected = connect(&pool) => connected,
                };
                match connected {
                    Ok(fresh) => break fresh,
                    Err(error) => {
                        tracing::warn!(%error, ?retry, "job listener could not reconnect, retrying");
                        tokio::select! {
                            () = tx.closed() => return,
                            () = &mut closed => return,
                            () = tokio::time::sleep(retry) => {}
                        }
                        retry = (retry * 2).min(RETRY_MAX);
                    }
                }
            };
            retry = RETRY_MIN;
            lost = false;
            if !wake_every_queue(&tx) {
                return;
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
