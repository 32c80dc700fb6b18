use job::{job, JobContext, JobError};

#[job]
async fn notify(
    _ctx: JobContext,
    #[redact(partial)] email: String,
    #[redact]
    #[redact]
    phone: String,
) -> Result<(), JobError> {
    let _ = (email, phone);
    Ok(())
}

fn main() {}
