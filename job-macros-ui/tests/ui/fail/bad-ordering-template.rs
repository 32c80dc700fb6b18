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

// Two values side by side could not be told apart: `{a}{b}` is `12` for 1 and 2 and for 12
// and nothing.
#[job(unique = "move:{from}{to}")]
async fn move_stock(ctx: JobContext, from: String, to: String) -> Result<(), JobError> {
    let _ = (ctx, from, to);
    Ok(())
}

fn main() {}
