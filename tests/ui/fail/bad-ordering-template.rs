use job::{job, JobContext, JobError};

// The template grammar of `unique`, with errors that name `ordering`.
#[job(ordering = "account:{account_id}}", ordering = "again")]
async fn charge_account(ctx: JobContext, account_id: i64) -> Result<(), JobError> {
    let _ = (ctx, account_id);
    Ok(())
}

#[job(ordering = "account:{account id}")]
async fn refund_account(ctx: JobContext, account_id: i64) -> Result<(), JobError> {
    let _ = (ctx, account_id);
    Ok(())
}

fn main() {}
