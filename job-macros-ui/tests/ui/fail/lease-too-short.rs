use job::{job, JobContext, JobError};

#[job(lease = "10ms")]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
