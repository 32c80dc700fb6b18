//! A TCP proxy that makes connections go silent, as when a server's host vanishes or a
//! firewall drops a flow: no reset, no error, no answer. Shared by the test binaries that
//! need it (`#[path]`).
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A TCP proxy in front of the test's server. [`Blackhole::silence`] makes every connection
/// open at that moment go silent for good: its bytes are neither forwarded nor refused, and
/// its sockets stay open (as when a host dies behind a connection the client still holds).
/// Connections opened afterwards are forwarded as before (the server came back, or a standby
/// took its address).
///
/// The server's end of a silenced connection stays open too, unless the proxy was started
/// [`with_server_verdict`](Blackhole::with_server_verdict): then it is closed that long after
/// the silence, as the server's own TCP keepalive closes a session whose client it can no
/// longer reach (the sessions of `pool_options()` pools ask for it after about 25 s), ending
/// its transaction and releasing its locks. The client's end stays silent.
pub struct Blackhole {
    port: u16,
    generation: Arc<AtomicU64>,
    options: PgConnectOptions,
}

impl Blackhole {
    /// A proxy to the server `options` name; [`Blackhole::options`] connect through it.
    pub async fn start(options: &PgConnectOptions) -> Blackhole {
        Blackhole::start_with(options, None).await
    }

    /// A proxy whose silenced connections are closed at the server's end after `verdict`.
    pub async fn with_server_verdict(options: &PgConnectOptions, verdict: Duration) -> Blackhole {
        Blackhole::start_with(options, Some(verdict)).await
    }

    async fn start_with(options: &PgConnectOptions, verdict: Option<Duration>) -> Blackhole {
        let upstream = (options.get_host().to_owned(), options.get_port());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let generation = Arc::new(AtomicU64::new(0));
        let current = generation.clone();
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let Ok(server) = TcpStream::connect((upstream.0.as_str(), upstream.1)).await else {
                    continue;
                };
                let born = current.load(Ordering::SeqCst);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                // The server's end: its write half is shut down on the verdict (the server
                // reads the end of its client and ends the session).
                tokio::spawn(pipe(
                    client_read,
                    server_write,
                    born,
                    current.clone(),
                    verdict,
                ));
                tokio::spawn(pipe(server_read, client_write, born, current.clone(), None));
            }
        });
        Blackhole {
            port,
            generation,
            options: options.clone(),
        }
    }

    /// Options that connect to the same database through the proxy.
    pub fn options(&self) -> PgConnectOptions {
        self.options.clone().host("127.0.0.1").port(self.port)
    }

    /// Every connection open now goes silent for good.
    pub fn silence(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

/// Forwards bytes until the connection's generation has passed, then holds both halves open
/// for ever without reading or writing; with `close_to_after`, `to` is shut down after it.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    born: u64,
    current: Arc<AtomicU64>,
    close_to_after: Option<Duration>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let silenced = async {
            while current.load(Ordering::SeqCst) == born {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let n = tokio::select! {
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            () = silenced => break,
        };
        if current.load(Ordering::SeqCst) != born {
            break;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
    // Silent: keep the sockets, never touch them again (but the verdict).
    if let Some(after) = close_to_after {
        tokio::time::sleep(after).await;
        let _ = to.shutdown().await;
    }
    std::future::pending::<()>().await;
    drop((from, to));
}
