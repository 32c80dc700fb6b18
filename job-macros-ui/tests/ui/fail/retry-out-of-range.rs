use job::{job, JobContext, JobError};

#[job(retry = 1001)]
async fn too_many(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(retry = -1)]
async fn negative(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
