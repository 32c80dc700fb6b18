use job::{job, JobContext, JobError};

#[job]
async fn typed<T: ToString>(_ctx: JobContext, value: T) -> Result<(), JobError> {
    let _ = value.to_string();
    Ok(())
}

#[job]
async fn borrowed<'a>(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job]
async fn sized<const N: usize>(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
