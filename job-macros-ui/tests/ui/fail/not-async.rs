use job::{job, JobContext, JobError};

#[job(retry = 5)]
fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {
    // The function is still emitted, so its callers compile.
    let _ = send;
}
