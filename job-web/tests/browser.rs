//! The dashboard in a real browser: headless Chromium, driven through chromedriver, logs in,
//! opens the dead letters, redrives one and sees it available; pauses a queue a worker runs and
//! sees the worker stop taking its jobs, then resumes it and sees the job done. With
//! `JOB_WEB_SCREENSHOTS=<dir>` it saves a screenshot of each page there (the README's come
//! from `JOB_WEB_SCREENSHOTS=$PWD/docs/screenshots cargo test -p job-web --test browser`,
//! run at the workspace root).
//!
//! Needs Debian's `chromium` and `chromium-driver` (`apt-get install -y chromium
//! chromium-driver`; `.ci/run` installs them); without them it fails saying so.

use std::net::TcpListener as StdListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use job::prelude::*;
use job_testkit::TestDb;
use job_web::Dashboard;

const TOKEN: &str = "browser-test-token";

/// Sends a mail (it does nothing: the test watches whether the worker takes it).
#[job(queue = "mail")]
async fn send_mail(_ctx: JobContext, to: String) -> Result<(), JobError> {
    let _ = to;
    Ok(())
}

/// chromedriver on a free port, ended when dropped.
struct Driver {
    child: Child,
    port: u16,
    _profile: TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A directory removed when dropped (the browser's fresh profile).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn find(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_driver() -> Driver {
    let install = "install Debian's Chromium and its driver: `apt-get install -y chromium chromium-driver` (.ci/run does)";
    let driver =
        find("chromedriver").unwrap_or_else(|| panic!("chromedriver not found on PATH: {install}"));
    assert!(
        find("chromium").is_some(),
        "chromium not found on PATH: {install}"
    );
    let port = free_port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start chromedriver ({e}): {install}"));
    let profile = std::env::temp_dir().join(format!("job-web-chromium-{}", uuid_like()));
    std::fs::create_dir_all(&profile).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "chromedriver did not answer on port {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Driver {
        child,
        port,
        _profile: TempDir(profile),
    }
}

fn uuid_like() -> String {
    format!(
        "{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ (free_port() as u128)
    )
}

async fn browser(driver: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": find("chromium").unwrap(),
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1360,900", "--hide-scrollbars",
                format!("--user-data-dir={}", driver._profile.0.display()),
            ],
        }),
    );
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("chromedriver starts a headless Chromium")
}

/// Saves a screenshot of the current page as `<JOB_WEB_SCREENSHOTS>/<name>.png`, when set.
async fn screenshot(client: &Client, name: &str) {
    let Some(dir) = std::env::var_os("JOB_WEB_SCREENSHOTS") else {
        return;
    };
    let png = client.screenshot().await.unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(PathBuf::from(dir).join(format!("{name}.png")), png).unwrap();
}

/// The text of `css` once it satisfies `want`: a click on a form's button navigates, so the
/// page is looked at again until the new one shows it (or 10 s pass).
async fn text_where(client: &Client, css: &str, want: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = match client.find(Locator::Css(css)).await {
            Ok(element) => element.text().await.ok(),
            Err(_) => None,
        };
        match found {
            Some(text) if want(&text) => return text,
            other => assert!(
                Instant::now() < deadline,
                "`{css}` is {other:?} on {}",
                client.current_url().await.unwrap()
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn text_is(client: &Client, css: &str, want: &str) {
    text_where(client, css, |t| t == want).await;
}

async fn text_has(client: &Client, css: &str, want: &str) {
    text_where(client, css, |t| t.contains(want)).await;
}

async fn state(db: &TestDb, id: i64) -> String {
    sqlx::query_scalar("SELECT state::text FROM job.jobs WHERE id = $1")
        .bind(id)
        .fetch_one(&db.pool())
        .await
        .unwrap()
}

async fn wait_for_state(db: &TestDb, id: i64, want: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now = state(db, id).await;
        if now == want {
            return;
        }
        assert!(Instant::now() < deadline, "job {id} is {now}, not {want}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_redrives_a_dead_letter_and_pauses_a_queue_in_a_browser() {
    let driver = start_driver();
    let db = TestDb::new().await;
    let store = db.store();

    // The dashboard, served as an application would.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = Dashboard::new(store.clone()).operator_token(TOKEN).router();
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    // A worker on the queue `mail`.
    let worker = Worker::builder(store.clone())
        .register::<SendMail>()
        .queue("mail", 2)
        .poll_interval(Duration::from_millis(100))
        .build()
        .unwrap()
        .start();
    let first = SendMail {
        to: "ada@example.com".into(),
    }
    .enqueue(&db.pool())
    .await
    .unwrap();
    wait_for_state(&db, first, "completed", Duration::from_secs(10)).await;

    // A dead letter in a queue no worker runs, its error holding markup.
    let dead: i64 = sqlx::query_scalar(
        "SELECT job.enqueue('charge', '{\"cents\": -5, \"note\": \"<script>alert(1)</script>\"}', queue => 'billing', tags => ARRAY['eu'])",
    )
    .fetch_one(&db.pool())
    .await
    .unwrap();
    sqlx::query(
        "UPDATE job.jobs SET state = 'discarded', attempt = 1, finalized_at = now(),
                errors = jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now(),
                         'class', 'terminal', 'message', 'cannot charge -5 cents <script>alert(2)</script>'))
         WHERE id = $1",
    )
    .bind(dead)
    .execute(&db.pool())
    .await
    .unwrap();

    let client = browser(&driver).await;
    client.goto(&format!("{base}/login")).await.unwrap();
    screenshot(&client, "login").await;
    client
        .find(Locator::Css("input[name=token]"))
        .await
        .unwrap()
        .send_keys(TOKEN)
        .await
        .unwrap();
    client
        .find(Locator::Css("form.login button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    text_is(&client, ".badge.operator", "operator").await;

    // The dead letters: redrive one, see it available.
    client.goto(&format!("{base}/dead")).await.unwrap();
    let row = format!("tr[data-id=\"{dead}\"]");
    // The message is shown as text, markup and all.
    text_has(
        &client,
        &format!("{row} td.error"),
        "<script>alert(2)</script>",
    )
    .await;
    screenshot(&client, "dead-letters").await;
    client
        .find(Locator::Css(&format!("{row} button.redrive")))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    text_has(&client, ".notice", "Redriven: 1").await;
    text_is(&client, "h1 .state", "available").await;
    assert_eq!(state(&db, dead).await, "available");
    screenshot(&client, "job").await;

    // The queues: pause `mail`, and the worker takes none of its jobs.
    client.goto(&format!("{base}/")).await.unwrap();
    client
        .find(Locator::Css("tr[data-queue=\"mail\"] button.pause"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    text_has(&client, "tr[data-queue=\"mail\"] td", "paused").await;
    let held = SendMail {
        to: "grace@example.com".into(),
    }
    .enqueue(&db.pool())
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        state(&db, held).await,
        "available",
        "a paused queue's job was taken"
    );
    client.goto(&format!("{base}/jobs/{held}")).await.unwrap();
    text_is(&client, "h1 .state", "available").await;
    client.goto(&format!("{base}/")).await.unwrap();
    screenshot(&client, "queues").await;

    // Resume: the worker takes it.
    client
        .find(Locator::Css("tr[data-queue=\"mail\"] button.resume"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for_state(&db, held, "completed", Duration::from_secs(10)).await;
    client.goto(&format!("{base}/jobs/{held}")).await.unwrap();
    text_is(&client, "h1 .state", "completed").await;
    client.goto(&format!("{base}/jobs")).await.unwrap();
    screenshot(&client, "jobs").await;

    client.close().await.unwrap();
    worker.shutdown().await;
    server.abort();
    db.close().await;
}
