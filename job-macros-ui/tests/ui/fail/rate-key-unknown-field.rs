use job::{job, JobContext, JobError};

#[job(rate = "10/s", rate_key = "tenant:{tenat_id}")]
async fn sync_tenant(ctx: JobContext, tenant_id: i64, account_id: i64) -> Result<(), JobError> {
    let _ = (ctx, tenant_id, account_id);
    Ok(())
}

// The template grammar of `unique`, with errors that name `rate_key`.
#[job(rate = "10/s", rate_key = "tenant:{tenant id}")]
async fn bill_tenant(ctx: JobContext, tenant_id: i64) -> Result<(), JobError> {
    let _ = (ctx, tenant_id);
    Ok(())
}

fn main() {}
