use job::{job, JobContext, JobError};

#[job(queue = "my queue", kind = "")]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
