use job::{job, JobError};

#[job]
async fn no_parameters() -> Result<(), JobError> {
    Ok(())
}

#[job]
async fn payload_only(invoice_id: i64) -> Result<(), JobError> {
    let _ = invoice_id;
    Ok(())
}

fn main() {}
