use job::{job, JobContext, JobError};

#[job(retries = 5, colour = "red")]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
