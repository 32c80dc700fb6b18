use job::{job, JobContext, JobError};

#[job(retry = "5", timeout = 2m, queue = mail, backoff = "1s", upgrade = "up")]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
