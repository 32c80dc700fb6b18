use job::__private::serde_json::Value;
use job::{job, JobContext, JobError};

fn up(_from: i32, payload: Value) -> Result<Value, JobError> {
    Ok(payload)
}

#[job(upgrade = up)]
async fn no_version(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(version = 1, upgrade = up)]
async fn version_one(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
