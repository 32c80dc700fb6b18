//! Graceful shutdown on the signals containers and service managers send: SIGTERM (Docker,
//! Kubernetes, systemd) and SIGINT (ctrl-c).

use std::future::Future;

use super::builder::Worker;
use super::run::{DrainReport, WorkerHandle};
use crate::contract::store::Store;

/// Completes when the process receives SIGTERM or SIGINT (ctrl-c); elsewhere than on Unix,
/// on ctrl-c. The handlers are installed when this is called, not when it is first polled, so
/// a signal that arrives in between is not lost (and does not kill the process).
///
/// # Panics
///
/// When the signal handlers cannot be installed (no Tokio runtime with signals enabled).
pub fn shutdown_signal() -> impl Future<Output = ()> + Send {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let install = |kind| signal(kind).expect("cannot install a signal handler");
        let mut term = install(SignalKind::terminate());
        let mut int = install(SignalKind::interrupt());
        async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::info!(signal = name, "shutdown signal received");
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("ctrl-c received");
        }
    }
}

impl<S: Store> Worker<S> {
    /// Starts the worker and runs it until SIGTERM or ctrl-c, then drains (see
    /// [`WorkerHandle::shutdown`]): what a process under Docker, Kubernetes or systemd wants.
    /// Exit the process once this returns.
    pub async fn run_until_signal(self) -> DrainReport {
        let signal = shutdown_signal();
        self.run_until(signal).await
    }
}

impl WorkerHandle {
    /// Waits for SIGTERM or ctrl-c, then drains (see [`shutdown`](Self::shutdown)).
    pub async fn shutdown_on_signal(self) -> DrainReport {
        shutdown_signal().await;
        self.shutdown().await
    }
}
