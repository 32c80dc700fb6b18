use job::{job, JobContext, JobError};

struct Mailer;

impl Mailer {
    #[job]
    async fn send(&self, _ctx: JobContext) -> Result<(), JobError> {
        Ok(())
    }
}

fn main() {}
