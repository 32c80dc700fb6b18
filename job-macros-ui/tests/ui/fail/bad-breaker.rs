use job::{job, JobContext, JobError};

#[job(breaker(failure_percent = 0))]
async fn no_percent(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(breaker(failure_percent = 101, min_attempts = 0))]
async fn over_a_hundred(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(breaker(failure_percent = 50, window = "500ms", cool_down = "31 days"))]
async fn durations_out_of_range(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(breaker(failure_percent = 50, half_open = 3, failure_percent = 60))]
async fn unknown_and_twice(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(breaker(window = "1m", cool_down = "5m"))]
async fn missing_failure_percent(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(breaker = 50)]
async fn not_a_list(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
