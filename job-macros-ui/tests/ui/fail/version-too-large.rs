use job::{job, JobContext, JobError};

#[job(version = 2147483648)]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
