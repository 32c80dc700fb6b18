use job::{job, JobContext, JobError};

#[job]
async fn send(invoice_id: i64, ctx: JobContext) -> Result<(), JobError> {
    let _ = (invoice_id, ctx);
    Ok(())
}

fn main() {}
