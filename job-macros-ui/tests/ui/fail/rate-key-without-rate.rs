use job::{job, JobContext, JobError};

// A rate key is a window of the kind's rate limit: without `rate` there is none.
#[job(retry = 3, rate_key = "tenant:{tenant_id}")]
async fn sync_tenant(ctx: JobContext, tenant_id: i64) -> Result<(), JobError> {
    let _ = (ctx, tenant_id);
    Ok(())
}

// Both mistakes at once: no `rate`, and a placeholder that names no argument.
#[job(rate_key = "tenant:{tenant}")]
async fn bill_tenant(ctx: JobContext, tenant_id: i64) -> Result<(), JobError> {
    let _ = (ctx, tenant_id);
    Ok(())
}

fn main() {}
