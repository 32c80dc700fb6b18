use job::{job, JobContext, JobError};

// A key is shown where the payload's `Debug` is not (a duplicate's error, logs, `job list`):
// a redacted argument in a key template would leak it.
#[job(unique = "receipt:{email}", ordering = "customer:{email}", rate = "10/1s", rate_key = "{email}")]
async fn send_receipt(ctx: JobContext, order_id: i64, #[redact] email: String) -> Result<(), JobError> {
    let _ = (ctx, order_id, email);
    Ok(())
}

fn main() {}
