use job::{job, JobContext, JobError};

/// Not `Serialize`: it cannot be a job's result.
struct Receipt {
    _id: u64,
}

#[job]
async fn charge(_ctx: JobContext) -> Result<Receipt, JobError> {
    Ok(Receipt { _id: 1 })
}

fn main() {}
