use job::{job, JobContext, JobError};

#[job]
async fn result(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job]
async fn string(_ctx: JobContext, name: String) -> Result<(), JobError> {
    let _ = name;
    Ok(())
}

#[job]
async fn job_error(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
