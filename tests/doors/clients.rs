//! The README's "Enqueue from any language" examples, run as they stand there from psql,
//! Python (psycopg) and Node (pg) against a test database, and their jobs run by a Rust worker.
//! A missing tool or driver fails the test with how to install it; it never skips.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use job::prelude::*;
use job::JobState;
use job_testkit::TestDb;

use crate::support::{libpq_url, readme_block, tool};

/// The invoices each run sent, by id: the `resend` flag of each run.
#[derive(Clone, Default)]
struct Sent(Arc<Mutex<BTreeMap<i64, Vec<bool>>>>);

/// The README's first job, as its worker registers it.
#[job(queue = "mail")]
async fn send_invoice(ctx: JobContext, invoice_id: i64, resend: bool) -> Result<(), JobError> {
    let sent = ctx.state::<Sent>()?;
    sent.0
        .lock()
        .unwrap()
        .entry(invoice_id)
        .or_default()
        .push(resend);
    Ok(())
}

/// Runs `program` with `args` in `dir`, the README block `block` on its standard input and
/// the test database's URL in DATABASE_URL; returns its standard output.
fn run(db: &TestDb, program: &str, args: &[&str], dir: &Path, block: &str) -> String {
    let mut child = Command::new(tool(program))
        .args(args)
        .current_dir(dir)
        .env("DATABASE_URL", libpq_url(db))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} does not start: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(readme_block(block).as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the README's {block} failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Runs every job of the `mail` queue with the README's worker until none is left waiting,
/// and returns what was sent.
async fn work(db: &TestDb) -> BTreeMap<i64, Vec<bool>> {
    let store = db.store();
    let sent = Sent::default();
    let worker = Worker::builder(store.clone())
        .register::<SendInvoice>()
        .queue("mail", 4)
        .poll_interval(Duration::from_millis(50))
        .state(sent.clone())
        .build()
        .unwrap()
        .start();
    crate::common::eventually("every job of the README to run", || async {
        let left: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM job.jobs WHERE state NOT IN ('completed', 'discarded', 'cancelled')",
        )
        .fetch_one(store.pool())
        .await
        .unwrap();
        (left == 0).then_some(())
    })
    .await;
    worker.shutdown().await;
    let discarded = crate::common::count_in(&store, JobState::Discarded).await;
    assert_eq!(
        discarded, 0,
        "no job of the README is refused by its worker"
    );
    let sent = sent.0.lock().unwrap().clone();
    sent
}

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[tokio::test]
async fn the_readme_psql_example_enqueues_jobs_a_rust_worker_runs() {
    let db = TestDb::new().await;
    let url = libpq_url(&db);
    let args = ["-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", &url];
    run(&db, "psql", &args, &repo("."), "enqueue-psql");
    let options: (i16, Vec<String>, Option<String>, bool, Option<String>) = sqlx::query_as(
        "SELECT priority, tags, tenant, deadline IS NOT NULL, unique_key FROM job.jobs
         WHERE payload->>'invoice_id' = '43'",
    )
    .fetch_one(&db.pool())
    .await
    .unwrap();
    assert_eq!(
        options,
        (
            1,
            vec!["billing".into(), "eu".into()],
            Some("acme".into()),
            true,
            Some("invoice:43".into())
        )
    );
    let sent = work(&db).await;
    assert_eq!(
        sent.keys().copied().collect::<Vec<_>>(),
        [42, 43, 44, 45],
        "{sent:?}"
    );
    assert_eq!(sent[&43], [true]);
    db.close().await;
}

#[tokio::test]
async fn the_readme_python_example_enqueues_jobs_a_rust_worker_runs() {
    let python = tool("python3");
    let psycopg = Command::new(&python)
        .args(["-c", "import psycopg"])
        .output()
        .expect("python3 runs");
    assert!(
        psycopg.status.success(),
        "psycopg is not installed for {python}: run `python3 -m pip install -r \
         tests/clients/requirements.txt` (.ci/run does):\n{}",
        String::from_utf8_lossy(&psycopg.stderr)
    );
    let db = TestDb::new().await;
    let out = run(&db, "python3", &["-"], &repo("."), "enqueue-python");
    assert!(out.contains("already enqueued: existing job:"), "{out}");
    let sent = work(&db).await;
    assert_eq!(sent.keys().copied().collect::<Vec<_>>(), [46, 47, 48]);
    assert_eq!(
        sent[&46],
        [false],
        "the duplicate was refused, the first kept"
    );
    db.close().await;
}

#[tokio::test]
async fn the_readme_node_example_enqueues_jobs_a_rust_worker_runs() {
    let dir = repo("tests/clients/node");
    assert!(
        dir.join("node_modules/pg").exists(),
        "node-postgres is not installed: run `npm ci` in tests/clients/node (.ci/run does)"
    );
    let db = TestDb::new().await;
    let out = run(&db, "node", &["--input-type=module"], &dir, "enqueue-node");
    assert!(
        out.contains(
            "22023 invalid enqueue argument `payload`: must be a JSON object, got an array"
        ),
        "{out}"
    );
    let tenant: Option<String> = sqlx::query_scalar("SELECT tenant FROM job.jobs")
        .fetch_one(&db.pool())
        .await
        .unwrap();
    assert_eq!(tenant.as_deref(), Some("acme"));
    let sent = work(&db).await;
    assert_eq!(sent.keys().copied().collect::<Vec<_>>(), [49]);
    db.close().await;
}
