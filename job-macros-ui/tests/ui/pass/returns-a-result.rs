use job::{job, JobContext, JobError};

#[derive(serde::Serialize)]
struct Receipt {
    charge_id: String,
    cents: i64,
}

/// Its `Ok` value is stored as the job's result.
#[job]
async fn charge(_ctx: JobContext, cents: i64) -> Result<Receipt, JobError> {
    Ok(Receipt {
        charge_id: "ch_1".into(),
        cents,
    })
}

/// Any serializable value, with an error that converts into a `JobError`.
#[job]
async fn count(_ctx: JobContext) -> std::io::Result<u64> {
    Ok(3)
}

fn main() {
    let _ = Charge { cents: 5 };
    let _ = Count {};
}
