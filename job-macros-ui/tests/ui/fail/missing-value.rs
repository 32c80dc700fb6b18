use job::{job, JobContext, JobError};

#[job(retry, queue = "mail")]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
