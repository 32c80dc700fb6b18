use job::{job, JobContext, JobError};

#[job(timeout = "0s")]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
