//! The promises of `examples/guarded_ingest.rs`: denied addresses are refused before any
//! connection (the test resolver records every lookup and answers names from a table; the
//! demo server counts every connection it accepts), the connection is pinned to the checked
//! address, redirects are re-checked and bounded, and a refusal is terminal. Nothing here
//! connects anywhere but 127.0.0.1.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};

use example::{deny_reason, DocServer, EgressGuard, FetchError, IoFuture, Lookup, DOC};
use ipnet::IpNet;
use job::JobState;
use job_testkit::TestDb;

#[allow(dead_code)] // the example's `main` and what only it uses
#[path = "../examples/guarded_ingest.rs"]
mod example;

/// A resolver that records every lookup, answers names from a table (a name may answer
/// differently on each lookup, as a rebinding DNS server would), and resolves only IP
/// literals and `localhost` itself (no DNS traffic).
#[derive(Default)]
struct TestLookup {
    names: Mutex<HashMap<String, Vec<Vec<IpAddr>>>>,
    resolved: Mutex<Vec<String>>,
}

impl TestLookup {
    /// `host` answers `answers[0]` on its first lookup, `answers[1]` on the next, ...
    fn answer(self, host: &str, answers: Vec<Vec<IpAddr>>) -> Self {
        self.names.lock().unwrap().insert(host.to_owned(), answers);
        self
    }

    fn resolved(&self) -> Vec<String> {
        self.resolved.lock().unwrap().clone()
    }
}

impl Lookup for TestLookup {
    fn lookup<'a>(&'a self, host: &'a str) -> IoFuture<'a, Vec<IpAddr>> {
        Box::pin(async move {
            self.resolved.lock().unwrap().push(host.to_owned());
            if let Some(answers) = self.names.lock().unwrap().get_mut(host) {
                return Ok(if answers.len() > 1 {
                    answers.remove(0)
                } else {
                    answers[0].clone()
                });
            }
            if host.parse::<IpAddr>().is_ok() || host == "localhost" {
                return Ok(tokio::net::lookup_host((host, 0))
                    .await?
                    .map(|a| a.ip())
                    .collect());
            }
            Err(io::Error::new(io::ErrorKind::NotFound, "unknown test name"))
        })
    }
}

fn net(addr: impl Into<IpAddr>, prefix: u8) -> IpNet {
    IpNet::new(addr.into(), prefix).unwrap()
}

fn guard(allow: Vec<IpNet>) -> (EgressGuard, Arc<TestLookup>) {
    guard_on(allow, TestLookup::default())
}

fn guard_on(allow: Vec<IpNet>, lookup: TestLookup) -> (EgressGuard, Arc<TestLookup>) {
    let lookup = Arc::new(lookup);
    (EgressGuard::new(allow, lookup.clone()), lookup)
}

fn loopback_v4() -> Vec<IpNet> {
    vec![net(Ipv4Addr::LOCALHOST, 8)]
}

fn assert_denied(result: Result<example::Document, FetchError>, what: &str) {
    match result {
        Err(FetchError::Denied(reason)) => println!("{what}: denied: {reason}"),
        other => panic!("{what}: expected a refusal, got {other:?}"),
    }
}

#[test]
fn the_deny_list_classifies_addresses() {
    let denied = [
        "127.0.0.1",
        "127.255.0.9",
        "10.0.0.1",
        "172.16.0.1",
        "172.31.255.255",
        "192.168.1.1",
        "169.254.169.254",
        "169.254.0.1",
        "100.64.0.1",
        "100.127.255.255",
        "0.0.0.0",
        "0.1.2.3",
        "224.0.0.1",
        "239.255.255.250",
        "240.0.0.1",
        "255.255.255.255",
        "192.0.0.170",
        "192.0.2.1",
        "198.18.0.1",
        "203.0.113.5",
        "::",
        "::1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "::ffff:10.0.0.1",
        "::ffff:8.8.8.8",
        "::127.0.0.1",
        "64:ff9b::a9fe:a9fe",
        "2002:a9fe:a9fe::1",
        "fc00::1",
        "fd12:3456::1",
        "fe80::1",
        "febf::1",
        "fec0::1",
        "ff02::1",
        "2001:db8::1",
        "2001::1",
        "100::1",
    ];
    for ip in denied {
        let ip: IpAddr = ip.parse().unwrap();
        assert!(deny_reason(ip).is_some(), "{ip} must be denied");
    }
    let public = [
        "8.8.8.8",
        "1.1.1.1",
        "172.15.255.255",
        "172.32.0.1",
        "100.63.255.255",
        "100.128.0.1",
        "169.253.0.1",
        "192.169.0.1",
        "2606:4700::1111",
        "2a00:1450::1",
        "64:ff9b::808:808",
        "2002:808:808::1",
    ];
    for ip in public {
        let ip: IpAddr = ip.parse().unwrap();
        assert_eq!(deny_reason(ip), None, "{ip} is public");
    }
}

#[test]
fn the_allow_list_admits_only_its_networks() {
    let (guard, _) = guard(vec![
        net(Ipv4Addr::LOCALHOST, 32),
        net(Ipv6Addr::LOCALHOST, 128),
        net(Ipv4Addr::new(10, 1, 0, 0), 16),
    ]);
    for ok in ["127.0.0.1", "::1", "10.1.2.3", "8.8.8.8"] {
        assert!(guard.check(ok.parse().unwrap()).is_ok(), "{ok} is allowed");
    }
    for no in [
        "127.0.0.2",
        "10.2.0.1",
        "169.254.169.254",
        "::ffff:127.0.0.1",
    ] {
        assert!(guard.check(no.parse().unwrap()).is_err(), "{no} is denied");
    }
}

#[tokio::test]
async fn an_allowed_document_is_fetched_and_a_checked_redirect_followed() {
    let server = DocServer::start().await.unwrap();
    let (guard, _) = guard(loopback_v4());

    let doc = guard.fetch(&server.url("/doc")).await.unwrap();
    assert_eq!(doc.body, DOC.as_bytes());
    let moved = guard.fetch(&server.url("/moved")).await.unwrap();
    assert_eq!(moved.body, DOC.as_bytes());
    assert_eq!(moved.url, server.url("/doc"));
    assert_eq!(server.accepted(), 3);
}

#[tokio::test]
async fn denied_addresses_are_refused_before_any_connection() {
    let server = DocServer::start().await.unwrap();
    let port = server.addr.port();
    // Nothing allowed: loopback is denied too.
    let (guard, lookup) = guard(vec![]);
    let urls = [
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "https://169.254.169.254/latest/meta-data/".to_owned(),
        "http://10.0.0.1/".to_owned(),
        "https://10.0.0.1/".to_owned(),
        "http://192.168.0.1:8080/admin".to_owned(),
        "http://100.64.0.1/".to_owned(),
        "http://[fd00::1]/".to_owned(),
        "http://[fe80::1]/".to_owned(),
        "http://[::ffff:169.254.169.254]/".to_owned(),
        "http://255.255.255.255/".to_owned(),
        "http://224.0.0.1/".to_owned(),
        // The URL parser reads these as the addresses they are.
        "http://2852039166/".to_owned(),
        "http://0x7f.1/".to_owned(),
        format!("http://0.0.0.0:{port}/doc"),
        format!("http://[::1]:{port}/doc"),
        format!("http://[::]:{port}/doc"),
        server.url("/doc"),
        // A name that resolves to loopback is judged by its address.
        format!("http://localhost:{port}/doc"),
        format!("http://LOCALHOST:{port}/doc"),
        format!("https://localhost:{port}/doc"),
    ];
    for url in &urls {
        assert_denied(guard.fetch(url).await, url);
    }
    assert_eq!(server.accepted(), 0, "no connection was made");
    assert_eq!(lookup.resolved(), ["localhost", "localhost", "localhost"]);
}

#[tokio::test]
async fn a_redirect_to_a_denied_address_is_refused() {
    let server = DocServer::start().await.unwrap();
    let (guard, _) = guard(loopback_v4());
    assert_denied(
        guard.fetch(&server.url("/to-metadata")).await,
        "redirect to 169.254.169.254",
    );
    assert_eq!(server.accepted(), 1, "only the allowed server");
}

#[tokio::test]
async fn redirects_are_bounded() {
    let server = DocServer::start().await.unwrap();
    let (guard, _) = guard(loopback_v4());
    match guard.fetch(&server.url("/loop")).await {
        Err(FetchError::Invalid(m)) => assert!(m.contains("redirects"), "{m}"),
        other => panic!("expected too many redirects, got {other:?}"),
    }
    assert_eq!(server.accepted(), 6, "the first request and 5 redirects");
}

#[tokio::test]
async fn the_connection_is_pinned_to_the_checked_address() {
    let server = DocServer::start().await.unwrap();
    let port = server.addr.port();
    let metadata = IpAddr::from([169, 254, 169, 254]);
    let loopback = server.addr.ip();
    // A rebinding name: harmless on the first lookup, the metadata address afterwards.
    let lookup = TestLookup::default()
        .answer("rebind.test", vec![vec![loopback], vec![metadata]])
        .answer("mixed.test", vec![vec![loopback, [10, 0, 0, 1].into()]]);
    let (guard, lookup) = guard_on(vec![net(Ipv4Addr::LOCALHOST, 32)], lookup);

    // Looked up once, checked, and connected to that very address.
    let doc = guard
        .fetch(&format!("http://rebind.test:{port}/doc"))
        .await
        .unwrap();
    assert_eq!(doc.body, DOC.as_bytes());
    assert_eq!(lookup.resolved(), ["rebind.test"]);
    assert_eq!(server.accepted(), 1);

    // Now it answers the metadata address: refused, nothing connected.
    assert_denied(
        guard.fetch(&format!("http://rebind.test:{port}/doc")).await,
        "rebound name",
    );
    // One bad answer among good ones refuses the whole name.
    assert_denied(
        guard.fetch(&format!("http://mixed.test:{port}/doc")).await,
        "mixed answers",
    );
    assert_eq!(
        lookup.resolved(),
        ["rebind.test", "rebind.test", "mixed.test"]
    );
    assert_eq!(server.accepted(), 1);
}

#[tokio::test]
async fn urls_the_client_cannot_fetch_safely_are_refused_without_connecting() {
    let server = DocServer::start().await.unwrap();
    let (guard, lookup) = guard(loopback_v4());
    for url in [
        "ftp://127.0.0.1/doc",
        "file:///etc/passwd",
        "http://user@127.0.0.1/doc",
        "http://user:secret@127.0.0.1/doc",
        "http://127.0.0.1:notaport/doc",
        "http://",
        "http://[::1/doc",
    ] {
        match guard.fetch(url).await {
            Err(FetchError::Invalid(m)) => println!("{url}: {m}"),
            other => panic!("{url}: expected invalid, got {other:?}"),
        }
    }
    assert_eq!(lookup.resolved(), Vec::<String>::new());
    assert_eq!(server.accepted(), 0);
}

#[tokio::test]
async fn https_goes_through_the_same_guard() {
    // The demo server speaks plain HTTP: an allowed https:// fetch of it reaches it and
    // fails the TLS handshake (transient), while a denied one never connects.
    let server = DocServer::start().await.unwrap();
    let port = server.addr.port();
    let (guard, _) = guard(vec![net(Ipv4Addr::LOCALHOST, 32)]);
    match guard.fetch(&format!("https://127.0.0.1:{port}/doc")).await {
        Err(FetchError::Transient(m)) => println!("https to a plain server: {m}"),
        other => panic!("expected a failed handshake, got {other:?}"),
    }
    assert_eq!(server.accepted(), 1);
    assert_denied(
        guard.fetch(&format!("https://127.0.0.2:{port}/doc")).await,
        "https to a denied address",
    );
    assert_eq!(server.accepted(), 1);
}

#[tokio::test]
async fn the_example_ingests_allowed_documents_and_discards_denied_ones_at_once() {
    let db = TestDb::new().await;
    let pool = db.pool();
    let lookup = Arc::new(TestLookup::default());
    let cases = example::run(&pool, lookup.clone()).await.unwrap();

    for case in &cases {
        assert!(case.held(), "{case:?}");
    }
    let discarded = cases
        .iter()
        .filter(|c| c.state == JobState::Discarded)
        .count();
    assert_eq!(discarded, 6);
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM ingested_documents WHERE body = $1")
        .bind(DOC)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(stored, 2);
    db.close().await;
}
