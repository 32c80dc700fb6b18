use job::{job, JobContext, JobError};

#[job(unique = "invoice:{invoce_id}")]
async fn send_invoice(ctx: JobContext, invoice_id: i64) -> Result<(), JobError> {
    let _ = (ctx, invoice_id);
    Ok(())
}

fn main() {}
