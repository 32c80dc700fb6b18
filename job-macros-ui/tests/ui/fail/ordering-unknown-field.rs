use job::{job, JobContext, JobError};

#[job(ordering = "account:{acount_id}")]
async fn charge_account(ctx: JobContext, account_id: i64, amount: i64) -> Result<(), JobError> {
    let _ = (ctx, account_id, amount);
    Ok(())
}

fn main() {}
