//! `shop`: a small application on `job`, and the reference its tests are. An order and the jobs
//! it needs commit in one transaction: an order confirmation whose email goes out through a
//! durable step, and a charge, unique per order, that completes in the same transaction as the
//! order's `charged` flag. Everything here uses the public API only.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use job::prelude::*;
use sqlx::PgConnection;

/// Creates the `job` schema and the application's own table. An application runs its own
/// migrations next to the framework's.
pub async fn migrate(pool: &PgPool) -> Result<(), Box<dyn std::error::Error>> {
    PgStore::new(pool.clone()).migrate().await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS orders (
             id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             email    text    NOT NULL,
             amount   bigint  NOT NULL,
             charged  boolean NOT NULL DEFAULT false
         )",
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Places an order, in the caller's transaction: the order row, its confirmation and its
/// charge exist together or not at all.
pub async fn place_order(
    tx: &mut PgConnection,
    email: &str,
    amount: i64,
) -> Result<i64, Box<dyn std::error::Error>> {
    let order_id: i64 =
        sqlx::query_scalar("INSERT INTO orders (email, amount) VALUES ($1, $2) RETURNING id")
            .bind(email)
            .bind(amount)
            .fetch_one(&mut *tx)
            .await?;
    SendConfirmation { order_id }.enqueue(&mut *tx).await?;
    ChargeOrder { order_id }.enqueue(&mut *tx).await?;
    Ok(order_id)
}

/// The mail gateway; here it remembers what it sent.
#[derive(Debug, Clone, Default)]
pub struct Mailer {
    sent: Arc<Mutex<Vec<String>>>,
}

impl Mailer {
    /// Sends `body` to `to`.
    pub async fn send(&self, to: &str, body: &str) -> Result<String, std::io::Error> {
        let mut sent = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        sent.push(format!("{to}: {body}"));
        Ok(format!("msg-{}", sent.len()))
    }

    /// Every email sent so far.
    pub fn sent(&self) -> Vec<String> {
        self.sent.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// The payment provider; `failures` first calls fail, as a flaky provider does.
#[derive(Debug, Clone, Default)]
pub struct Payments {
    failures: Arc<AtomicU32>,
    charges: Arc<AtomicU32>,
}

impl Payments {
    /// A provider whose first `n` charges fail.
    pub fn failing_first(n: u32) -> Self {
        let payments = Payments::default();
        payments.failures.store(n, Ordering::SeqCst);
        payments
    }

    /// Charges `amount`; fails while failures are left.
    pub async fn charge(&self, amount: i64) -> Result<String, std::io::Error> {
        let left = self.failures.load(Ordering::SeqCst);
        if left > 0 {
            self.failures.store(left - 1, Ordering::SeqCst);
            return Err(std::io::Error::other("payment provider timed out"));
        }
        let n = self.charges.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!("ch-{n}-{amount}"))
    }

    /// How many charges went through.
    pub fn charges(&self) -> u32 {
        self.charges.load(Ordering::SeqCst)
    }
}

/// Emails the order's confirmation once: the email is a durable step, so a retry (after a
/// crash, a lost database, a failure further on) does not send it again.
#[job(retry = 5, backoff(base = "10ms", cap = "100ms"))]
pub async fn send_confirmation(ctx: JobContext, order_id: i64) -> Result<(), JobError> {
    let pool = ctx.state::<PgPool>()?;
    let mailer = ctx.state::<Mailer>()?;
    let email: String = sqlx::query_scalar("SELECT email FROM orders WHERE id = $1")
        .bind(order_id)
        .fetch_one(pool)
        .await?;
    let body = format!("order {order_id} confirmed");
    let _message: String = ctx
        .step("send", || async { Ok(mailer.send(&email, &body).await?) })
        .await?;
    Ok(())
}

/// Charges the order and marks it charged in the same transaction as the job's completion;
/// at most one active charge per order.
#[job(
    unique = "charge:{order_id}",
    retry = 3,
    backoff(base = "10ms", cap = "100ms")
)]
pub async fn charge_order(ctx: JobContext, order_id: i64) -> Result<(), JobError> {
    let pool = ctx.state::<PgPool>()?;
    let payments = ctx.state::<Payments>()?;
    let amount: i64 = sqlx::query_scalar("SELECT amount FROM orders WHERE id = $1")
        .bind(order_id)
        .fetch_one(pool)
        .await?;
    let _charge: String = ctx
        .step("charge", || async { Ok(payments.charge(amount).await?) })
        .await?;
    let mut tx = pool.begin().await?;
    sqlx::query("UPDATE orders SET charged = true WHERE id = $1")
        .bind(order_id)
        .execute(&mut *tx)
        .await?;
    job::complete_in(&mut tx, &ctx).await?;
    tx.commit().await?;
    Ok(())
}

/// The shop's worker over `store`: both jobs on the default queue, with the application's
/// state.
pub fn worker<S: Store>(
    store: S,
    pool: &PgPool,
    mailer: &Mailer,
    payments: &Payments,
) -> job::WorkerBuilder<S> {
    Worker::builder(store)
        .register::<SendConfirmation>()
        .register::<ChargeOrder>()
        .queue("default", 10)
        .state(pool.clone())
        .state(mailer.clone())
        .state(payments.clone())
}
