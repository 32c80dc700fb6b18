use job::{job, JobContext, JobError};

#[job(rate = "100")]
async fn no_period(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(rate = "0/1m")]
async fn no_starts(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(rate = "10001/1m")]
async fn too_many_starts(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(rate = "ten/1m")]
async fn starts_in_words(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(rate = "10/soon")]
async fn not_a_period(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(rate = "10/8days")]
async fn period_too_long(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(rate = "10/500us")]
async fn period_too_short(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(rate = 100, rate = "1/s")]
async fn not_a_string_and_twice(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
