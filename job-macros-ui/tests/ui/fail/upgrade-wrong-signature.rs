use job::{job, JobContext, JobError};

fn up(payload: String) -> String {
    payload
}

#[job(version = 2, upgrade = up)]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
