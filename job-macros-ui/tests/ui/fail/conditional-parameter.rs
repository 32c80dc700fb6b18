use job::{job, JobContext, JobError};

// A payload field that exists in some builds only: builds with and without it would read
// each other's payloads differently.
#[job]
async fn import_rows(
    ctx: JobContext,
    file: String,
    #[cfg(feature = "opentelemetry")] chunk: u32,
    #[cfg_attr(test, serde(rename = "max"))] limit: u32,
) -> Result<(), JobError> {
    let _ = (ctx, file, limit);
    Ok(())
}

fn main() {}
