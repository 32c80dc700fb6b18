use job::{job, JobContext, JobError};

#[job(concurrency = 4294967296)]
async fn limited(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(retry = 99999999999999999999999999999999999999999)]
async fn past_every_integer(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(breaker(failure_percent = 50, min_attempts = 1000001))]
async fn tripped(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
