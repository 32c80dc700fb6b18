use job::{job, JobContext, JobError};

#[job(backoff(base = "2m", cap = "1m"))]
async fn both(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(backoff(base = "2h"))]
async fn above_default_cap(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(backoff(cap = "10ms", jitter = "full"))]
async fn below_default_base(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
