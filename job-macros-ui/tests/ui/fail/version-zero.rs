use job::{job, JobContext, JobError};

#[job(version = 0)]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
