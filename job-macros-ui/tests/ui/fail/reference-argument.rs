use job::{job, JobContext, JobError};

#[job]
async fn send(
    _ctx: JobContext,
    name: &str,
    ids: impl Iterator<Item = i64>,
) -> Result<(), JobError> {
    let _ = (name, ids);
    Ok(())
}

fn main() {}
