use job::{job, Discarded, JobContext, JobError};

/// Not a job: no `#[job]`, no `impl Job`.
pub struct RefundCharge {
    pub discarded: Discarded,
}

#[job(compensate = RefundCharge)]
async fn charge_card(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job]
async fn refund_wallet(_ctx: JobContext, discarded: Discarded) -> Result<(), JobError> {
    let _ = discarded;
    Ok(())
}

/// The function instead of its payload type.
#[job(compensate = refund_wallet)]
async fn charge_wallet(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
