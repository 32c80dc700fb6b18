use job::{job, JobContext, JobError};

#[job(priority = 40000)]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
