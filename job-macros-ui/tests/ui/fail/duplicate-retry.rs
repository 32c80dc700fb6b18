use job::{job, JobContext, JobError};

#[job(retry = 5, timeout = "2m", retry = 6)]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
