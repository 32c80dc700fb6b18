use job::{job, JobContext, JobError};

struct Point {
    x: i32,
}

#[job]
async fn send(
    _ctx: JobContext,
    (a, b): (i32, i32),
    Point { x }: Point,
    _: u8,
    ref name: String,
) -> Result<(), JobError> {
    let _ = (a, b, x, name);
    Ok(())
}

fn main() {}
