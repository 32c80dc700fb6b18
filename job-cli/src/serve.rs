//! How `job web` serves the dashboard: hyper's HTTP/1 connections, each bounded in how long its
//! client may take to send a request's headers or leave it idle, and at most
//! [`CONNECTIONS`] of them open at once.
//!
//! `axum::serve` sets neither bound: a client that sent part of a request's headers and then
//! nothing held its connection for as long as it liked, and one that opened connections by the
//! thousand took every file descriptor of the process, so that nobody else reached the
//! dashboard (a review's probe, without logging in). Written with hyper's own connection
//! builder, as axum's documentation shows for a server that needs hyper's settings; what it
//! adds is the two bounds and a shutdown that lets requests under way finish.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::Service;

/// The most connections served at once. The next ones wait in the listener's backlog until one
/// closes; a connection left idle or half-sent closes within [`HEADER_TIMEOUT`].
pub(crate) const CONNECTIONS: usize = 256;

/// How long a client may take to send a request's headers, and how long a connection may stay
/// idle between requests, before it is closed (hyper's `header_read_timeout`).
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the requests under way may take to finish once ctrl-c asked the server to stop.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How long to wait after an accept failed (out of file descriptors, say) before the next.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until ctrl-c.
pub(crate) async fn serve(listener: TcpListener, router: axum::Router) -> std::io::Result<()> {
    let mut make = router.into_make_service_with_connect_info::<SocketAddr>();
    let slots = Arc::new(Semaphore::new(CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT);
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            _ = &mut stop => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "job web: a connection could not be accepted");
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let service = match make.call(peer).await {
            Ok(service) => service,
            Err(never) => match never {},
        };
        let connection = graceful
            .watch(http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service)));
        tokio::spawn(async move {
            // A client that went away or sent what is not HTTP ends its connection only.
            let _ = connection.await;
            drop(slot);
        });
    }
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {}
    }
    Ok(())
}
