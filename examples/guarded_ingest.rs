//! Guarded ingest: a job fetches a document from a URL in its payload through an egress guard,
//! so a payload cannot make the worker reach internal services (SSRF).
//!
//! - The host is resolved once; every resolved address is checked against a deny list
//!   (loopback, private, link-local with the cloud metadata address 169.254.169.254, CGNAT,
//!   unique-local and link-local IPv6, multicast, unspecified, broadcast, reserved, and the
//!   IPv4 addresses embedded in IPv6), unless an explicit allow-list admits it.
//! - The connection goes to the very address that was checked (the request carries the URL's
//!   Host header), so DNS rebinding cannot redirect it.
//! - Redirects are followed through the same guard, at most 5.
//! - A denied fetch is terminal (`JobError::terminal`): no retry can make it allowed.
//!
//! The HTTP client is a minimal HTTP/1.1 GET over a tokio `TcpStream`, for `http://` only
//! (no TLS, no chunked bodies): https is out of scope for this example.
//!
//! Run with `cargo run --example guarded_ingest`. It serves its documents itself on
//! 127.0.0.1 (allowed explicitly; nothing else is contacted: the denied URLs are refused
//! before any connection) and uses the database `job_example_ingest` on the server named by
//! DATABASE_URL (default `postgres://postgres@127.0.0.1:5432/test`), creating it when missing.

use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use job::prelude::*;
use job::JobState;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Redirects followed at most.
const MAX_REDIRECTS: usize = 5;
/// Largest response accepted, headers included.
const MAX_RESPONSE: usize = 1024 * 1024;

/// Why `ip` must not be contacted, or `None` when it is an ordinary public address.
pub(crate) fn deny_reason(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => deny_reason_v4(v4),
        IpAddr::V6(v6) => deny_reason_v6(v6),
    }
}

fn deny_reason_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "unspecified (0.0.0.0/8)",
        (127, _, _) => "loopback (127.0.0.0/8)",
        (10, _, _) => "private (10.0.0.0/8)",
        (172, 16..=31, _) => "private (172.16.0.0/12)",
        (192, 168, _) => "private (192.168.0.0/16)",
        (169, 254, _) => "link-local (169.254.0.0/16, cloud metadata)",
        (100, 64..=127, _) => "shared CGNAT (100.64.0.0/10)",
        (192, 0, 0) => "IETF protocol assignments (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation (TEST-NET)",
        (198, 18..=19, _) => "benchmarking (198.18.0.0/15)",
        (224..=239, _, _) => "multicast (224.0.0.0/4)",
        (240..=255, _, _) => "reserved or broadcast (240.0.0.0/4)",
        _ => return None,
    })
}

fn deny_reason_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    // An IPv4 address embedded in IPv6 reaches that IPv4 address: judge it as such.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return deny_reason_v4(v4).or(Some("IPv4-mapped (::ffff:0:0/96) is never needed"));
    }
    let embedded = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    Some(match s {
        [0, 0, 0, 0, 0, 0, 0, 0] => "unspecified (::)",
        [0, 0, 0, 0, 0, 0, 0, 1] => "loopback (::1)",
        [0, 0, 0, 0, 0, 0, _, _] => "IPv4-compatible (::/96, deprecated)",
        // NAT64 and 6to4 reach the embedded IPv4 address: only as far as it is public.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] | [0x2002, hi, lo, ..] => {
            return deny_reason_v4(embedded(hi, lo))
        }
        [0x0100, 0, 0, 0, ..] => "discard-only (100::/64)",
        [0x2001, 0..=0x01ff, ..] => "IETF protocol assignments, Teredo (2001::/23)",
        [0x2001, 0x0db8, ..] => "documentation (2001:db8::/32)",
        [x, ..] if x & 0xfe00 == 0xfc00 => "unique-local (fc00::/7)",
        [x, ..] if x & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        [x, ..] if x & 0xffc0 == 0xfec0 => "site-local (fec0::/10, deprecated)",
        [x, ..] if x & 0xff00 == 0xff00 => "multicast (ff00::/8)",
        _ => return None,
    })
}

/// A network `addr/prefix`, for the guard's allow-list.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl std::fmt::Display for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Net {
    /// `addr/prefix`.
    pub(crate) fn new(addr: IpAddr, prefix: u8) -> Self {
        Net { addr, prefix }
    }

    fn contains(&self, ip: IpAddr) -> bool {
        let (net, ip, bits) = match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(i)) => (u32::from(n).into(), u32::from(i).into(), 32),
            (IpAddr::V6(n), IpAddr::V6(i)) => (u128::from(n), u128::from(i), 128),
            _ => return false,
        };
        let prefix = u32::from(self.prefix.min(bits));
        let mask =
            u128::MAX.checked_shl(bits as u32 - prefix).unwrap_or(0) & (u128::MAX >> (128 - bits));
        net & mask == ip & mask
    }
}

/// A boxed future of an I/O result.
pub(crate) type IoFuture<'a, T> = Pin<Box<dyn Future<Output = io::Result<T>> + Send + 'a>>;

/// How the guard reaches the network: resolution and connection. The tests count and check
/// every call; [`System`] is the real thing.
pub(crate) trait Network: Send + Sync + 'static {
    /// Every address of `host`.
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> IoFuture<'a, Vec<SocketAddr>>;
    /// A connection to exactly `addr`.
    fn connect(&self, addr: SocketAddr) -> IoFuture<'_, TcpStream>;
}

/// The operating system's resolver and sockets.
pub(crate) struct System;

impl Network for System {
    fn resolve<'a>(&'a self, host: &'a str, port: u16) -> IoFuture<'a, Vec<SocketAddr>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }

    fn connect(&self, addr: SocketAddr) -> IoFuture<'_, TcpStream> {
        Box::pin(TcpStream::connect(addr))
    }
}

/// Why a fetch failed.
#[derive(Debug)]
pub(crate) enum FetchError {
    /// The guard refused: terminal.
    Denied(String),
    /// The URL or the response is unusable: terminal.
    Invalid(String),
    /// The network or the server failed: worth a retry.
    Transient(String),
}

impl From<FetchError> for JobError {
    fn from(e: FetchError) -> Self {
        match e {
            FetchError::Denied(m) => JobError::terminal(format!("egress denied: {m}")),
            FetchError::Invalid(m) => JobError::terminal(m),
            FetchError::Transient(m) => JobError::retryable(m),
        }
    }
}

/// A fetched document.
#[derive(Debug)]
pub(crate) struct Document {
    /// The URL it was finally served from, after redirects.
    pub(crate) url: String,
    /// Its body.
    pub(crate) body: Vec<u8>,
}

/// Fetches `http://` URLs only from addresses the deny list lets through.
pub(crate) struct EgressGuard {
    allow: Vec<Net>,
    network: Arc<dyn Network>,
    timeout: Duration,
}

impl EgressGuard {
    /// A guard that reaches the network through `network` (in production [`System`]) and
    /// also admits the networks of `allow`.
    pub(crate) fn new(allow: Vec<Net>, network: Arc<dyn Network>) -> Self {
        EgressGuard {
            allow,
            network,
            timeout: Duration::from_secs(10),
        }
    }

    /// Checks one address: allowed explicitly, or not on the deny list.
    pub(crate) fn check(&self, ip: IpAddr) -> Result<(), FetchError> {
        if self.allow.iter().any(|net| net.contains(ip)) {
            return Ok(());
        }
        match deny_reason(ip) {
            Some(reason) => Err(FetchError::Denied(format!("{ip} is {reason}"))),
            None => Ok(()),
        }
    }

    /// GETs `url`, following redirects through the guard.
    pub(crate) async fn fetch(&self, url: &str) -> Result<Document, FetchError> {
        let mut url = Url::parse(url)?;
        for _ in 0..=MAX_REDIRECTS {
            // Resolve once, check every answer, and connect only to a checked address.
            let addrs = self
                .network
                .resolve(&url.host, url.port)
                .await
                .map_err(|e| FetchError::Transient(format!("cannot resolve {}: {e}", url.host)))?;
            if addrs.is_empty() {
                return Err(FetchError::Transient(format!(
                    "{} has no address",
                    url.host
                )));
            }
            for addr in &addrs {
                self.check(addr.ip())?;
            }
            let response = tokio::time::timeout(self.timeout, self.get(addrs[0], &url))
                .await
                .map_err(|_| FetchError::Transient(format!("{url} timed out")))??;
            match response {
                Response::Body(body) => {
                    return Ok(Document {
                        url: url.to_string(),
                        body,
                    })
                }
                Response::Redirect(location) => url = url.join(&location)?,
            }
        }
        Err(FetchError::Invalid(format!(
            "more than {MAX_REDIRECTS} redirects"
        )))
    }

    /// One HTTP/1.1 GET of `url` from `addr`.
    async fn get(&self, addr: SocketAddr, url: &Url) -> Result<Response, FetchError> {
        let transient = |e: io::Error| FetchError::Transient(format!("{url} via {addr}: {e}"));
        let mut stream = self.network.connect(addr).await.map_err(transient)?;
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: job-guarded-ingest\r\nAccept: */*\r\nConnection: close\r\n\r\n",
            url.path,
            url.host_header()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(transient)?;
        let mut raw = Vec::new();
        (&mut stream)
            .take(MAX_RESPONSE as u64 + 1)
            .read_to_end(&mut raw)
            .await
            .map_err(transient)?;
        if raw.len() > MAX_RESPONSE {
            return Err(FetchError::Invalid(format!(
                "{url}: response over {MAX_RESPONSE} bytes"
            )));
        }
        let invalid = |m: &str| FetchError::Invalid(format!("{url}: {m}"));
        let end = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .ok_or_else(|| invalid("no end of headers"))?;
        let head = std::str::from_utf8(&raw[..end]).map_err(|_| invalid("headers not UTF-8"))?;
        let mut lines = head.split("\r\n");
        let status: u16 = lines
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| invalid("bad status line"))?;
        let header = |name: &str| {
            head.split("\r\n").skip(1).find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_owned())
            })
        };
        if header("transfer-encoding").is_some() {
            return Err(invalid("chunked bodies are not supported by this example"));
        }
        let mut body = raw[end + 4..].to_vec();
        if let Some(len) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
            if body.len() < len {
                return Err(FetchError::Transient(format!("{url}: body cut short")));
            }
            body.truncate(len);
        }
        match status {
            200..=299 => Ok(Response::Body(body)),
            301 | 302 | 303 | 307 | 308 => header("location")
                .map(Response::Redirect)
                .ok_or_else(|| invalid("redirect without Location")),
            500..=599 => Err(FetchError::Transient(format!("{url}: status {status}"))),
            _ => Err(invalid(&format!("status {status}"))),
        }
    }
}

enum Response {
    Body(Vec<u8>),
    Redirect(String),
}

/// An `http://host[:port]/path` URL.
#[derive(Clone, Debug)]
struct Url {
    host: String,
    port: u16,
    path: String,
}

impl Url {
    fn parse(url: &str) -> Result<Url, FetchError> {
        let invalid = || FetchError::Invalid(format!("unsupported URL {url:?} (http:// only)"));
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| FetchError::Invalid(format!("{url:?}: only http:// is supported")))?;
        let (authority, path) = rest.find('/').map_or((rest, "/"), |i| rest.split_at(i));
        if authority.contains('@') || path.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(invalid());
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6.split_once(']').ok_or_else(invalid)?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        let port = port.map_or(Ok(80), str::parse).map_err(|_| invalid())?;
        if host.is_empty()
            || !host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-.:".contains(c))
        {
            return Err(invalid());
        }
        Ok(Url {
            host: host.to_ascii_lowercase(),
            port,
            path: path.to_owned(),
        })
    }

    /// The target of a `Location` header: absolute, or a path on this host.
    fn join(&self, location: &str) -> Result<Url, FetchError> {
        if location.starts_with('/') && !location.starts_with("//") {
            Ok(Url {
                path: location.to_owned(),
                ..self.clone()
            })
        } else {
            Url::parse(location)
        }
    }

    fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.host_header(), self.path)
    }
}

/// Fetches the document at `url` through the worker's [`EgressGuard`] and stores it.
#[job(retry = 3, backoff(base = "100ms", cap = "1s"))]
pub(crate) async fn ingest_document(ctx: JobContext, url: String) -> Result<(), JobError> {
    let doc = ctx.state::<EgressGuard>()?.fetch(&url).await?;
    sqlx::query(
        "INSERT INTO ingested_documents (url, final_url, body) VALUES ($1, $2, $3)
         ON CONFLICT (url) DO UPDATE SET final_url = $2, body = $3",
    )
    .bind(&url)
    .bind(&doc.url)
    .bind(String::from_utf8_lossy(&doc.body).into_owned())
    .execute(ctx.state::<PgPool>()?)
    .await?;
    Ok(())
}

/// A tiny HTTP server on 127.0.0.1 for the example and its tests: `/doc` is a document,
/// `/moved` redirects to it, `/to-metadata` redirects to the cloud metadata address and
/// `/loop` redirects to itself. It counts the connections it accepts.
pub(crate) struct DocServer {
    /// Its address.
    pub(crate) addr: SocketAddr,
    /// Connections accepted so far.
    pub(crate) accepted: Arc<AtomicUsize>,
}

/// The body of `/doc`.
pub(crate) const DOC: &str = "Quarterly report: all systems nominal.\n";

impl DocServer {
    /// Starts serving on an ephemeral port of 127.0.0.1.
    pub(crate) async fn start() -> io::Result<DocServer> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let accepted = Arc::new(AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let mut len = 0;
                    while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") && len < buf.len() {
                        match stream.read(&mut buf[len..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => len += n,
                        }
                    }
                    let head = String::from_utf8_lossy(&buf[..len]);
                    let path = head.split(' ').nth(1).unwrap_or("/");
                    let response = match path {
                        "/doc" => format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{DOC}",
                            DOC.len()
                        ),
                        "/moved" => redirect("/doc"),
                        "/to-metadata" => redirect("http://169.254.169.254/latest/meta-data/"),
                        "/loop" => redirect("/loop"),
                        _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned(),
                    };
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Ok(DocServer { addr, accepted })
    }

    /// `http://127.0.0.1:port{path}`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Connections accepted so far.
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

fn redirect(location: &str) -> String {
    format!("HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
}

/// One ingest of the example: its URL, what should happen, and what did.
#[derive(Debug)]
pub(crate) struct Case {
    /// The URL in the job's payload.
    pub(crate) url: String,
    /// The state the job must end in.
    pub(crate) expected: JobState,
    /// Connections the demo server must accept for it.
    pub(crate) expected_connections: usize,
    /// The job's final state.
    pub(crate) state: JobState,
    /// Attempts it took.
    pub(crate) attempts: i32,
    /// Its last error's class (`terminal` for a refusal), if any.
    pub(crate) error_class: Option<String>,
    /// Its last error, if any.
    pub(crate) error: Option<String>,
    /// Connections the demo server accepted for it.
    pub(crate) connections: usize,
}

impl Case {
    /// Whether it ended as expected, on one attempt (a refusal is terminal), with the
    /// expected connections.
    pub(crate) fn held(&self) -> bool {
        let terminal =
            self.expected != JobState::Discarded || self.error_class.as_deref() == Some("terminal");
        terminal
            && self.state == self.expected
            && self.attempts == 1
            && self.connections == self.expected_connections
    }
}

/// Serves the demo documents on 127.0.0.1, then runs one ingest job per case, one at a time,
/// through a guard on `network` that admits only 127.0.0.1 (the demo server), and reports
/// each outcome.
pub(crate) async fn run(
    pool: &PgPool,
    network: Arc<dyn Network>,
) -> Result<Vec<Case>, Box<dyn std::error::Error>> {
    let jobs = PgStore::new(pool.clone());
    jobs.migrate().await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS ingested_documents (
             url text PRIMARY KEY, final_url text NOT NULL, body text NOT NULL)",
    )
    .execute(pool)
    .await?;
    let server = DocServer::start().await?;
    let port = server.addr.port();
    let allow = vec![Net::new(Ipv4Addr::LOCALHOST.into(), 32)];
    println!(
        "demo server on {}; the guard admits {} besides public addresses",
        server.addr, allow[0]
    );
    let worker = Worker::builder(jobs.clone())
        .register::<IngestDocument>()
        .queue("default", 1)
        .poll_interval(Duration::from_millis(50))
        .state(EgressGuard::new(allow, network))
        .state(pool.clone())
        .build()?
        .start();

    use JobState::{Completed, Discarded};
    let plan = [
        (server.url("/doc"), Completed, 1),
        (server.url("/moved"), Completed, 2),
        (
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            Discarded,
            0,
        ),
        ("http://10.0.0.1/internal".to_owned(), Discarded, 0),
        (format!("http://[::1]:{port}/doc"), Discarded, 0),
        (
            format!("http://[::ffff:169.254.169.254]:{port}/"),
            Discarded,
            0,
        ),
        (server.url("/to-metadata"), Discarded, 1),
        (server.url("/loop"), Discarded, MAX_REDIRECTS + 1),
    ];
    let mut cases = Vec::new();
    for (url, expected, expected_connections) in plan {
        let before = server.accepted();
        let id = IngestDocument { url: url.clone() }.enqueue(pool).await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let row = loop {
            let row = jobs.get(id).await?.ok_or("the job vanished")?;
            if row.state.is_terminal() {
                break row;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(format!("job {id} did not finish within 30 seconds").into());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let case = Case {
            url,
            expected,
            expected_connections,
            state: row.state,
            attempts: row.attempt,
            error_class: row.errors.last().map(|e| e.class.clone()),
            error: row.errors.last().map(|e| e.message.clone()),
            connections: server.accepted() - before,
        };
        println!(
            "{:<4} {:<48} {:<9} attempts {} connections {}{}",
            if case.held() { "ok" } else { "FAIL" },
            case.url,
            case.state,
            case.attempts,
            case.connections,
            case.error
                .as_ref()
                .map_or(String::new(), |e| format!("  ({e})"))
        );
        cases.push(case);
    }
    worker.shutdown().await;
    Ok(cases)
}

#[path = "support/db.rs"]
mod db;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let url = db::ensure_database(&server, "job_example_ingest").await?;
    let pool = PgPoolOptions::new()
        .max_connections(5)
        .connect(&url)
        .await?;
    let cases = run(&pool, Arc::new(System)).await?;
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM ingested_documents WHERE body = $1")
        .bind(DOC)
        .fetch_one(&pool)
        .await?;
    if !cases.iter().all(Case::held) || stored < 2 {
        return Err("the egress guard did not keep its promise".into());
    }
    println!("ok: allowed documents ingested, every denied fetch refused before connecting, never retried");
    Ok(())
}
