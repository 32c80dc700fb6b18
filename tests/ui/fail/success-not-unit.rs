use job::{job, JobContext, JobError};

#[job]
async fn count(_ctx: JobContext) -> Result<u64, JobError> {
    Ok(1)
}

fn main() {}
