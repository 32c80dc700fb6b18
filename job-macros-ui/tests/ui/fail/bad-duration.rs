use job::{job, JobContext, JobError};

#[job(timeout = "soon")]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(lease = "30")]
async fn no_unit(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
