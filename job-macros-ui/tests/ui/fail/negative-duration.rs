use job::{job, JobContext, JobError};

#[job(timeout = "-1s")]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
