//! Guarded ingest: a job fetches a document from a URL in its payload through an egress guard,
//! so a payload cannot make the worker reach internal services (SSRF).
//!
//! - The client is `reqwest` (HTTP/1.1 over plain TCP or TLS with rustls: `http://` and
//!   `https://`), with the guard as its DNS resolver: every address a name resolves to is
//!   checked against a deny list (loopback, private, link-local with the cloud metadata address
//!   169.254.169.254, CGNAT, unique-local and link-local IPv6, multicast, unspecified,
//!   broadcast, reserved, and the IPv4 addresses embedded in IPv6; ranges from `ipnet`), unless
//!   an explicit allow-list admits it; one denied answer refuses the whole name.
//! - The connection goes to the very addresses the resolver checked and returned (reqwest does
//!   not look the name up again, and idle connections are not kept), so DNS rebinding cannot
//!   redirect it. An IP literal in a URL, which reqwest connects to without a lookup, is
//!   checked before the request.
//! - Redirects are followed through the same guard, at most 5: the redirect policy checks each
//!   hop's scheme and IP literal, the resolver each hop's name.
//! - No proxy is ever used (a proxy would resolve the name itself), and a response is read up
//!   to 1 MiB.
//! - A denied fetch is terminal (`JobError::terminal`): no retry can make it allowed.
//!
//! Run with `cargo run --example guarded_ingest`. It serves its documents itself on
//! 127.0.0.1 (allowed explicitly; nothing else is contacted: the denied URLs are refused
//! before any connection) and uses the database `job_example_ingest` on the server named by
//! DATABASE_URL (default `postgres://postgres@127.0.0.1:5432/test`), creating it when missing.

use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use ipnet::IpNet;
use job::prelude::*;
use job::JobState;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::{redirect, Url};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Redirects followed at most.
const MAX_REDIRECTS: usize = 5;
/// Largest body accepted.
const MAX_RESPONSE: usize = 1024 * 1024;

/// Addresses never contacted, with why. The first range that holds an address names it.
static DENY: LazyLock<Vec<(IpNet, &'static str)>> = LazyLock::new(|| {
    [
        ("0.0.0.0/8", "unspecified (0.0.0.0/8)"),
        ("127.0.0.0/8", "loopback (127.0.0.0/8)"),
        ("10.0.0.0/8", "private (10.0.0.0/8)"),
        ("172.16.0.0/12", "private (172.16.0.0/12)"),
        ("192.168.0.0/16", "private (192.168.0.0/16)"),
        (
            "169.254.0.0/16",
            "link-local (169.254.0.0/16, cloud metadata)",
        ),
        ("100.64.0.0/10", "shared CGNAT (100.64.0.0/10)"),
        ("192.0.0.0/24", "IETF protocol assignments (192.0.0.0/24)"),
        ("192.0.2.0/24", "documentation (TEST-NET-1)"),
        ("198.51.100.0/24", "documentation (TEST-NET-2)"),
        ("203.0.113.0/24", "documentation (TEST-NET-3)"),
        ("198.18.0.0/15", "benchmarking (198.18.0.0/15)"),
        ("224.0.0.0/4", "multicast (224.0.0.0/4)"),
        ("240.0.0.0/4", "reserved or broadcast (240.0.0.0/4)"),
        ("::/128", "unspecified (::)"),
        ("::1/128", "loopback (::1)"),
        ("::/96", "IPv4-compatible (::/96, deprecated)"),
        ("100::/64", "discard-only (100::/64)"),
        ("2001:db8::/32", "documentation (2001:db8::/32)"),
        ("2001::/23", "IETF protocol assignments, Teredo (2001::/23)"),
        ("fc00::/7", "unique-local (fc00::/7)"),
        ("fe80::/10", "link-local (fe80::/10)"),
        ("fec0::/10", "site-local (fec0::/10, deprecated)"),
        ("ff00::/8", "multicast (ff00::/8)"),
    ]
    .into_iter()
    .map(|(net, why)| (net.parse().expect("a valid range"), why))
    .collect()
});

/// IPv6 ranges that reach an IPv4 address embedded in their last 32 bits: judged by it.
static EMBEDDING_V4: LazyLock<Vec<IpNet>> = LazyLock::new(|| {
    ["64:ff9b::/96", "2002::/16"]
        .into_iter()
        .map(|net| net.parse().expect("a valid range"))
        .collect()
});

/// Why `ip` must not be contacted, or `None` when it is an ordinary public address.
pub(crate) fn deny_reason(ip: IpAddr) -> Option<&'static str> {
    if let IpAddr::V6(v6) = ip {
        // An IPv4 address embedded in IPv6 reaches that IPv4 address: judge it as such.
        if let Some(v4) = v6.to_ipv4_mapped() {
            return deny_reason(v4.into()).or(Some("IPv4-mapped (::ffff:0:0/96) is never needed"));
        }
        if let Some(net) = EMBEDDING_V4.iter().find(|net| net.contains(&ip)) {
            return deny_reason(embedded_v4(v6, net.prefix_len()).into());
        }
    }
    DENY.iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|&(_, why)| why)
}

/// The IPv4 address in a NAT64 address (its last 32 bits) or a 6to4 one (the 32 after /16).
fn embedded_v4(ip: Ipv6Addr, prefix: u8) -> Ipv4Addr {
    let bits = u128::from(ip);
    let shift = if prefix == 16 { 80 } else { 0 };
    Ipv4Addr::from(((bits >> shift) & 0xffff_ffff) as u32)
}

/// A boxed future of an I/O result.
pub(crate) type IoFuture<'a, T> = Pin<Box<dyn Future<Output = io::Result<T>> + Send + 'a>>;

/// How the guard looks names up. The tests answer from a table and record every lookup;
/// [`System`] is the real thing.
pub(crate) trait Lookup: Send + Sync + 'static {
    /// Every address of `host`.
    fn lookup<'a>(&'a self, host: &'a str) -> IoFuture<'a, Vec<IpAddr>>;
}

/// The operating system's resolver.
pub(crate) struct System;

impl Lookup for System {
    fn lookup<'a>(&'a self, host: &'a str) -> IoFuture<'a, Vec<IpAddr>> {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host, 0))
                .await?
                .map(|a| a.ip())
                .collect())
        })
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

/// A refusal raised inside reqwest (by the resolver or the redirect policy), found again in
/// the error's chain of sources.
#[derive(Debug)]
struct Refused(FetchError);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            FetchError::Denied(m) | FetchError::Invalid(m) | FetchError::Transient(m) => {
                f.write_str(m)
            }
        }
    }
}

impl StdError for Refused {}

/// A fetched document.
#[derive(Debug)]
pub(crate) struct Document {
    /// The URL it was finally served from, after redirects.
    pub(crate) url: String,
    /// Its body.
    pub(crate) body: Vec<u8>,
}

/// The guard's rules: the allow-list over the deny list.
struct Rules {
    allow: Vec<IpNet>,
}

impl Rules {
    fn check(&self, ip: IpAddr) -> Result<(), FetchError> {
        if self.allow.iter().any(|net| net.contains(&ip)) {
            return Ok(());
        }
        match deny_reason(ip) {
            Some(reason) => Err(FetchError::Denied(format!("{ip} is {reason}"))),
            None => Ok(()),
        }
    }

    /// Checks what can be checked of a URL before any lookup: its scheme, no credentials, and
    /// its host when it is an IP literal (reqwest connects to those without a lookup).
    fn check_url(&self, url: &Url) -> Result<(), FetchError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(FetchError::Invalid(format!(
                "{url}: only http:// and https:// are fetched"
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(FetchError::Invalid(format!("{url}: credentials in a URL")));
        }
        match url.host() {
            Some(url::Host::Ipv4(ip)) => self.check(ip.into()),
            Some(url::Host::Ipv6(ip)) => self.check(ip.into()),
            Some(url::Host::Domain(_)) => Ok(()),
            None => Err(FetchError::Invalid(format!("{url}: no host"))),
        }
    }
}

/// The client's DNS resolver: looks the name up, and answers only when every address passes.
struct GuardedResolver {
    rules: Arc<Rules>,
    lookup: Arc<dyn Lookup>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let (rules, lookup) = (self.rules.clone(), self.lookup.clone());
        Box::pin(async move {
            let host = name.as_str();
            let ips = lookup.lookup(host).await.map_err(|e| {
                Refused(FetchError::Transient(format!("cannot resolve {host}: {e}")))
            })?;
            if ips.is_empty() {
                return Err(
                    Refused(FetchError::Transient(format!("{host} has no address"))).into(),
                );
            }
            for ip in &ips {
                rules.check(*ip).map_err(Refused)?;
            }
            // The port is the URL's: reqwest sets it on each address.
            let addrs: Addrs = Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

/// Fetches `http://` and `https://` URLs from addresses the deny list lets through.
pub(crate) struct EgressGuard {
    rules: Arc<Rules>,
    client: reqwest::Client,
}

impl EgressGuard {
    /// A guard that looks names up through `lookup` (in production [`System`]) and also
    /// admits the networks of `allow`.
    pub(crate) fn new(allow: Vec<IpNet>, lookup: Arc<dyn Lookup>) -> Self {
        // reqwest is built without a crypto provider of its own: ring is this process's.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let rules = Arc::new(Rules { allow });
        let hops = rules.clone();
        let policy = redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > MAX_REDIRECTS {
                let error = FetchError::Invalid(format!("more than {MAX_REDIRECTS} redirects"));
                return attempt.error(Refused(error));
            }
            match hops.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(e) => attempt.error(Refused(e)),
            }
        });
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(GuardedResolver {
                rules: rules.clone(),
                lookup,
            }))
            .redirect(policy)
            .no_proxy()
            // A new connection, so a new checked lookup, for every request.
            .pool_max_idle_per_host(0)
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .user_agent("job-guarded-ingest")
            .build()
            .expect("a client with a crypto provider");
        EgressGuard { rules, client }
    }

    /// Checks one address: allowed explicitly, or not on the deny list.
    #[allow(dead_code)] // the tests' window on the rules
    pub(crate) fn check(&self, ip: IpAddr) -> Result<(), FetchError> {
        self.rules.check(ip)
    }

    /// GETs `url`, following redirects through the guard.
    pub(crate) async fn fetch(&self, url: &str) -> Result<Document, FetchError> {
        let url = Url::parse(url)
            .map_err(|e| FetchError::Invalid(format!("unsupported URL {url:?}: {e}")))?;
        self.rules.check_url(&url)?;
        let mut response = self
            .client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| classify(&url, e))?;
        let status = response.status();
        let served = response.url().to_string();
        if status.is_server_error() {
            return Err(FetchError::Transient(format!("{served}: status {status}")));
        }
        if !status.is_success() {
            return Err(FetchError::Invalid(format!("{served}: status {status}")));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| classify(&url, e))? {
            if body.len() + chunk.len() > MAX_RESPONSE {
                return Err(FetchError::Invalid(format!(
                    "{served}: response over {MAX_RESPONSE} bytes"
                )));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Document { url: served, body })
    }
}

/// What a reqwest error means for the job: a refusal of the guard's (found in the chain of
/// sources), else a transient failure of the network or the server.
fn classify(url: &Url, error: reqwest::Error) -> FetchError {
    let mut source: Option<&(dyn StdError + 'static)> = Some(&error);
    while let Some(e) = source {
        if let Some(Refused(refusal)) = e.downcast_ref::<Refused>() {
            return match refusal {
                FetchError::Denied(m) => FetchError::Denied(m.clone()),
                FetchError::Invalid(m) => FetchError::Invalid(m.clone()),
                FetchError::Transient(m) => FetchError::Transient(m.clone()),
            };
        }
        source = e.source();
    }
    FetchError::Transient(format!("{url}: {error}"))
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
/// `/loop` redirects to itself. It counts the connections it accepts. (Hand-written on
/// purpose: four fixed answers over a loopback socket, where a server crate would add a
/// dependency and hide the connection count the tests rely on.)
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
/// through a guard looking names up with `lookup` that admits only 127.0.0.1 (the demo server), and reports
/// each outcome.
pub(crate) async fn run(
    pool: &PgPool,
    lookup: Arc<dyn Lookup>,
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
    let allow = vec![IpNet::new(Ipv4Addr::LOCALHOST.into(), 32)?];
    println!(
        "demo server on {}; the guard admits {} besides public addresses",
        server.addr, allow[0]
    );
    let worker = Worker::builder(jobs.clone())
        .register::<IngestDocument>()
        .queue("default", 1)
        .poll_interval(Duration::from_millis(50))
        .state(EgressGuard::new(allow, lookup))
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
    let options = db::ensure_database(&server, "job_example_ingest").await?;
    let pool = job::pool_options()
        .max_connections(5)
        .connect_with(options)
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
