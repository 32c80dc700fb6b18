//! The `prometheus` example's promise against real PostgreSQL: its endpoint serves the
//! framework's metrics (one scrape, read as Prometheus reads it), and a SIGTERM sent to the
//! process drains the worker instead of killing it.

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/prometheus.rs"]
mod example;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use job_testkit::TestDb;

/// One `GET /metrics` over plain HTTP/1.1; the body, or `None` while nothing answers.
fn scrape(addr: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_serves_the_metrics_and_sigterm_drains_the_worker() {
    let db = TestDb::new().await;
    let addr = {
        let free = TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap()
    };
    example::serve_metrics(addr).unwrap();
    // Installed before anything runs: SIGTERM now drains the worker, and does not kill this
    // test's process.
    let stop = job::shutdown_signal();
    let pool = db.pool();
    let worker = tokio::spawn(async move { example::run(&pool, stop).await.unwrap() });

    // Scrape until the run has shown every kind of signal: outcomes with owners, the dead
    // letter from the reporter, the slots.
    let wanted = [
        r#"job_finished_total{queue="billing",kind="example.charge",owner="billing",outcome="retried",class="error"} 2"#,
        r#"job_finished_total{queue="billing",kind="example.charge",owner="billing",outcome="discarded",class="terminal"} 1"#,
        r#"job_finished_total{queue="reports",kind="example.report",owner="analytics",outcome="completed",class="none"} 3"#,
        // The retried charges too: a retry runs again only once the stager has made it due,
        // which can come after everything else here.
        r#"job_finished_total{queue="billing",kind="example.charge",owner="billing",outcome="completed",class="none"} 4"#,
        r#"job_dead_letters{queue="billing",kind="example.charge",owner="billing"} 1"#,
        r#"job_free_slots{queue="reports"} 2"#,
        "job_reporter_leader 1",
        "# TYPE job_queue_wait_seconds histogram",
    ];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let body = loop {
        let body = tokio::task::spawn_blocking(move || scrape(addr))
            .await
            .unwrap();
        if let Some(body) = body.filter(|b| wanted.iter().all(|w| b.contains(w))) {
            break body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the scrape never showed all of {wanted:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(body.contains("# HELP job_started_total Attempts whose handler started"));
    assert!(!worker.is_finished());

    // A real SIGTERM to this process: the worker drains and `run` returns its report.
    let status = std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let report = tokio::time::timeout(Duration::from_secs(20), worker)
        .await
        .expect("SIGTERM stopped the worker")
        .unwrap();
    assert!(report.finished_in_time);
    assert_eq!(report.abandoned, 0);
    assert_eq!(report.stats.completed, 7, "{:?}", report.stats);
    db.close().await;
}
