use job::{job, JobContext, JobError};

#[job]
async fn send(ctx: &JobContext) -> Result<(), JobError> {
    let _ = ctx;
    Ok(())
}

fn main() {}
