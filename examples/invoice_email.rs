//! Invoice email, sent once across a crash: the invoice row and its email job are written in
//! ONE transaction, and the handler sends through a durable step, so a worker that dies after
//! sending and before recording the job's outcome does not send the email twice.
//!
//! The demo injects exactly that crash (`Faults::new().crash_after(Point::Perform)`, once): the
//! first attempt sends and "dies"; its 1.5 s lease expires, the rescuer (every 100 ms) puts
//! the job back, and attempt 2 gets the recorded step output instead of sending again. It
//! prints `sent 1 email across 2 attempts` and exits 0 when that held.
//!
//! Run with `cargo run --example invoice_email`. It uses the database
//! `job_example_invoice_email` on the server named by DATABASE_URL (default
//! `postgres://postgres@127.0.0.1:5432/test`), creating it when missing. The application's
//! tables (`invoices`, `sent_emails`) live in its `public` schema, next to the `job` schema.

use std::time::Duration;

use job::prelude::*;
use job::{JobState, WorkerConfig};
use job_testkit::{Faults, Point};
use sqlx::{PgConnection, PgPool};

/// The application's mailer. Every email it sends is a row of `sent_emails`, so sends can be
/// counted after the fact, whatever crashed in between.
#[derive(Clone)]
pub struct Mailer {
    pool: PgPool,
}

impl Mailer {
    /// A mailer writing to `pool`.
    pub fn new(pool: PgPool) -> Self {
        Mailer { pool }
    }

    /// "Sends" the email of `invoice_id` to its customer; returns the email's id.
    pub async fn send(&self, invoice_id: i64) -> Result<i64, sqlx::Error> {
        let (email_id, to): (i64, String) = sqlx::query_as(
            "INSERT INTO sent_emails (invoice_id, recipient) \
             SELECT id, customer FROM invoices WHERE id = $1 RETURNING id, recipient",
        )
        .bind(invoice_id)
        .fetch_one(&self.pool)
        .await?;
        println!("  [mailer] email {email_id}: invoice {invoice_id} to {to}");
        Ok(email_id)
    }
}

/// Emails invoice `invoice_id` to its customer, once.
#[job(
    queue = "mail",
    retry = 3,
    lease = "1500ms",
    backoff(base = "50ms", cap = "200ms")
)]
pub async fn send_invoice_email(ctx: JobContext, invoice_id: i64) -> Result<(), JobError> {
    println!("  [job {}] attempt {}", ctx.id(), ctx.attempt());
    let mailer = ctx.state::<Mailer>()?;
    // Runs once per job: a later attempt gets the recorded email id back without sending.
    let email_id: i64 = ctx
        .step("send", || async { Ok(mailer.send(invoice_id).await?) })
        .await?;
    // Idempotent: a second attempt writes the same thing.
    sqlx::query("UPDATE invoices SET emailed_at = now() WHERE id = $1 AND emailed_at IS NULL")
        .bind(invoice_id)
        .execute(ctx.state::<PgPool>()?)
        .await?;
    println!(
        "  [job {}] attempt {}: invoice {invoice_id} has email {email_id}",
        ctx.id(),
        ctx.attempt()
    );
    Ok(())
}

/// Creates the application's tables when missing.
pub async fn create_tables(pool: &PgPool) -> Result<(), sqlx::Error> {
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS invoices (
            id bigserial PRIMARY KEY,
            customer text NOT NULL,
            amount_cents bigint NOT NULL,
            emailed_at timestamptz
        )",
    )
    .execute(pool)
    .await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS sent_emails (
            id bigserial PRIMARY KEY,
            invoice_id bigint NOT NULL REFERENCES invoices (id),
            recipient text NOT NULL,
            sent_at timestamptz NOT NULL DEFAULT now()
        )",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Writes an invoice and enqueues its email on `conn` (the caller's transaction): both exist
/// only if it commits. Returns the invoice's id and the job's.
pub async fn create_invoice(
    conn: &mut PgConnection,
    customer: &str,
    amount_cents: i64,
) -> Result<(i64, JobId), Box<dyn std::error::Error>> {
    let invoice_id: i64 = sqlx::query_scalar(
        "INSERT INTO invoices (customer, amount_cents) VALUES ($1, $2) RETURNING id",
    )
    .bind(customer)
    .bind(amount_cents)
    .fetch_one(&mut *conn)
    .await?;
    let job_id = SendInvoiceEmail { invoice_id }.enqueue(&mut *conn).await?;
    Ok((invoice_id, job_id))
}

/// What a run did.
#[derive(Debug)]
pub struct Report {
    /// The invoice.
    pub invoice_id: i64,
    /// Its email job, once finished.
    pub job: job::JobRow,
    /// Emails the mailer sent for the invoice.
    pub sends: i64,
    /// Whether the invoice is marked emailed.
    pub emailed: bool,
    /// How many crashes the faults injected.
    pub crashes: usize,
}

impl Report {
    /// The promise: the job completed and exactly one email went out, marked on the invoice.
    pub fn held(&self) -> bool {
        self.job.state == JobState::Completed && self.sends == 1 && self.emailed
    }
}

/// Creates an invoice and its email job in one transaction, runs a worker under `faults`
/// until the job is finished (30 s at most), and reports.
pub async fn run(pool: &PgPool, faults: Faults) -> Result<Report, Box<dyn std::error::Error>> {
    create_tables(pool).await?;
    let store = PgStore::new(pool.clone());

    let mut tx = pool.begin().await?;
    let (invoice_id, job_id) = create_invoice(&mut tx, "ada@example.com", 12_900).await?;
    tx.commit().await?;
    println!("created invoice {invoice_id} and its email job {job_id} in one transaction");

    let mut config = WorkerConfig::default();
    config.poll_interval = Duration::from_millis(50);
    // A crashed 1.5 s lease is found within 100 ms of expiring.
    config.rescuer.interval = Duration::from_millis(100);
    let worker = Worker::builder(store.clone())
        .register::<SendInvoiceEmail>()
        .queue("mail", 2)
        .config(config)
        .state(Mailer::new(pool.clone()))
        .state(pool.clone())
        .faults(faults.clone())
        .build()?
        .start();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let job = loop {
        let row = store.get(job_id).await?.ok_or("the job vanished")?;
        if row.state.is_terminal() {
            break row;
        }
        if tokio::time::Instant::now() > deadline {
            worker.shutdown().await;
            return Err(format!("job {job_id} is still {} after 30 seconds", row.state).into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    worker.shutdown().await;

    let sends: i64 = sqlx::query_scalar("SELECT count(*) FROM sent_emails WHERE invoice_id = $1")
        .bind(invoice_id)
        .fetch_one(pool)
        .await?;
    let emailed: bool =
        sqlx::query_scalar("SELECT emailed_at IS NOT NULL FROM invoices WHERE id = $1")
            .bind(invoice_id)
            .fetch_one(pool)
            .await?;
    Ok(Report {
        invoice_id,
        job,
        sends,
        emailed,
        crashes: faults.crashes().len(),
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let options = db::ensure_database(&server, "job_example_invoice_email").await?;
    let pool = job::pool_options()
        .max_connections(5)
        .connect_with(options)
        .await?;
    PgStore::new(pool.clone()).migrate().await?;

    // The worker "dies" once, right after the handler sent the email and before the job's
    // outcome is written, as a killed process would.
    let faults = Faults::new()
        .crash_after(Point::Perform)
        .kind::<SendInvoiceEmail>()
        .times(1);
    let report = run(&pool, faults).await?;

    let job = &report.job;
    for e in &job.errors {
        println!(
            "  attempt {} failed: {} ({})",
            e.attempt, e.class, e.message
        );
    }
    println!(
        "job {} {} after {} attempt(s), {} crash(es) injected; invoice emailed: {}",
        job.id, job.state, job.attempt, report.crashes, report.emailed
    );
    println!(
        "sent {} email{} across {} attempts",
        report.sends,
        if report.sends == 1 { "" } else { "s" },
        job.attempt
    );
    if !report.held() || job.attempt != 2 {
        return Err(
            "the promise did not hold: expected 1 email, a completed job, 2 attempts".into(),
        );
    }
    Ok(())
}

#[path = "support/db.rs"]
mod db;
