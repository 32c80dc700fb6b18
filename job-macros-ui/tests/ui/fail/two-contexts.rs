use job::{job, JobContext, JobError};

#[job]
async fn send(ctx: JobContext, again: JobContext) -> Result<(), JobError> {
    let _ = (ctx, again);
    Ok(())
}

fn main() {}
