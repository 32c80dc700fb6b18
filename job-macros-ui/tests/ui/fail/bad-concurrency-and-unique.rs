use job::{job, JobContext, JobError};

#[job(concurrency = 0, unique = "open {brace")]
async fn send_invoice(ctx: JobContext, invoice_id: i64) -> Result<(), JobError> {
    let _ = (ctx, invoice_id);
    Ok(())
}

fn main() {}
