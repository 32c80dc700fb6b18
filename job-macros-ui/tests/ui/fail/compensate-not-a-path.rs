use job::{job, JobContext, JobError};

#[job(compensate = "refund_charge")]
async fn charge_card(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

#[job(compensate = RefundCharge::new(), retry = 2)]
async fn charge_wallet(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
