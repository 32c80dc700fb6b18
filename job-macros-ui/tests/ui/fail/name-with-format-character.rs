use job::{job, JobContext, JobError};

// A zero-width space and a bidirectional override: the store refuses both in a name.
#[job(queue = "mail\u{200B}", kind = "send\u{202E}invoice")]
async fn send(_ctx: JobContext) -> Result<(), JobError> {
    Ok(())
}

fn main() {}
