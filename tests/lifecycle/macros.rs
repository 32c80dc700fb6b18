//! `#[job(unique = "...", concurrency = N)]`.

use job::{job, EnqueueError, Job, JobContext, JobError};

/// Bills an invoice once at a time.
#[job(
    kind = "test.bill",
    unique = "invoice:{invoice_id}:{{v1}}",
    concurrency = 3
)]
async fn bill(ctx: JobContext, invoice_id: i64, amount: u32) -> Result<(), JobError> {
    let _ = (ctx, invoice_id, amount);
    Ok(())
}

#[tokio::test]
async fn the_macro_derives_the_unique_key_from_the_payload_and_sets_the_limit() {
    let job = Bill {
        invoice_id: 7,
        amount: 10,
    };
    assert_eq!(job.unique_key().as_deref(), Some("invoice:7:{v1}"));
    assert_eq!(Bill::OPTIONS.concurrency, Some(3));

    let h = crate::common::Harness::new().await;
    let first = job.clone().enqueue(h.store.pool()).await.unwrap();
    let again = Bill {
        invoice_id: 7,
        amount: 99,
    }
    .enqueue(h.store.pool())
    .await;
    assert!(
        matches!(again, Err(EnqueueError::Duplicate { existing, .. }) if existing == first),
        "{again:?}"
    );
}

/// Moves stock between two places, once at a time per pair.
#[job(kind = "test.move_stock", unique = "move:{from}:{to}")]
async fn move_stock(ctx: JobContext, from: String, to: String) -> Result<(), JobError> {
    let _ = (ctx, from, to);
    Ok(())
}

#[tokio::test]
async fn values_holding_the_templates_separator_make_different_unique_keys() {
    let h = crate::common::Harness::new().await;
    let pool = h.store.pool();
    let stock = |from: &str, to: &str| MoveStock {
        from: from.into(),
        to: to.into(),
    };
    // Joined as they are, both were `move:a:b:c`, and the second was refused as a duplicate of
    // the first.
    let first = stock("a:b", "c").enqueue(pool).await.unwrap();
    let second = stock("a", "b:c").enqueue(pool).await.unwrap();
    assert_ne!(first, second);
    let again = stock("a", "b:c").enqueue(pool).await;
    assert!(
        matches!(again, Err(EnqueueError::Duplicate { existing, .. }) if existing == second),
        "{again:?}"
    );
}
