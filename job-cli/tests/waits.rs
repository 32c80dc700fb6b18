//! The `job` binary never waits for ever: a lock held on the job tables ends each command at
//! its `--timeout` with exit code 1 and a line saying so, and what it was doing is undone; a
//! database that stops answering mid-statement ends it shortly after.
//! Also what the command line refuses before connecting: arguments that are not UTF-8 (named
//! by position) and a URL of another database's scheme.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use job_testkit::TestDb;

/// How long a command may take before the test calls it stuck and kills it: a bound so that
/// a hang fails the test instead of stalling it, not a measure of speed (the commands are
/// given `--timeout 1s`).
const STUCK: Duration = Duration::from_secs(60);

/// Runs `job args` against `db`, killed and reported when it has not ended within [`STUCK`].
async fn job_bounded(db: &TestDb, args: &[&str]) -> Output {
    job_bounded_at(&db.url(), args).await
}

/// Runs `job args` against the database at `url`, killed and reported when it has not ended
/// within [`STUCK`].
async fn job_bounded_at(url: &str, args: &[&str]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_job"))
        .args(args)
        .env("DATABASE_URL", url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the job binary runs");
    let args = args.join(" ");
    tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > STUCK {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "job {args} still waited after {STUCK:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_lock_held_on_the_jobs_table_ends_each_command_at_its_timeout() {
    let db = TestDb::new().await;
    let mut holder = db.pool().begin().await.unwrap();
    sqlx::query("LOCK TABLE job.jobs IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *holder)
        .await
        .unwrap();
    for args in [
        &["--timeout", "1s", "stats"][..],
        &["list", "--timeout", "1s"],
        &["--timeout", "1s", "enqueue", "k", "{}"],
        &["--timeout", "1s", "cancel", "1"],
        &["--timeout", "1s", "--json", "check"],
    ] {
        let out = job_bounded(&db, args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("the database did not answer within 1s (--timeout)"),
            "{args:?}: {stderr}"
        );
        // sqlx's slow-statement warning, a page of SQL, is not printed before it.
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
    holder.rollback().await.unwrap();
    // The enqueue stopped was rolled back: nothing waits behind the lock.
    let jobs: i64 = sqlx::query_scalar("SELECT count(*) FROM job.jobs")
        .fetch_one(&db.pool())
        .await
        .unwrap();
    assert_eq!(jobs, 0);
    db.close().await;
}

/// A TCP proxy to the test's server that goes silent: it forwards each connection both ways
/// until the client sends `marker` (a statement naming it), forwards those bytes, then
/// forwards nothing more either way and holds both sockets open. The server answers; the
/// answer never arrives, as over a dropped connection, and no error comes either. Dropping it
/// closes every socket.
struct Silencer {
    addr: std::net::SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl Silencer {
    /// Each connection goes silent when it sends `marker`; the others go on.
    async fn start(db: &TestDb, marker: &'static [u8]) -> Silencer {
        Silencer::proxy(db, marker, false).await
    }

    /// Every connection goes silent, those opened later too, when any sends `marker`: as a
    /// partitioned network or a stopped server.
    async fn start_for_everyone(db: &TestDb, marker: &'static [u8]) -> Silencer {
        Silencer::proxy(db, marker, true).await
    }

    async fn proxy(db: &TestDb, marker: &'static [u8], everyone: bool) -> Silencer {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        use tokio::net::{TcpListener, TcpStream};
        let options = db.connect_options();
        let server = format!("{}:{}", options.get_host(), options.get_port());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(AtomicBool::new(false));
        let accepting = tokio::spawn(async move {
            // Dropped with this task: every connection's sockets close with it.
            let mut connections = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let upstream = TcpStream::connect(&server).await.unwrap();
                let silent = if everyone {
                    shared.clone()
                } else {
                    Arc::new(AtomicBool::new(false))
                };
                connections.spawn(relay(client, upstream, marker, silent));
            }
        });
        Silencer { addr, accepting }
    }

    /// `db`'s URL through the proxy.
    fn url(&self, db: &TestDb) -> String {
        let options = db.connect_options();
        format!(
            "postgres://{}@{}/{}",
            options.get_username(),
            self.addr,
            db.name()
        )
    }
}

impl Drop for Silencer {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Forwards between `client` and `upstream` until `marker` has gone from the client to the
/// server or `silent` is set, then holds both sockets, silent, until dropped. Sets `silent`
/// when it sees `marker`.
async fn relay(
    client: tokio::net::TcpStream,
    upstream: tokio::net::TcpStream,
    marker: &[u8],
    silent: std::sync::Arc<std::sync::atomic::AtomicBool>,
) {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = upstream.into_split();
    let up = {
        let silent = silent.clone();
        async move {
            // What came last, so that a marker split between two reads is found too.
            let mut seen: Vec<u8> = Vec::new();
            let mut buf = vec![0; 64 * 1024];
            loop {
                let n = match from_client.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                if silent.load(Ordering::SeqCst) {
                    // Another connection went silent (`start_for_everyone`): nothing more
                    // goes through, and both sockets stay open.
                    std::future::pending::<()>().await;
                }
                seen.extend_from_slice(&buf[..n]);
                if seen.windows(marker.len()).any(|w| w == marker) {
                    // Set before the server can answer what it is about to get.
                    silent.store(true, Ordering::SeqCst);
                }
                let keep = seen.len().saturating_sub(marker.len());
                seen.drain(..keep);
                if to_server.write_all(&buf[..n]).await.is_err() {
                    return;
                }
                if silent.load(Ordering::SeqCst) {
                    // Reads nothing more from the client, and keeps both sockets open.
                    std::future::pending::<()>().await;
                }
            }
        }
    };
    let down = async move {
        let mut buf = vec![0; 64 * 1024];
        loop {
            let n = match from_server.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if silent.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            if to_client.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(up, down);
}

/// A statement sent on a connection that then goes silent (no answer, no error: a network
/// partition, a stopped server) is given up at `--timeout` and a small margin, saying so,
/// where the server's own bound cannot help and the kernel would wait a quarter of an hour.
#[tokio::test]
async fn a_database_gone_silent_mid_statement_ends_the_command_at_its_timeout() {
    let db = TestDb::new().await;
    let enqueued = job_bounded(&db, &["--json", "enqueue", "k", "{}"]).await;
    let id =
        serde_json::from_slice::<serde_json::Value>(&enqueued.stdout).unwrap()["id"].to_string();
    // Every statement on `job.jobs` goes unanswered; connecting and the session's setup pass.
    let silencer = Silencer::start(&db, b"job.jobs").await;
    let url = silencer.url(&db);
    for (args, action) in [
        (&["--timeout", "1s", "stats"][..], false),
        (&["--timeout", "1s", "--json", "list"], false),
        (&["--timeout", "1s", "show", &id], false),
        (&["--timeout", "1s", "cancel", &id], true),
    ] {
        let out = job_bounded_at(&url, args).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        // Said apart from the server's stop of a statement at --timeout, which never came.
        assert!(
            stderr.starts_with(
                "job: the database did not answer within 1s (--timeout), nor in the 2s after"
            ),
            "{args:?}: {stderr}"
        );
        assert_eq!(
            stderr.contains("may or may not have been made"),
            action,
            "{args:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
    drop(silencer);
    db.close().await;
}

/// The sessions of `job migrate` (not its watch's) the server still has on `db`'s database.
async fn migrate_sessions(db: &TestDb) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE datname = $1 AND application_name ~ '^job migrate [0-9]'",
    )
    .bind(db.name())
    .fetch_one(&db.pool())
    .await
    .unwrap()
}

/// `job migrate` whose answer is lost on the way (a dropped connection, a proxy that holds it
/// open) gives up once its session has had nothing to do for it for `--timeout` and 2s,
/// instead of waiting for ever, and no session of it stays behind holding a lock. Outside a
/// transaction (the encoding's read: the session then waits `idle`, which no server setting
/// ends, so the command ends it) and inside one (the read of whether the migrations table
/// exists, which comes after the migrators' lock is taken: `idle in transaction`, holding that
/// lock, which the command ends, or the server's `idle_in_transaction_session_timeout` a
/// second later, should the command's look come late).
#[tokio::test]
async fn migrate_gives_up_on_a_lost_answer_and_leaves_no_session_behind() {
    let db = TestDb::new().await;
    for (marker, said) in [
        (
            &b"pg_encoding_to_char"[..],
            &["waited for this process for more than 3s (idle)"][..],
        ),
        (
            b"to_regclass",
            &[
                "waited for this process for more than 3s (idle in transaction)",
                "the migration's session ended on the server while this process waited",
            ],
        ),
    ] {
        let silencer = Silencer::start(&db, marker).await;
        let out = job_bounded_at(&silencer.url(&db), &["--timeout", "1s", "migrate"]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.starts_with("job: the job migration gave up: ")
                && said.iter().any(|s| stderr.contains(s)),
            "{stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        // Gone from the server while the proxy still holds its socket open (the end of a
        // session is asynchronous: a bounded wait, not a measure).
        let give_up = Instant::now() + STUCK;
        while migrate_sessions(&db).await > 0 {
            assert!(Instant::now() < give_up, "the migration's session stayed");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // No lock of it is held: the next migrator goes through at once.
        let out = job_bounded(&db, &["--timeout", "1s", "migrate"]).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        drop(silencer);
    }
    db.close().await;
}

/// `job migrate` against a database that stops answering altogether (every connection goes
/// silent, the watch's too: a partitioned network, a stopped server) gives up once the watch
/// has had no answer for 10s (`--timeout` and 2s when longer), saying so.
#[tokio::test]
async fn migrate_gives_up_when_the_database_stops_answering_altogether() {
    let db = TestDb::new().await;
    let silencer = Silencer::start_for_everyone(&db, b"job.schema_migrations").await;
    let out = job_bounded_at(&silencer.url(&db), &["--timeout", "1s", "migrate"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with(
            "job: the job migration gave up: the database did not answer the second connection, \
             which watches the migration's session, for 10s"
        ),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    drop(silencer);
    db.close().await;
}

#[tokio::test]
async fn migrate_gives_up_waiting_for_another_migrator_at_its_timeout() {
    let db = TestDb::new().await;
    let mut holder = db.pool().begin().await.unwrap();
    // The lock every migrator takes first (migrate_lock.sql).
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended('job.schema_migrations', 0))")
        .execute(&mut *holder)
        .await
        .unwrap();
    let out = job_bounded(&db, &["--timeout", "1s", "migrate"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("job migrate waited more than 1s (--timeout) for a lock"),
        "{stderr}"
    );
    holder.rollback().await.unwrap();
    let out = job_bounded(&db, &["--timeout", "1s", "migrate"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    db.close().await;
}

#[tokio::test]
async fn a_timeout_out_of_bounds_is_refused_naming_it() {
    let db = TestDb::new().await;
    for (given, says) in [("0s", "got 0s"), ("2h", "got 2h"), ("1ms", "got 1ms")] {
        let out = job_bounded(&db, &["--timeout", given, "stats"]).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{given}: {stderr}");
        assert!(
            stderr.contains("--timeout must be from 100ms to 1h") && stderr.contains(says),
            "{given}: {stderr}"
        );
    }
    db.close().await;
}

#[cfg(unix)]
#[test]
fn an_argument_that_is_not_utf8_is_named_by_its_position() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    let out = Command::new(env!("CARGO_BIN_EXE_job"))
        .args([
            OsStr::new("list"),
            OsStr::new("--queue"),
            OsStr::new("mail"),
            OsStr::new("--kind"),
            OsStr::from_bytes(b"send\xffmail"),
        ])
        .env("DATABASE_URL", "postgres://nobody@127.0.0.1:1/none")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(
        stderr.contains("argument 5 is not UTF-8: \"send\u{fffd}mail\""),
        "{stderr}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_job"))
        .arg("stats")
        .env(
            "DATABASE_URL",
            OsStr::from_bytes(b"postgres://\xff@host/db"),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("DATABASE_URL is not UTF-8"), "{stderr}");
}

#[test]
fn a_url_of_another_scheme_is_refused_before_connecting() {
    for url in ["mysql://root@127.0.0.1:1/app", "garbage"] {
        let out = Command::new(env!("CARGO_BIN_EXE_job"))
            .args(["--database-url", url, "stats"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{url}: {stderr}");
        assert!(
            stderr.contains("it must start with postgres:// or postgresql://"),
            "{url}: {stderr}"
        );
    }
}
