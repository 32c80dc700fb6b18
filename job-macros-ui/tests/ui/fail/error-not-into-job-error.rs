use job::{job, JobContext};

/// Not a `std::error::Error`, so there is no conversion into `JobError`.
#[derive(Debug)]
struct Oops;

#[job]
async fn send(_ctx: JobContext) -> Result<(), Oops> {
    Err(Oops)
}

fn main() {}
